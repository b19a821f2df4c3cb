"""An unregistered feed (no consumer, so no ingest marker) reads an ingest committed mid-history
from the manifest that committed it and that manifest's SSTs, while they are there: the first
manifest whose ``last_l0_seq`` lands in the ingest's seq gap, its new L0 SSTs at the front
(review43 of issue 43, item 1: a ``since=None`` feed that had yielded batches met the gap and
said "start again with since=None", for ever). Once the GC collected what tells or holds the
ingest, it is ``ChangesCollected`` (never a silent gap), and ``since=None`` then starts from a
snapshot instead of meeting the same gap again.
"""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pytest

from slatedb_core.compactor import Compactor
from slatedb_core.errors import ChangesCollected
from slatedb_core.feed import ChangeBatch, ChangeFeed, ChangesOptions, Cursor
from slatedb_core.gc import GarbageCollector
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions, DbOptions, GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.writer.db import Db
from tests.table.conftest import OPTS, memory
from tests.writer.ingest_steps import stage

QUIET = DbOptions(flush_interval=timedelta(hours=1))
ONE = ChangesOptions(batch_rows=1)

Row = tuple[bytes, bytes | None, bool]  # key, value, from an ingest (no wal_id)


def rows_of(batches: list[ChangeBatch]) -> list[Row]:
    return [
        (r["key"], r["value"], r["wal_id"] is None) for b in batches for r in b.rows.to_pylist()
    ]


def check_every_resume(store: ObjectStore, batches: list[ChangeBatch]) -> None:
    """Resuming from every cursor (encoded) yields exactly the rest, in seq order."""
    feed = ChangeFeed("db", store, ONE)
    for i, b in enumerate(batches):
        again = list(feed.changes(Cursor.decode(b.cursor.encode())))
        assert rows_of(again) == rows_of(batches[i + 1 :]), i
    seqs = [s for b in batches for s in b.rows.column("seq").to_pylist()]
    assert seqs == sorted(seqs)


def test_two_ingests_mid_history(store: ObjectStore) -> None:
    with Db.open("db", store, QUIET) as db:
        db.put(b"a", b"1")
        db.bulk_ingest(pa.table({"key": [b"x0", b"x1"], "value": [b"vx0", b"vx1"]}))
        db.bulk_ingest(pa.table({"key": [b"y0"], "value": [b"vy0"]}))  # right after the first
        db.put(b"b", b"2")
        db.bulk_ingest(pa.table({"key": [b"z0"], "value": [b"vz0"]}))
        db.put(b"c", b"3")
        db.flush_memtable()
    batches = list(ChangeFeed("db", store, ONE).changes(None))
    assert rows_of(batches) == [
        (b"a", b"1", False),
        (b"x0", b"vx0", True),
        (b"x1", b"vx1", True),
        (b"y0", b"vy0", True),
        (b"b", b"2", False),
        (b"z0", b"vz0", True),
        (b"c", b"3", False),
    ]
    assert not any(r["snapshot"] for b in batches for r in b.rows.to_pylist())
    check_every_resume(store, batches)


def test_an_ingest_of_three_ssts(store: ObjectStore) -> None:
    srcs = [
        stage(store, f"s{i}", [(b"k%d%d" % (i, j), b"v%d" % j) for j in range(2)]) for i in range(3)
    ]
    with Db.open("db", store, QUIET) as db:
        db.put(b"a", b"1")
        assert db.ingest_ssts(srcs).ssts == 3
        db.put(b"b", b"2")
        db.flush_memtable()
    batches = list(ChangeFeed("db", store, ONE).changes(None))
    got = rows_of(batches)
    assert got[0] == (b"a", b"1", False) and got[-1] == (b"b", b"2", False)
    assert sorted(got[1:-1]) == [
        (b"k%d%d" % (i, j), b"v%d" % j, True) for i in range(3) for j in range(2)
    ]
    check_every_resume(store, batches)


def test_the_commit_manifest_collected_is_changes_collected_and_since_none_bootstraps(
    store: ObjectStore,
) -> None:
    with Db.open("db", store, QUIET) as db:
        db.put(b"a", b"1")
        start = list(ChangeFeed("db", store).changes(None))[-1].cursor
        db.bulk_ingest(pa.table({"key": [b"y"], "value": [b"v"]}))
        db.put(b"b", b"2")
        db.flush_memtable()
        db.put(b"c", b"3")
        db.flush_memtable()
    # manifests collected at once; the WAL and the SSTs kept
    gc = GarbageCollectorOptions(min_age=timedelta(hours=1), manifest_min_age=timedelta(0))
    GarbageCollector("db", store, gc).run_once()
    assert ManifestStore(store, "db").list()[0].id > 2  # the ingest's commit is gone
    with pytest.raises(ChangesCollected, match="ingest"):
        list(ChangeFeed("db", store, ONE).changes(start))
    batches = list(ChangeFeed("db", store, ONE).changes(None))
    got = rows_of(batches)
    assert sorted((k, v) for k, v, _ in got) == [
        (b"a", b"1"),
        (b"b", b"2"),
        (b"c", b"3"),
        (b"y", b"v"),
    ]
    assert batches[0].rows.column("snapshot")[0].as_py()


