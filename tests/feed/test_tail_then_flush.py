"""A cursor from ``ChangeFeed.tail()`` taken before the WAL's rows reach L0 stays readable after
the flush: the rows below it are in WAL SSTs it has delivered, not an unmarked ingest (issue 43,
items 2 and 3: a Spark micro-batch or a table's feed starts at a tail; found while streaming a
sharded table, whose split flushes each source to L0 after the stream took its tail)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from slatedb_core.feed import ChangeFeed
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db

QUIET = DbOptions(flush_interval=timedelta(hours=1))


@pytest.mark.parametrize("more", [False, True])
def test_a_tail_taken_before_an_l0_flush_reads_on_after_it(more: bool) -> None:
    store: ObjectStore = open_store("memory://tail-then-flush")
    with Db.open("d", store, QUIET) as db:
        db.put(b"a", b"1", await_durable=False)
        db.flush()
        tail = ChangeFeed("d", store).tail()
        db.flush_memtable()  # L0 now holds seq 1, which the tail's WAL SSTs delivered
        if more:
            db.put(b"b", b"2", await_durable=False)
            db.flush()
    got = [r["key"] for b in ChangeFeed("d", store).changes(tail) for r in b.rows.to_pylist()]
    assert got == ([b"b"] if more else [])
