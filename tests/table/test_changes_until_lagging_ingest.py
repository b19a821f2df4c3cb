"""review43, issue 43: a read up to an end cursor (``until``: a Spark micro-batch, the CLI's
``--until``, ``Table.changes(until=)``) whose end is a ``tail()`` taken while an ingest was in
flight. The ingest commits after the tail, its seqs above the tail's: the end has not delivered
its rows (``delivered_by``), the read after the end does. A read in small batches passed the
ingest's rows on in the batches before the one crossing the end, and the next read delivered
them again: each change twice."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from slatedb_core.cli.changes import db_changes_until
from slatedb_core.feed import ChangeFeed, ChangesOptions, Cursor
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.table.changes import TableCursor
from slatedb_core.testing import FaultyStore
from slatedb_core.writer.db import Db
from tests.feed.ingest_steps import ingest_held
from tests.table.conftest import OPTS, memory

QUIET = DbOptions(flush_interval=timedelta(hours=1))


def ingest_across_a_tail(
    db: Db, faulty: FaultyStore, glob: str, tail: Callable[[], object]
) -> object:
    """An ingest paused before its SST write, a put after it, ``tail()``, then the commit."""
    with ingest_held(db, faulty, glob, {b"i0": b"x", b"i1": b"y"}):
        db.put(b"b", b"2")  # acknowledged before the tail, above the ingest's seqs
        end = tail()
    db.put(b"c", b"3")
    db.flush_memtable()
    return end


@pytest.mark.parametrize("batch_rows", [1, 2, 1000])
def test_a_database_read_up_to_a_tail_taken_during_an_ingest(
    store: ObjectStore, batch_rows: int
) -> None:
    feed = ChangeFeed("db", store, ChangesOptions(batch_rows=batch_rows))
    faulty = FaultyStore(store)
    with Db.open("db", faulty, QUIET) as db:
        db.put(b"a", b"1")
        db.flush_memtable()
        start = feed.tail()
        end = ingest_across_a_tail(db, faulty, "db/compacted/*", feed.tail)
    assert isinstance(end, Cursor)
    first = [r["key"] for rows, _ in db_changes_until(feed, start, end) for r in rows.to_pylist()]
    rest = [r["key"] for b in feed.changes(end) for r in b.rows.to_pylist()]
    assert first + rest == [b"b", b"i0", b"i1", b"c"]


@pytest.mark.parametrize("batch_rows", [1, 2, 1000])
def test_a_table_read_up_to_a_tail_taken_during_an_ingest(batch_rows: int) -> None:
    opts = ChangesOptions(batch_rows=batch_rows)
    faulty = FaultyStore(memory())
    with Table.create("t", faulty, [b"m"], OPTS) as table:
        with table.writer(0) as db:
            db.put(b"a", b"1")
            db.flush_memtable()
            start = table.changes_tail()
            end = ingest_across_a_tail(db, faulty, "*/compacted/*", table.changes_tail)
        assert isinstance(end, TableCursor)
        first = [
            r["key"] for b in table.changes(start, opts, until=end) for r in b.rows.to_pylist()
        ]
        rest = [r["key"] for b in table.changes(end, opts) for r in b.rows.to_pylist()]
    assert first + rest == [b"b", b"i0", b"i1", b"c"]


@pytest.mark.parametrize("batch_rows", [1, 1000])
def test_a_spark_micro_batch_up_to_a_tail_taken_during_an_ingest(
    store: ObjectStore, batch_rows: int
) -> None:
    from spark_jobs.changes_source import read_between

    feed = ChangeFeed("db", store, ChangesOptions(batch_rows=batch_rows))
    faulty = FaultyStore(store)
    with Db.open("db", faulty, QUIET) as db:
        db.put(b"a", b"1")
        db.flush_memtable()
        start = feed.tail()
        end = ingest_across_a_tail(db, faulty, "db/compacted/*", feed.tail)
    assert isinstance(end, Cursor)
    first = [r["key"] for rows in read_between(feed, start, end) for r in rows.to_pylist()]
    rest = [r["key"] for b in feed.changes(end) for r in b.rows.to_pylist()]
    assert first + rest == [b"b", b"i0", b"i1", b"c"]
