"""review43, issue 43: a ``tail()`` cursor of a database SlateDB 0.17 writes, its memtable not
flushed (so the cursor's seq, L0's, lags the WAL SSTs before it), read on while SlateDB keeps
writing, reopens (a fencing WAL SST) and flushes: exactly the changes after the tail, once, in
order, each batch's cursor resumed too."""

from __future__ import annotations

import pytest

from slatedb_core.feed import ChangeFeed, ChangesOptions, Cursor
from slatedb_core.store.objectstore import ObjectStore
from tests.interop.oracle import Oracle

pytestmark = pytest.mark.slatedb


def keys_from(feed: ChangeFeed, cursor: Cursor) -> tuple[list[bytes], Cursor]:
    got: list[bytes] = []
    for b in feed.changes(cursor):
        got += [r["key"] for r in b.rows.to_pylist()]
        cursor = b.cursor
    return got, cursor


@pytest.mark.parametrize("consumer", [None, "etl"])
def test_a_tail_of_a_slatedb_database_reads_on_exactly(
    both_stores: tuple[Oracle, ObjectStore, str], consumer: str | None
) -> None:
    oracle, store, _ = both_stores
    feed = ChangeFeed("db", store, ChangesOptions(batch_rows=1, consumer=consumer))
    w = oracle.open_db()
    w.put(b"a0", b"1")
    w.flush_memtable()
    w.put(b"a1", b"1")
    w.write([(b"a2", b"1"), (b"a3", None)])
    w.flush_wal()
    tail = feed.tail()
    if consumer is not None:
        feed.advance(tail)
    w.put(b"b0", b"2")
    w.flush_wal()
    got, cursor = keys_from(feed, tail)
    w.shutdown()
    w = oracle.open_db()  # a new writer: its fencing WAL SST after the ones read
    w.write([(b"b1", b"2"), (b"b2", b"2")])
    w.flush_wal()
    more, cursor = keys_from(feed, cursor)
    w.flush_memtable()
    w.put(b"b3", b"2")
    w.shutdown()
    rest, _ = keys_from(feed, cursor)
    # each read delivers what is there, before any flush (no seq hole holds it)
    assert (got, more, rest) == ([b"b0"], [b"b1", b"b2"], [b"b3"])
    assert keys_from(feed, tail)[0] == [b"b0", b"b1", b"b2", b"b3"]
