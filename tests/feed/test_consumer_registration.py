"""A registered consumer's registration record (``slatedb_core.feed.registrations``): a
consumer follows ingests by their markers only from its registration on, so a cursor from
before it is settled as an unregistered feed's would be (issue 43, item 1: a consumer behind a
lapsed checkpoint, or registered with an older cursor, gets ``ChangesCollected``, never a silent
gap; and ``release()`` unregisters it).
"""

from __future__ import annotations

import time
from datetime import timedelta

import pyarrow as pa
import pytest

from slatedb_core.errors import ChangesCollected, InjectedFault
from slatedb_core.feed import ChangeFeed, ChangesOptions, Cursor
from slatedb_core.feed.registrations import read_registration, registrations
from slatedb_core.gc import GarbageCollector
from slatedb_core.layout import consumer_record_path
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions, GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.testing import FaultyStore
from slatedb_core.writer.db import Db

QUIET = DbOptions(flush_interval=timedelta(hours=1))
INGEST = pa.table({"key": [b"y0", b"y1"], "value": [b"v0", b"v1"]})


def keys(feed: ChangeFeed, since: Cursor | None) -> list[bytes]:
    return [r["key"] for b in feed.changes(since) for r in b.rows.to_pylist()]


def end_of(feed: ChangeFeed, since: Cursor | None) -> Cursor:
    cursor = since
    for b in feed.changes(since):
        cursor = b.cursor
    assert cursor is not None
    return cursor


def test_a_consumer_registered_with_an_older_cursor_never_skips_an_ingest_before_it(
    store: ObjectStore,
) -> None:
    with Db.open("db", store, QUIET) as db:
        db.put(b"a", b"1")
        old = end_of(ChangeFeed("db", store), None)  # read unregistered
        db.bulk_ingest(INGEST)  # no consumer yet: no marker
        db.put(b"b", b"2")
        db.flush_memtable()
    late = ChangeFeed("db", store, ChangesOptions(consumer="late"))
    # no marker names it: read through the manifest that committed it (review43)
    assert keys(late, old) == [b"y0", b"y1", b"b"]
    gc = GarbageCollectorOptions(min_age=timedelta(hours=1), manifest_min_age=timedelta(0))
    GarbageCollector("db", store, gc).run_once()
    with pytest.raises(ChangesCollected, match="registration marks ingests above seq"):
        keys(late, old)
    # from its registration on it follows ingests: a snapshot, then a marked ingest
    start = end_of(late, None)
    with Db.open("db", store, QUIET) as db:
        db.bulk_ingest(pa.table({"key": [b"z"], "value": [b"v"]}))
        db.put(b"c", b"3")
    assert keys(late, start) == [b"z", b"c"]


def test_a_consumer_back_after_a_lapse_that_missed_nothing_goes_on(store: ObjectStore) -> None:
    """Its checkpoint lapsed and the GC removed it (manifests younger than ``min_age`` kept),
    but the WAL is whole and the only seq gap is a failed ingest's: registered again, it goes
    on, every change delivered once."""
    opts = ChangesOptions(consumer="etl", consumer_lifetime=timedelta(seconds=1))
    faulty = FaultyStore(store)
    with Db.open("db", faulty, QUIET) as db:
        db.put(b"a", b"1")
        feed = ChangeFeed("db", store, opts)
        cursor = end_of(feed, None)
        before = read_registration(store, "db", "etl")
        assert before is not None
        time.sleep(2.1)  # the consumer's checkpoint expires
        faulty.fail_next("put_if_absent", "db/compacted/*")
        with pytest.raises(InjectedFault):
            db.bulk_ingest(INGEST)
        db.put(b"b", b"2")
        db.flush_memtable()
    GarbageCollector("db", store, GarbageCollectorOptions()).run_once()
    m = ManifestStore(store, "db").read_latest().manifest
    assert not [c for c in m.checkpoints if c.name == "changes-consumer:etl"]  # removed
    assert keys(feed, cursor) == [b"b"]
    after = read_registration(store, "db", "etl")
    assert after is not None and after.checkpoint != before.checkpoint
    assert after.marked_after > before.marked_after  # registered again, later


def test_the_record_follows_the_checkpoint_and_release_deletes_both(store: ObjectStore) -> None:
    opts = ChangesOptions(consumer="c1")
    with Db.open("db", store, QUIET) as db:
        db.put(b"a", b"1")
        feed = ChangeFeed("db", store, opts)
        cursor = end_of(feed, None)
        db.put(b"b", b"2")
        db.flush_memtable()
        cursor = end_of(feed, cursor)
        end_of(feed, cursor)  # moves the checkpoint past the flush

    def checkpoints() -> list[str]:
        m = ManifestStore(store, "db").read_latest().manifest
        return [str(c.id) for c in m.checkpoints if c.name == "changes-consumer:c1"]

    reg = read_registration(store, "db", "c1")
    assert reg is not None and [str(reg.checkpoint)] == checkpoints()
    # the cursor it resumed from when the checkpoint last moved (past the flush)
    assert reg.floor is not None and 0 < Cursor.decode(reg.floor).seq <= cursor.seq
    assert [r.consumer for r in registrations(store, "db")] == ["c1"]
    feed.release()
    assert checkpoints() == []
    assert not store.exists(consumer_record_path("db", "c1"))
    assert registrations(store, "db") == []


def test_a_record_that_names_another_checkpoint_is_not_trusted(store: ObjectStore) -> None:
    """A record written for an earlier checkpoint (a crash between the manifest update and the
    record's write) must not let the consumer take a committed unmarked ingest for a failed
    one: the feed falls back to the manifest's L0 seq."""
    opts = ChangesOptions(consumer="etl")
    with Db.open("db", store, QUIET) as db:
        db.put(b"a", b"1")
        old = end_of(ChangeFeed("db", store), None)
        feed = ChangeFeed("db", store, opts)
        end_of(feed, None)
        stale = store.get(consumer_record_path("db", "etl")).data
        db.put(b"b", b"2")
        db.flush_memtable()
        end_of(feed, old)  # not behind an ingest: delivered, the checkpoint moves
        store.put(consumer_record_path("db", "etl"), bytes(stale))
        reg = read_registration(store, "db", "etl")
        assert reg is not None and reg.marked_after == 0
        db.bulk_ingest(INGEST)  # marked: delivered
        db.put(b"c", b"3")
        db.flush_memtable()
    assert keys(feed, old) == [b"b", b"y0", b"y1", b"c"]


def test_a_lapsed_consumer_is_unregistered_by_release(store: ObjectStore) -> None:
    """Its checkpoint expired and the GC removed it: ``release()`` still deletes its record."""
    opts = ChangesOptions(consumer="gone", consumer_lifetime=timedelta(seconds=1))
    with Db.open("db", store, QUIET) as db:
        db.put(b"a", b"1")
    feed = ChangeFeed("db", store, opts)
    end_of(feed, None)
    time.sleep(2.1)
    GarbageCollector("db", store, GarbageCollectorOptions()).run_once()
    assert [r.consumer for r in registrations(store, "db")] == ["gone"]
    feed.release()
    assert registrations(store, "db") == []