def test_a_compaction_between_batches(store: ObjectStore) -> None:
    """The ingest's L0 SST compacted away between two batches: the feed reads it through the
    manifest that committed it (the SST is there until the GC); once the GC deleted it, a
    cursor before it is ChangesCollected."""
    with Db.open("db", store, QUIET) as db:
        db.put(b"a", b"1")
        db.bulk_ingest(pa.table({"key": [b"y0", b"y1"], "value": [b"v0", b"v1"]}))
        db.put(b"b", b"2")
        db.flush_memtable()
    feed = ChangeFeed("db", store, ONE)
    it = feed.changes(None)
    first = next(it)
    assert rows_of([first]) == [(b"a", b"1", False)]
    with Compactor("db", store, CompactorOptions(l0_trigger=1)) as c:
        assert c.run_once().compactions >= 1
    assert not ManifestStore(store, "db").read_latest().manifest.l0
    rest = list(it)
    assert rows_of(rest) == [(b"y0", b"v0", True), (b"y1", b"v1", True), (b"b", b"2", False)]
    again = list(feed.changes(first.cursor))  # a new call, after the compaction
    assert rows_of(again) == rows_of(rest)
    GarbageCollector("db", store, GarbageCollectorOptions(min_age=timedelta(0))).run_once()
    with pytest.raises(ChangesCollected):
        list(feed.changes(first.cursor))


def test_ingests_on_a_table_overwrite_target() -> None:
    """An overwrite builds each new shard with one ingest of its staged SSTs (stated seqs,
    copied as they are), and a later ingest into it lands mid-history: the shard's own feed
    with no cursor reads both through the manifests that committed them, and the table's feed
    from a cursor after the overwrite reads the later one in order."""
    store = memory()
    with Table.create("t", store, [], OPTS) as table:
        table.overwrite([pa.record_batch({"key": [b"g", b"k"], "value": [b"ow", b"ow"]})])
        shard = table.maps.read_latest().shards[0]
        after = table.changes_tail()
        with table.writer(0, QUIET) as db:
            db.put(b"a", b"1")
            db.bulk_ingest(pa.table({"key": [b"y0", b"y1"], "value": [b"v0", b"v1"]}))
            db.put(b"b", b"2")
            db.flush_memtable()
        got = rows_of(list(ChangeFeed(shard.db_path, store, ONE).changes(None)))
        assert sorted(got[:2]) == [(b"g", b"ow", True), (b"k", b"ow", True)]
        assert got[2:] == [
            (b"a", b"1", False),
            (b"y0", b"v0", True),
            (b"y1", b"v1", True),
            (b"b", b"2", False),
        ]
        later = [
            (r["key"], r["value"])
            for b in table.changes(after, ChangesOptions(batch_rows=1))
            for r in b.rows.to_pylist()
        ]
        assert later == [(b"a", b"1"), (b"y0", b"v0"), (b"y1", b"v1"), (b"b", b"2")]


def test_an_unmarked_ingest_right_before_a_marked_one(store: ObjectStore) -> None:
    """Ingest A, no consumer yet; a consumer registers; ingest B, marked for it; no write
    between them, so one seq gap holds both. B's marker reaches the gap's end but does not
    fill it: an unregistered feed (and the consumer, resuming from a cursor before its
    registration) still reads A, never skips it."""
    with Db.open("db", store, QUIET) as db:
        db.put(b"a", b"1")
        start = list(ChangeFeed("db", store).changes(None))[-1].cursor
        db.bulk_ingest(pa.table({"key": [b"x"], "value": [b"vx"]}))
        list(ChangeFeed("db", store, ChangesOptions(consumer="etl")).changes(None))
        db.bulk_ingest(pa.table({"key": [b"y"], "value": [b"vy"]}))
        db.put(b"b", b"2")
        db.flush_memtable()
    want = [(b"x", b"vx", True), (b"y", b"vy", True), (b"b", b"2", False)]
    assert rows_of(list(ChangeFeed("db", store, ONE).changes(start))) == want
    etl = ChangeFeed("db", store, ChangesOptions(consumer="etl", batch_rows=1))
    assert rows_of(list(etl.changes(start))) == want


def test_ingests_after_the_last_wal_row(store: ObjectStore) -> None:
    """No write after the ingests yet: the latest manifest's last_l0_seq is past every WAL row,
    and the manifests that committed them tell their rows, resumed inside them too."""
    with Db.open("db", store, QUIET) as db:
        db.put(b"a", b"1")
        start = list(ChangeFeed("db", store).changes(None))[-1].cursor
        db.bulk_ingest(pa.table({"key": [b"y0", b"y1"], "value": [b"v0", b"v1"]}))
        db.bulk_ingest(pa.table({"key": [b"z"], "value": [b"vz"]}))
        batches = list(ChangeFeed("db", store, ONE).changes(start))
        assert rows_of(batches) == [(b"y0", b"v0", True), (b"y1", b"v1", True), (b"z", b"vz", True)]
        check_every_resume(store, batches)
        db.put(b"b", b"2")
        assert rows_of(list(ChangeFeed("db", store).changes(batches[-1].cursor))) == [
            (b"b", b"2", False)
        ]
