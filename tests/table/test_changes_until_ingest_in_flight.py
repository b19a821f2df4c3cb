"""review43, issue 43: a read up to an end cursor (a Spark micro-batch, ``Table.changes(until=)``,
``ChangeFeed.changes(until=)``) run while an ingest that was in flight when the end (``tail()``)
was taken is still in flight. The end has delivered the write after the ingest's reserved seqs
and not the ingest's rows (``delivered_by``: its seqs are above the end's), so the read has all
it needs. It stopped at the ingest's seq gap instead and raised ChangesCollected ("ended before
its end"), which tells the caller changes were collected and to start again from a snapshot,
though nothing was lost (both tests failed so). The read now goes past the gap, and hands out no
cursor past it but the end itself: resuming from one would skip the ingest."""

from __future__ import annotations

from datetime import timedelta

from slatedb_core.feed import ChangeFeed, ChangesOptions
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.testing import FaultyStore
from slatedb_core.writer.db import Db
from tests.feed.ingest_steps import ingest_held
from tests.table.conftest import OPTS, memory

QUIET = DbOptions(flush_interval=timedelta(hours=1))


def test_a_micro_batch_during_an_ingest_in_flight_is_not_collected(store: ObjectStore) -> None:
    from spark_jobs.changes_source import read_between

    feed = ChangeFeed("db", store, ChangesOptions(batch_rows=1))
    faulty = FaultyStore(store)
    with Db.open("db", faulty, QUIET) as db:
        db.put(b"a", b"1")
        db.flush_memtable()
        start = feed.tail()
        with ingest_held(db, faulty, "db/compacted/*", {b"i0": b"x"}):
            db.put(b"b", b"2")
            end = feed.tail()
            got = [r["key"] for rows in read_between(feed, start, end) for r in rows.to_pylist()]
    assert got == [b"b"]


def test_a_table_read_until_during_an_ingest_in_flight_is_not_collected() -> None:
    faulty = FaultyStore(memory())
    with Table.create("t", faulty, [b"m"], OPTS) as table, table.writer(0) as db:
        db.put(b"a", b"1")
        db.flush_memtable()
        start = table.changes_tail()
        with ingest_held(db, faulty, "*/compacted/*", {b"i0": b"x"}):
            db.put(b"b", b"2")
            end = table.changes_tail()
            got = [r["key"] for b in table.changes(start, until=end) for r in b.rows.to_pylist()]
    assert got == [b"b"]


def test_a_read_until_hands_out_no_cursor_past_an_ingest_in_flight(store: ObjectStore) -> None:
    """With one row per batch, the rows after the ingest's gap come in the one batch whose
    cursor is the end; reading on from the end delivers the ingest once it commits."""
    feed = ChangeFeed("db", store, ChangesOptions(batch_rows=1))
    faulty = FaultyStore(store)
    with Db.open("db", faulty, QUIET) as db:
        db.put(b"a", b"1")
        db.flush_memtable()
        start = feed.tail()
        with ingest_held(db, faulty, "db/compacted/*", {b"i0": b"x"}):
            db.put(b"b", b"2")
            db.put(b"c", b"3")
            end = feed.tail()
            got = [
                (b.cursor, [r["key"] for r in b.rows.to_pylist()])
                for b in feed.changes(start, until=end)
            ]
        db.flush_memtable()
    assert got == [(end, [b"b", b"c"])]
    after = [r["key"] for b in feed.changes(end) for r in b.rows.to_pylist()]
    assert after == [b"i0"]
