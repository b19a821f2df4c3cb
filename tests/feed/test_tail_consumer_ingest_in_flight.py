"""review43, issue 43: a registered consumer resuming from a ``tail()`` taken while an ingest
is in flight (seqs reserved, a write after it already in the WAL), read again while the ingest
is still in flight and a write after the tail is in the WAL too. The ingest has no marker yet,
so the seq hole it leaves in the WAL SSTs before the cursor must hold the feed (as it holds an
unregistered one) rather than let the cursor move past it: it commits after the tail, and
``tail()`` promises never to miss a change committed after it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from slatedb_core.feed import ChangeFeed, ChangesOptions, Cursor
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.testing import FaultyStore
from slatedb_core.writer.db import Db
from tests.feed.ingest_steps import ingest_held

QUIET = DbOptions(flush_interval=timedelta(hours=1))


def read_on(feed: ChangeFeed, cursor: Cursor) -> tuple[list[bytes], Cursor]:
    got: list[bytes] = []
    for batch in feed.changes(cursor):
        got += [r["key"] for r in batch.rows.to_pylist()]
        cursor = batch.cursor
    return got, cursor


@pytest.mark.parametrize("consumer", [None, "etl"])
@pytest.mark.parametrize("batch_rows", [1, 1000])
def test_a_read_while_the_ingest_is_in_flight_does_not_pass_it(
    store: ObjectStore, consumer: str | None, batch_rows: int
) -> None:
    feed = ChangeFeed("db", store, ChangesOptions(batch_rows=batch_rows, consumer=consumer))
    faulty = FaultyStore(store)
    with Db.open("db", faulty, QUIET) as db:
        db.put(b"a", b"1")
        db.flush_memtable()
        if consumer is not None:
            list(feed.changes(None))  # registered before the ingest
        with ingest_held(db, faulty, "db/compacted/*", {b"i0": b"x", b"i1": b"y"}):
            db.put(b"b", b"2")  # durable, above the ingest's reserved seqs
            end = feed.tail()  # the ingest commits after this call
            db.put(b"c", b"3")  # after the tail, while the ingest is still in flight
            early, cursor = read_on(feed, end)
        db.put(b"d", b"4")
        db.flush_memtable()
    late, _ = read_on(feed, cursor)
    assert early + late == [b"i0", b"i1", b"c", b"d"]
