"""An ingest that reserved seqs and never committed leaves a seq gap in the WAL that no rows
fill. An unregistered feed (no consumer, so no ingest markers) must not take it for a committed
ingest it cannot see: no ``ChangesCollected``, every change delivered once (issue 43, item 1:
a cursor is ``ChangesCollected`` only when changes were really lost). A committed ingest behind
the same kind of gap is read through the manifest that committed it, or, once the GC collected
that manifest, is ``ChangesCollected`` for it.
"""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pytest

from slatedb_core.errors import ChangesCollected, InjectedFault
from slatedb_core.feed import ChangeFeed, Cursor
from slatedb_core.gc import GarbageCollector
from slatedb_core.options import DbOptions, GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.testing import FaultyStore
from slatedb_core.writer.db import Db

QUIET = DbOptions(flush_interval=timedelta(hours=1))


def keys(feed: ChangeFeed, since: Cursor | None) -> list[bytes]:
    return [r["key"] for b in feed.changes(since) for r in b.rows.to_pylist()]


def write_around_a_failed_ingest(store: ObjectStore) -> Cursor:
    """put a (the cursor after it is returned); a bulk ingest whose SST write fails after it
    reserved its seqs; put b; put c; flush, so L0 covers the gap."""
    faulty = FaultyStore(store)
    with Db.open("db", faulty, QUIET) as db:
        db.put(b"a", b"1")
        start = list(ChangeFeed("db", store).changes(None))[-1].cursor
        faulty.fail_next("put_if_absent", "db/compacted/*")
        with pytest.raises(InjectedFault):
            db.bulk_ingest(pa.table({"key": [b"y0", b"y1"], "value": [b"v0", b"v1"]}))
        db.put(b"b", b"2")
        db.put(b"c", b"3")
        db.flush_memtable()
    return start


def test_an_unregistered_feed_goes_past_a_failed_ingests_gap(store: ObjectStore) -> None:
    start = write_around_a_failed_ingest(store)
    seqs = [
        s for b in ChangeFeed("db", store).changes(None) for s in b.rows.column("seq").to_pylist()
    ]
    assert seqs[1] - seqs[0] == 3  # the two seqs the ingest reserved: a real gap
    assert keys(ChangeFeed("db", store), None) == [b"a", b"b", b"c"]
    assert keys(ChangeFeed("db", store), start) == [b"b", b"c"]


def test_a_committed_unmarked_ingest_behind_a_gap_is_read_or_changes_collected(
    store: ObjectStore,
) -> None:
    """The manifest that committed it tells the ingest's rows (review43); once the GC collected
    it, the gap is ChangesCollected, never skipped."""
    with Db.open("db", store, QUIET) as db:
        db.put(b"a", b"1")
        start = list(ChangeFeed("db", store).changes(None))[-1].cursor
        db.bulk_ingest(pa.table({"key": [b"y0", b"y1"], "value": [b"v0", b"v1"]}))
        db.put(b"b", b"2")
        db.flush_memtable()
    assert keys(ChangeFeed("db", store), start) == [b"y0", b"y1", b"b"]
    gc = GarbageCollectorOptions(min_age=timedelta(hours=1), manifest_min_age=timedelta(0))
    GarbageCollector("db", store, gc).run_once()
    with pytest.raises(ChangesCollected, match="ingest"):
        keys(ChangeFeed("db", store), start)
