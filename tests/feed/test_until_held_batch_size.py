"""review50, issue 43: a read up to an end that went past an in-flight ingest's gap (1bc0754)
holds every later row for the one batch whose cursor is the end; ``_batches`` stopped
resetting its row count then, so once the rows held reached ``batch_rows`` in the middle of a
WAL SST the cut made no progress: the read looped for ever, appending empty slices (a hang
and unbounded memory: this test timed out before the fix)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from slatedb_core.feed import ChangeFeed, ChangesOptions
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.testing import FaultyStore
from slatedb_core.writer.db import Db
from tests.feed.ingest_steps import ingest_held

QUIET = DbOptions(flush_interval=timedelta(hours=1))


@pytest.mark.parametrize("batch_rows", [1, 2])
def test_a_held_read_until_with_many_rows_in_one_wal_sst_ends(
    store: ObjectStore, batch_rows: int
) -> None:
    feed = ChangeFeed("db", store, ChangesOptions(batch_rows=batch_rows))
    faulty = FaultyStore(store)
    with Db.open("db", faulty, QUIET) as db:
        db.put(b"a", b"1")
        db.flush_memtable()
        start = feed.tail()
        got: list[tuple[object, list[bytes]]] = []
        with ingest_held(db, faulty, "db/compacted/*", {b"i0": b"x"}):
            for k in (b"b", b"c", b"d", b"e"):
                db.put(k, b"2", await_durable=False)  # one WAL SST, four seqs
            db.flush()
            end = feed.tail()
            done = threading.Event()

            def read() -> None:
                got.extend(
                    (b.cursor, [r["key"] for r in b.rows.to_pylist()])
                    for b in feed.changes(start, until=end)
                )
                done.set()

            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            assert done.wait(20), "the read up to the end did not end"
    assert got == [(end, [b"b", b"c", b"d", b"e"])]
