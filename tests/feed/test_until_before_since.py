"""review50, issue 43: ``ChangeFeed.changes(since, until)`` with an ``until`` before ``since``
(a caller's mix-up of two persisted cursors) handed out ``until`` as the batch's cursor: a
cursor behind ``since``, so a consumer that persisted it read (and applied) again what it had
already applied (this test failed before: one empty batch with the earlier cursor). As for a
table's shard at its end, such a read now has nothing to read: no batch. (A tail()'s seq is
L0's, a batch's the WAL's, so a ``since`` past ``until`` may be "now" too: no error.)"""

from __future__ import annotations

from slatedb_core.feed import ChangeFeed, ChangesOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db


def test_a_read_until_a_cursor_before_since_is_cursor_invalid(store: ObjectStore) -> None:
    feed = ChangeFeed("db", store, ChangesOptions(batch_rows=1))
    with Db.open("db", store) as db:
        db.put(b"a", b"1")
        db.flush()
        early = feed.tail()
        db.put(b"b", b"2")
        db.flush()
        late = feed.tail()
        db.put(b"c", b"3")
        db.flush()
    assert list(feed.changes(late, until=early)) == []
    assert list(feed.changes(late, until=late)) == []
    got = [(b.cursor, b.rows.column("key").to_pylist()) for b in feed.changes(early, until=late)]
    assert got[-1][0] == late
    assert [k for _, ks in got for k in ks] == [b"b"]
