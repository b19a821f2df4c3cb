"""A registered consumer of a table's change feed (issue 43, item 2; the database version is
tests/feed/test_retention.py): its changes stay alive on every shard, through flushes,
compactions and GC passes with no WAL retention, across a split, a merge and an overwrite,
and a retired shard's hold is released only once the consumer resumed from a cursor past it.
An unregistered consumer reading alongside it gets ChangesCollected.
"""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pytest

from slatedb_core.compactor.compactor import Compactor
from slatedb_core.errors import ChangesCollected, InvalidArgument
from slatedb_core.feed import ChangesOptions, Cursor
from slatedb_core.feed.retention import consumers
from slatedb_core.gc import GarbageCollector
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions, GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.table.changes import TableChangeFeed, TableCursor, shard_consumer
from tests.table.conftest import OPTS, fill, memory

ZERO = GarbageCollectorOptions(min_age=timedelta(0), db_delete_grace=timedelta(0))
KEYS = (b"a", b"g", b"n", b"t")


def churn(table: Table) -> None:
    """An L0 flush is done by ``fill``; then a compaction of every live shard and a GC pass
    with no retention on every shard database, retired ones included."""
    m = table.maps.read_latest()
    for s in m.shards:
        with Compactor(s.db_path, table.store, CompactorOptions(l0_trigger=1)) as c:
            c.run_once()
    for path in [s.db_path for s in m.shards] + list(m.retired):
        GarbageCollector(path, table.store, ZERO).run_once()


def read(
    table: Table, since: TableCursor | None, opts: ChangesOptions, upto: int | None = None
) -> tuple[list[tuple[bytes, bytes | None]], TableCursor | None]:
    """The changes after ``since`` (the first ``upto`` batches only: a consumer that stops,
    or crashes before persisting more) and the last cursor it would persist."""
    got: list[tuple[bytes, bytes | None]] = []
    last = since
    for i, b in enumerate(table.changes(since, opts)):
        if upto is not None and i >= upto:
            break
        got += [(r["key"], r["value"]) for r in b.rows.to_pylist()]
        last = b.cursor
    return got, last


def holders(store: ObjectStore, db_path: str) -> set[str]:
    try:
        return set(consumers(ManifestStore(store, db_path).read_latest().manifest))
    except Exception:  # the GC deleted the database: it holds nothing
        return set()


def test_a_consumer_keeps_its_changes_through_rescales_overwrite_and_gc() -> None:
    store = memory()
    etl = ChangesOptions(batch_rows=1, consumer="etl")
    plain = ChangesOptions(batch_rows=1)
    seen: list[tuple[bytes, bytes | None]] = []
    expected: dict[bytes, list[bytes | None]] = {}

    def put(rows: dict[bytes, bytes], *, flush: bool = True) -> None:
        fill(table, rows, flush=flush)
        for k, v in rows.items():
            expected.setdefault(k, []).append(v)

    with Table.create("t", store, [b"m"], OPTS) as table:
        put({k: b"r0" for k in KEYS}, flush=False)  # registered before the first flush
        got, cursor = read(table, None, etl, upto=1)
        seen += got
        _, lagging = read(table, None, plain, upto=1)
        assert lagging is not None
        live = [s.db_path for s in table.shards]
        assert all(shard_consumer("etl") in holders(store, p) for p in live[:1])
        assert all("etl" not in holders(store, p) for p in live)  # a per-table name

        put({k: b"r1" for k in KEYS})
        churn(table)
        got, cursor = read(table, cursor, etl, upto=3)
        seen += got

        put({b"a": b"r1b", b"g": b"r1b"})  # in the shard about to split, unread
        table.split(0, b"f")
        put({k: b"r2" for k in KEYS})
        churn(table)
        # the consumer reads into the retired shard, then reads past it but crashes before
        # persisting a cursor past it
        got, cursor = read(table, cursor, etl, upto=1)
        seen += got
        assert cursor is not None
        retired = table.maps.read_latest().retired
        assert retired and {p for p, c in cursor.shards if isinstance(c, Cursor)} & {
            p.removeprefix("t/") for p in retired
        }
        list(table.changes(cursor, etl))  # read to the end, nothing persisted
        churn(table)
        assert all(shard_consumer("etl") in holders(store, p) for p in retired)
        got, cursor = read(table, cursor, etl)
        seen += got

        table.merge(0)
        put({b"a": b"r3", b"g": b"r3"})
        with table.writer(0) as db:
            db.delete(b"g")
            db.flush_memtable()
        expected[b"g"].append(None)
        churn(table)
        got, cursor = read(table, cursor, etl)
        seen += got
        # the consumer resumed from a cursor past the split's and merge's sources: released
        got, cursor = read(table, cursor, etl)
        assert got == []
        for p in table.maps.read_latest().retired:
            assert shard_consumer("etl") not in holders(store, p)

        table.overwrite([pa.record_batch({"key": [b"g", b"z"], "value": [b"ow", b"ow"]})])
        for k in (b"a", b"n", b"t"):
            expected[k].append(None)  # each live key deleted, then the new contents
        expected[b"g"].append(b"ow")
        expected[b"z"] = [b"ow"]
        put({b"a": b"r4", b"z": b"r4"})
        churn(table)
        put({k: b"r5" for k in KEYS})
        churn(table)
        got, cursor = read(table, cursor, etl)
        seen += got
        got, cursor = read(table, cursor, etl)
        assert got == []

        per_key: dict[bytes, list[bytes | None]] = {}
        for k, v in seen:
            per_key.setdefault(k, []).append(v)
        assert per_key == expected  # every change once, each key's in order
        with pytest.raises(ChangesCollected):
            list(table.changes(lagging, plain))
        for p in table.maps.read_latest().retired:
            assert shard_consumer("etl") not in holders(store, p)


def test_a_table_consumer_is_released_everywhere() -> None:
    store = memory()
    etl = ChangesOptions(consumer="etl")
    with Table.create("t", store, [b"m"], OPTS) as table:
        fill(table, {k: b"1" for k in KEYS})
        cursor = read(table, None, etl)[1]
        table.split(0, b"f")
        TableChangeFeed("t", store, table.maps, etl).release()
        paths = [s.db_path for s in table.shards] + list(table.maps.read_latest().retired)
        assert cursor is not None and all(not holders(store, p) for p in paths)
        with pytest.raises(InvalidArgument):
            list(table.changes(None, ChangesOptions(consumer="x" * 200)))
