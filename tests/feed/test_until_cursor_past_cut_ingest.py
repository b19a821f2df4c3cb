"""review50, issue 43: a read up to an end (``ChangeFeed.changes(since, until)``,
``Table.changes(until=)``) run after an ingest that was in flight when the end (``tail()``) was
taken has committed. The ingest's rows are not the end's (their seqs are above ``end.seq``), so
the read cuts them (``delivered_rows``), but the batches after them carried their own cursors,
which are past the ingest's seqs: a consumer that persisted one (a batch at a time, as the feed
asks) and resumed from it never saw the ingest. A lost write (this test failed so: resuming
from the first batch's cursor gave ``[b, c]``). No cursor past a cut row but the end itself may
be handed out."""

from __future__ import annotations

from datetime import timedelta

import pytest

from slatedb_core.feed import ChangeFeed, ChangesOptions
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.testing import FaultyStore
from slatedb_core.writer.db import Db
from tests.feed.ingest_steps import ingest_held
from tests.table.conftest import OPTS, memory

QUIET = DbOptions(flush_interval=timedelta(hours=1))


def _keys(batches: object) -> list[bytes]:
    return [r["key"] for b in batches for r in b.rows.to_pylist()]  # type: ignore[attr-defined]


@pytest.mark.parametrize("consumer", [None, "c"])
def test_no_cursor_of_a_read_until_skips_an_ingest_it_cut(
    store: ObjectStore, consumer: str | None
) -> None:
    feed = ChangeFeed("db", store, ChangesOptions(batch_rows=1, consumer=consumer))
    faulty = FaultyStore(store)
    with Db.open("db", faulty, QUIET) as db:
        db.put(b"a", b"1")
        db.flush_memtable()
        start = feed.tail()
        if consumer is not None:
            feed.advance(start)
        with ingest_held(db, faulty, "db/compacted/*", {b"i0": b"x"}):
            db.put(b"b", b"2")
            db.put(b"c", b"3")
            end = feed.tail()
        batches = list(feed.changes(start, until=end))
    assert _keys(batches) == [b"b", b"c"]
    assert batches[-1].cursor == end
    seen: list[bytes] = []
    for b in batches:  # a consumer that persisted this cursor, then resumed from it
        seen += [r["key"] for r in b.rows.to_pylist()]
        after = _keys(ChangeFeed("db", store, ChangesOptions(consumer=consumer)).changes(b.cursor))
        assert sorted(seen + after) == [b"b", b"c", b"i0"], b.cursor


def test_no_table_cursor_of_a_read_until_skips_an_ingest_it_cut() -> None:
    faulty = FaultyStore(memory())
    with Table.create("t", faulty, [b"m"], OPTS) as table, table.writer(0) as db:
        db.put(b"a", b"1")
        db.flush_memtable()
        start = table.changes_tail()
        with ingest_held(db, faulty, "*/compacted/*", {b"i0": b"x"}):
            db.put(b"b", b"2")
            db.put(b"c", b"3")
            end = table.changes_tail()
        opts = ChangesOptions(batch_rows=1)
        batches = list(table.changes(start, opts, until=end))
        assert _keys(batches) == [b"b", b"c"]
        seen: list[bytes] = []
        for b in batches:
            seen += [r["key"] for r in b.rows.to_pylist()]
            after = _keys(table.changes(b.cursor, opts))
            assert sorted(seen + after) == [b"b", b"c", b"i0"], b.cursor
