"""A consumer whose hold is applied with a clock reading taken before its checkpoint lapsed
(the consumer stalled between reading the time and committing its edit; review43 of issue
43, item 1). An ingest that committed while the checkpoint was expired got no marker for it;
the late edit revives the checkpoint, and the registration record must not then vouch for a
marker that was never written: the ingest's gap is ``ChangesCollected``, never skipped.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pyarrow as pa

from slatedb_core.errors import ChangesCollected
from slatedb_core.feed import ChangeFeed, ChangesOptions, Cursor
from slatedb_core.feed.retention import hold
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db

QUIET = DbOptions(flush_interval=timedelta(hours=1))
LIFE = timedelta(seconds=2)


def rows(feed: ChangeFeed, since: Cursor | None) -> tuple[list[bytes], Cursor | None]:
    out: list[bytes] = []
    cursor = since
    for b in feed.changes(since):
        out.extend(r["key"] for r in b.rows.to_pylist())
        cursor = b.cursor
    return out, cursor


def test_a_hold_with_a_stale_clock_never_vouches_for_an_unmarked_ingest(
    store: ObjectStore,
) -> None:
    opts = ChangesOptions(consumer="etl", consumer_lifetime=LIFE)
    feed = ChangeFeed("db", store, opts)
    with Db.open("db", store, QUIET) as db:
        db.put(b"a", b"1")
        _, c1 = rows(feed, None)
        assert c1 is not None
        m = ManifestStore(store, "db").read_latest().manifest
        (cp,) = [c for c in m.checkpoints if c.name == "changes-consumer:etl"]
        assert cp.expire_time_s is not None
        stale = cp.expire_time_s - 0.5  # the consumer read its clock here, then stalled
        while time.time() <= cp.expire_time_s + 0.2:
            time.sleep(0.1)
        db.bulk_ingest(pa.table({"key": [b"y"], "value": [b"v"]}))  # lapsed: no marker
        db.put(b"b", b"2")
        db.flush_memtable()
    hold(ManifestStore(store, "db"), "etl", c1, LIFE, stale)  # the stalled edit lands now
    try:
        got, _ = rows(feed, c1)
    except ChangesCollected:
        return
    assert got == [b"y", b"b"]


def test_an_ingest_marks_a_lapsed_but_present_consumer(store: ObjectStore) -> None:
    """The writer's clock ahead of the consumer's (two machines): the ingest commits after the
    consumer's checkpoint expired by the writer's clock, and the consumer, by its own, still
    finds it live and trusts its record. So an ingest marks every consumer checkpoint still
    in the manifest, expired or not (the GC removes the checkpoint and its markers in one
    update), and the revived consumer finds the marker."""
    opts = ChangesOptions(consumer="etl", consumer_lifetime=LIFE)
    feed = ChangeFeed("db", store, opts)
    with Db.open("db", store, QUIET) as db:
        db.put(b"a", b"1")
        _, c1 = rows(feed, None)
        m = ManifestStore(store, "db").read_latest().manifest
        (cp,) = [c for c in m.checkpoints if c.name == "changes-consumer:etl"]
        assert cp.expire_time_s is not None
        while time.time() <= cp.expire_time_s + 0.2:
            time.sleep(0.1)
        db.bulk_ingest(pa.table({"key": [b"y"], "value": [b"v"]}))
        db.put(b"b", b"2")
        db.flush_memtable()
    m = ManifestStore(store, "db").read_latest().manifest
    marks = [c.name for c in m.checkpoints if c.name and c.name.startswith("changes-ingest:")]
    assert [n.rsplit(":", 1)[1] for n in marks] == ["etl"]
    assert rows(feed, c1)[0] == [b"y", b"b"]  # back, it finds the marker: delivered once
