"""A ``tail()`` taken while an ingest is in flight (seqs reserved, SSTs being written, a write
after it already in the WAL) carries L0's last seq, below the ingest's seqs. The ingest commits
after the call, so ``changes(since=tail)`` must deliver it (``tail()``: "never miss one after
it"). Since 86a2ba7 the seq gap at such a cursor started after the last WAL row before it,
which lies past the ingest's seqs: an unregistered feed skipped the ingest (review84; issue 43,
item 1: every committed change, once).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from slatedb_core.admin import create_clone
from slatedb_core.feed import ChangeFeed, ChangesOptions, Cursor
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.testing import FaultyStore
from slatedb_core.writer.db import Db
from tests.feed.ingest_steps import ingest_held

QUIET = DbOptions(flush_interval=timedelta(hours=1))


def resumed(feed: ChangeFeed, cursor: Cursor) -> list[bytes]:
    """The keys delivered reading one batch per call, each resumed from the last cursor."""
    got: list[bytes] = []
    for _ in range(20):
        batch = next(iter(feed.changes(cursor)), None)
        if batch is None or batch.cursor == cursor:
            return got
        got += [r["key"] for r in batch.rows.to_pylist()]
        cursor = batch.cursor
    raise AssertionError(f"no end: {got}")


def tail_during_ingest(db: Db, faulty: FaultyStore, feed: ChangeFeed, path: str) -> Cursor:
    """``feed.tail()`` taken while an ingest of ``i0``, ``i1`` into ``db`` (opened on
    ``faulty``) is held at its SST write, after a put of ``b`` that lands in the WAL above the
    ingest's reserved seqs; the ingest commits after the call (and has when this returns)."""
    with ingest_held(db, faulty, f"{path}/compacted/*", {b"i0": b"x", b"i1": b"y"}):
        db.put(b"b", b"2")  # durable: in the WAL, above the ingest's reserved seqs
        end = feed.tail()  # the ingest has not committed: it comes after this call
    return end


@pytest.mark.parametrize("consumer", [None, "etl"])
@pytest.mark.parametrize("batch_rows", [1, 1000])
@pytest.mark.parametrize("later_write", [True, False])
def test_a_tail_taken_during_an_ingest_delivers_the_ingest(
    store: ObjectStore, consumer: str | None, batch_rows: int, later_write: bool
) -> None:
    feed = ChangeFeed("db", store, ChangesOptions(batch_rows=batch_rows, consumer=consumer))
    faulty = FaultyStore(store)
    with Db.open("db", faulty, QUIET) as db:
        db.put(b"a", b"1")
        db.flush_memtable()
        if consumer is not None:
            list(feed.changes(None))  # registered before the ingest
        end = tail_during_ingest(db, faulty, feed, "db")
        if later_write:
            db.put(b"c", b"3")
        db.flush_memtable()
    want = [b"i0", b"i1", b"c"] if later_write else [b"i0", b"i1"]
    got = [r["key"] for b in feed.changes(end) for r in b.rows.to_pylist()]
    assert got == want
    assert resumed(feed, end) == want


@pytest.mark.parametrize("batch_rows", [1, 1000])
def test_a_tail_taken_during_an_ingest_into_a_new_clone_delivers_the_ingest(
    store: ObjectStore, batch_rows: int
) -> None:
    """A clone's WAL starts past its parent's (its first WAL SSTs are its writer's fencing
    ones): the look-back through the WAL SSTs before a lagging cursor stops at the clone's
    first manifest instead of raising ChangesCollected at a WAL id the clone never had (the
    split-target case of tests/table/test_changes_tail.py, with an ingest in flight)."""
    with Db.open("p", store, QUIET) as parent:
        parent.put(b"a", b"1")
        parent.flush_memtable()
    create_clone("c", "p", store)
    feed = ChangeFeed("c", store, ChangesOptions(batch_rows=batch_rows))
    faulty = FaultyStore(store)
    with Db.open("c", faulty, QUIET) as db:
        end = tail_during_ingest(db, faulty, feed, "c")
        db.put(b"c", b"3")
        db.flush_memtable()
    want = [b"i0", b"i1", b"c"]
    assert [r["key"] for b in feed.changes(end) for r in b.rows.to_pylist()] == want
    assert resumed(feed, end) == want
