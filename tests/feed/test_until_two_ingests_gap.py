"""review50, issue 43: a read up to an end (``ChangeFeed.changes(since, until)``, a Spark
micro-batch) over one seq gap that holds two back-to-back ingests: the first committed before
the end was taken (its seqs at or below ``end.seq``, so the end has delivered them), the second
still in flight (its seqs above). 1bc0754 passes a gap only when all of it is above
``end.seq``; this gap starts below it, so the read stopped at the gap, short of the end, and
Spark's ``read_between`` raised ChangesCollected though nothing was collected."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pytest

from slatedb_core.feed import ChangeFeed, ChangesOptions
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.testing import FaultyStore
from slatedb_core.writer.db import Db
from tests.feed.ingest_steps import ingest_held

QUIET = DbOptions(flush_interval=timedelta(hours=1))


@pytest.mark.parametrize("consumer", [None, "c"])
def test_a_read_until_passes_a_gap_of_a_committed_then_an_in_flight_ingest(
    store: ObjectStore, consumer: str | None
) -> None:
    from spark_jobs.changes_source import read_between

    feed = ChangeFeed("db", store, ChangesOptions(batch_rows=1, consumer=consumer))
    faulty = FaultyStore(store)
    with Db.open("db", faulty, QUIET) as db:
        db.put(b"a", b"1")
        db.flush_memtable()
        start = feed.tail()
        if consumer is not None:
            feed.advance(start)  # registered before the ingests: they are marked for it
        db.bulk_ingest(pa.table({"key": [b"i0"], "value": [b"x"]}))
        with ingest_held(db, faulty, "db/compacted/*", {b"i1": b"y"}):
            db.put(b"b", b"2")
            end = feed.tail()
            got = [r["key"] for rows in read_between(feed, start, end) for r in rows.to_pylist()]
        db.flush_memtable()
    assert got == [b"i0", b"b"]
    after = [r["key"] for b in feed.changes(end) for r in b.rows.to_pylist()]
    assert after == [b"i1"]
