"""Rows that reach L0 without the WAL (``Db.ingest_ssts``, ``Db.bulk_ingest``) are committed
changes: a registered consumer's feed delivers them in commit order, once, on resume too, and
through a compaction that merges their L0 SSTs and a GC pass; an unregistered feed, which has no
marker to find them by, reads them through the manifests that committed them, and once the GC
collected those says so (``ChangesCollected``) rather than skip them (issue 43, item 2:
"every committed change" covers the ingest gap of item 1).
"""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pytest

from slatedb_core.compactor import Compactor
from slatedb_core.errors import ChangesCollected
from slatedb_core.feed import ChangeBatch, ChangeFeed, ChangesOptions, Cursor
from slatedb_core.feed.ingests import INGEST_PREFIX
from slatedb_core.gc import GarbageCollector
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions, DbOptions, GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db
from tests.writer.ingest_steps import stage

QUIET = DbOptions(flush_interval=timedelta(hours=1))
ZERO = GarbageCollectorOptions(min_age=timedelta(0))


def rows_of(batches: list[ChangeBatch]) -> list[tuple[bytes, bytes | None, bool]]:
    return [
        (r["key"], r["value"], r["wal_id"] is None) for b in batches for r in b.rows.to_pylist()
    ]


def write_with_ingests(store: ObjectStore) -> None:
    """put a; put b; ingest_ssts of x0..x2; put c; bulk_ingest of y0..y1; put d."""
    src = stage(store, "x", [(b"x%d" % i, b"vx%d" % i) for i in range(3)])
    with Db.open("db", store, QUIET) as db:
        db.put(b"a", b"1")
        db.put(b"b", b"2")
        db.ingest_ssts([src])
        db.put(b"c", b"3")
        db.bulk_ingest(pa.table({"key": [b"y0", b"y1"], "value": [b"vy0", b"vy1"]}))
        db.put(b"d", b"4")


EXPECTED = [
    (b"a", b"1", False),
    (b"b", b"2", False),
    (b"x0", b"vx0", True),
    (b"x1", b"vx1", True),
    (b"x2", b"vx2", True),
    (b"c", b"3", False),
    (b"y0", b"vy0", True),
    (b"y1", b"vy1", True),
    (b"d", b"4", False),
]


def test_ingested_rows_are_delivered_between_the_puts_once(store: ObjectStore) -> None:
    opts = ChangesOptions(consumer="ingests", batch_rows=1)
    with Db.open("db", store, QUIET) as db:
        db.put(b"_", b"0")
        first = list(db.changes(None, opts))  # registers the consumer
    start = first[-1].cursor
    write_with_ingests(store)
    feed = ChangeFeed("db", store, opts)
    batches = list(feed.changes(start))
    assert rows_of(batches) == EXPECTED
    seqs = [s for b in batches for s in b.rows.column("seq").to_pylist()]
    assert seqs == sorted(seqs)  # an ingest_ssts source re-encoded shares one seq
    # resuming from every cursor (the encoded one) yields exactly the rest
    for i, b in enumerate(batches):
        again = list(feed.changes(Cursor.decode(b.cursor.encode())))
        assert rows_of(again) == rows_of(batches[i + 1 :]), i


def test_ingested_rows_survive_compaction_and_gc(store: ObjectStore) -> None:
    opts = ChangesOptions(consumer="slow", batch_rows=100)
    with Db.open("db", store, QUIET) as db:
        db.put(b"_", b"0")
        start = list(db.changes(None, opts))[-1].cursor
    write_with_ingests(store)
    with Db.open("db", store, QUIET) as db:
        db.flush_memtable()
    with Compactor("db", store, CompactorOptions(l0_trigger=1)) as c:
        assert c.run_once().compactions >= 1
    GarbageCollector("db", store, ZERO).run_once()
    assert rows_of(list(ChangeFeed("db", store, opts).changes(start))) == EXPECTED


def test_an_unregistered_feed_behind_an_ingest_is_told(store: ObjectStore) -> None:
    with Db.open("db", store, QUIET) as db:
        db.put(b"_", b"0")
        start = list(db.changes())[-1].cursor
    write_with_ingests(store)
    # read through the manifests that committed them (review43) while they are there
    assert (
        rows_of(list(ChangeFeed("db", store, ChangesOptions(batch_rows=1)).changes(start)))
        == EXPECTED
    )
    gc = GarbageCollectorOptions(min_age=timedelta(hours=1), manifest_min_age=timedelta(0))
    GarbageCollector("db", store, gc).run_once()
    with pytest.raises(ChangesCollected, match="ingest"):
        list(ChangeFeed("db", store).changes(start))


def test_markers_go_once_delivered_or_released(store: ObjectStore) -> None:
    def markers() -> list[str]:
        m = ManifestStore(store, "db").read_latest().manifest
        return [c.name for c in m.checkpoints if c.name and c.name.startswith(INGEST_PREFIX)]

    for name in ("one", "two"):
        with Db.open("db", store, QUIET) as db:
            db.put(b"_", b"0")
            list(db.changes(None, ChangesOptions(consumer=name)))
    write_with_ingests(store)
    assert len(markers()) == 4  # two ingests, one marker each per consumer
    one = ChangeFeed("db", store, ChangesOptions(consumer="one"))
    last = list(one.changes(Cursor()))[-1].cursor
    assert not any(b.rows.num_rows for b in one.changes(last))  # its hold moves to ``last``
    assert all(n.endswith(":two") for n in markers()) and len(markers()) == 2
    ChangeFeed("db", store, ChangesOptions(consumer="two")).release()
    assert markers() == []
