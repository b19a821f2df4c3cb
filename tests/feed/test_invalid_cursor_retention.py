"""issue 43 adversarial review: a cursor the feed refuses must not move a registered
consumer's retention.

``changes(since=c)`` first moves the consumer's checkpoint to what ``c`` still needs
(``ChangeFeed.advance``), then checks ``c`` against the WAL. A cursor ahead of the WAL (another
database's, a restored one, a typo) was refused with CursorInvalid only after the move: the
checkpoint now pinned the latest manifest, GC collected the WAL the consumer still needed, and
resuming from its real cursor was ChangesCollected.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from slatedb_core.errors import CursorInvalid
from slatedb_core.feed import ChangeFeed, ChangesOptions, Cursor
from slatedb_core.gc import GarbageCollector
from slatedb_core.options import DbOptions, GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db

QUIET = DbOptions(flush_interval=timedelta(hours=1))
GC = GarbageCollectorOptions(min_age=timedelta(0))


def test_a_refused_cursor_leaves_the_consumers_retention(store: ObjectStore) -> None:
    feed = ChangeFeed("db", store, ChangesOptions(consumer="etl"))
    with Db.open("db", store, QUIET) as db:
        db.put(b"a", b"1")
        cursor: Cursor | None = None
        for b in feed.changes(None):
            cursor = b.cursor
        assert cursor is not None
        for i in range(3):
            db.put(b"k%d" % i, b"v")
        db.flush_memtable()  # the replay point passes the consumer's cursor
        db.put(b"z", b"1")
        ahead = Cursor(cursor.wal_id + 50, cursor.seq)
        with pytest.raises(CursorInvalid):
            list(feed.changes(ahead))
        GarbageCollector("db", store, GC).run_once()
        got = [r["key"] for b in feed.changes(cursor) for r in b.rows.to_pylist()]
    assert got == [b"k0", b"k1", b"k2", b"z"]
