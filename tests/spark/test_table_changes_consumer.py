"""A table's change stream with option ``consumer`` (issue 43, items 2 and 3): the stream holds
every shard under the table consumer's name from its first offset on, so a micro-batch not yet
committed reads the same rows after flushes, a split, compactions and GC passes with no
retention; committing it moves the holds on and releases the retired shard. A stream without
the consumer, reading the same batch afterwards, gets ChangesCollected. (The reader is driven
as Spark drives it, without a session: tests/spark/test_table_changes_overwrite.py runs a
query.)
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from slatedb_core import Table, open_store
from slatedb_core.compactor.compactor import Compactor
from slatedb_core.errors import ChangesCollected
from slatedb_core.feed.retention import consumers
from slatedb_core.gc import GarbageCollector
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions, GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table.changes import shard_consumer
from spark_jobs.changes_source import ChangesStreamReader
from tests.table.conftest import OPTS, fill

pytestmark = [pytest.mark.spark]

TABLE = "events"
ZERO = GarbageCollectorOptions(min_age=timedelta(0), db_delete_grace=timedelta(0))
Row = tuple[bytes, bytes | None]


def churn(table: Table) -> None:
    """A compaction of every live shard, then a GC pass with no retention on every shard
    database, retired ones included."""
    m = table.maps.read_latest()
    for s in m.shards:
        with Compactor(s.db_path, table.store, CompactorOptions(l0_trigger=1)) as c:
            c.run_once()
    for path in [s.db_path for s in m.shards] + list(m.retired):
        GarbageCollector(path, table.store, ZERO).run_once()


def holders(store: ObjectStore, db_path: str) -> set[str]:
    try:
        return set(consumers(ManifestStore(store, db_path).read_latest().manifest))
    except Exception:  # the GC deleted the database: it holds nothing
        return set()


def batch(reader: ChangesStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[Row]:
    return [
        (r["key"], r["value"])
        for p in reader.partitions(start, end)
        for b in reader.read(p)
        for r in b.to_pylist()
    ]


def test_a_table_streams_consumer_holds_every_shard_until_committed(store_url: str) -> None:
    store = open_store(store_url)
    name = shard_consumer("to-delta")
    with Table.create(TABLE, store, [b"m"], OPTS) as table:
        fill(table, {b"a": b"r0", b"n": b"r0"})
        options = {"url": store_url, "path": TABLE, "starting": "earliest", "batch_rows": "2"}
        reader = ChangesStreamReader({**options, "consumer": "to-delta"})
        plain = ChangesStreamReader(options)
        start = reader.initialOffset()
        assert all(name in holders(store, s.db_path) for s in table.shards)
        end = reader.latestOffset(start, None)
        first = batch(reader, start, end)
        assert sorted(first) == [(b"a", b"r0"), (b"n", b"r0")]
        # the batch is not committed yet: flushes, a split, compactions and GC passes
        fill(table, {b"a": b"r1", b"n": b"r1"}, flush=True)
        parent = table.shards[0].db_path
        table.split(0, b"f")
        fill(table, {b"a": b"r2", b"n": b"r2"}, flush=True)
        churn(table)
        assert batch(reader, start, end) == first  # Spark runs it again: the same rows
        reader.commit(end)
        second_end = reader.latestOffset(end, None)
        second = batch(reader, end, second_end)
        assert name in holders(store, parent)  # the batch reading past it is not committed
        reader.commit(second_end)
        assert reader.latestOffset(second_end, None) == second_end
        assert name not in holders(store, parent)  # released once committed past it
        churn(table)
        per_key: dict[bytes, list[bytes | None]] = {}
        for k, v in first + second:
            per_key.setdefault(k, []).append(v)
        assert per_key == {b"a": [b"r0", b"r1", b"r2"], b"n": [b"r0", b"r1", b"r2"]}
        with pytest.raises(ChangesCollected):
            batch(plain, start, end)


def test_a_consumer_streams_a_flushed_table_from_earliest(store_url: str) -> None:
    """``starting=earliest`` is every shard's WAL from SST 1 with the consumer too, the rows
    the same stream without it reads: a shard whose WAL already reached L0 (still whole) is
    not bootstrapped for a new consumer (a stream never bootstraps)."""
    store = open_store(store_url)
    with Table.create(TABLE, store, [b"m"], OPTS) as table:
        fill(table, {b"a": b"r0", b"n": b"r0"}, flush=True)
        fill(table, {b"a": b"r1"})
        options = {"url": store_url, "path": TABLE, "starting": "earliest"}
        reader = ChangesStreamReader({**options, "consumer": "to-delta"})
        start = reader.initialOffset()
        end = reader.latestOffset(start, None)
        assert batch(reader, start, end) == batch(ChangesStreamReader(options), start, end)
        assert sorted(batch(reader, start, end)) == [(b"a", b"r0"), (b"a", b"r1"), (b"n", b"r0")]
