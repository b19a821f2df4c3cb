"""issue 43 adversarial review: a cursor another database handed out is a wrong cursor.
Every cursor now carries its database's change-feed identity (slatedb_core.feed.identity).

docs/changes.md says a cursor naming WAL SSTs this database never wrote (another database's,
or one restored from an older copy) is CursorInvalid. Only a cursor *ahead* of the WAL is
caught: a cursor carries no identity of the database it came from, so another database's cursor
at a WAL id this one also has is taken as this one's, and its seq filter skips this database's
changes (or repeats them) with no error.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from slatedb_core.errors import CursorInvalid, DatabaseNotFound
from slatedb_core.feed import ChangeFeed, ChangesOptions, Cursor
from slatedb_core.layout import changes_dir, changes_identity_path, consumer_record_path
from slatedb_core.lifecycle.clone import create_clone
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db

QUIET = DbOptions(flush_interval=timedelta(hours=1))


def test_another_databases_cursor_is_cursor_invalid(store: ObjectStore) -> None:
    with Db.open("a", store, QUIET) as a:
        for i in range(6):
            a.put(b"a%d" % i, b"v")
    with Db.open("b", store, QUIET) as b:
        b.put(b"b0", b"v")
        for i in range(1, 40):
            b.put(b"b%d" % i, b"v", await_durable=False)
        b.flush()
    cursor: Cursor | None = None
    for batch in ChangeFeed("b", store).changes(None):
        cursor = batch.cursor
    assert cursor is not None
    with pytest.raises(CursorInvalid):
        list(ChangeFeed("a", store).changes(cursor))


def test_a_clones_parent_cursor_is_cursor_invalid_on_the_clone(store: ObjectStore) -> None:
    """A clone copies its parent's WAL tail (the same ids and rows) but is another database:
    its own identity, so the parent's cursor is refused there, and the clone's own cursors
    resume (issue 43, item 1: a wrong cursor is CursorInvalid, never a silent skip)."""
    with Db.open("p", store, QUIET) as p:
        for i in range(3):
            p.put(b"p%d" % i, b"v")
    parent = ChangeFeed("p", store)
    cursor = list(parent.changes(None))[-1].cursor
    create_clone("c", "p", store)
    clone = ChangeFeed("c", store)
    assert clone.identity() != parent.identity()
    with pytest.raises(CursorInvalid, match="another database's"):
        list(clone.changes(cursor))
    with pytest.raises(CursorInvalid, match="another database's"):
        list(ChangeFeed("c", store).changes(parent.tail().encode()))
    with Db.open("c", store, QUIET) as c:
        c.put(b"c0", b"v")
    mine = clone.tail()
    with Db.open("c", store, QUIET) as c:
        c.put(b"c1", b"v")
    assert [r["key"] for b in clone.changes(mine) for r in b.rows.to_pylist()] == [b"c1"]


def test_a_cursor_without_an_identity_is_still_read(store: ObjectStore) -> None:
    """Cursors an earlier build persisted (``c1.<wal>.<seq>``: Spark offsets, Delta commit
    metadata, table cursors) carry no identity: read as this database's, and the cursors
    after them carry its identity, stable across feeds."""
    with Db.open("db", store, QUIET) as db:
        db.put(b"a", b"1")
    old = list(ChangeFeed("db", store).changes(None))[-1].cursor.of_db(None).encode()
    assert old.count(".") == 2  # c1.<wal>.<seq>
    with Db.open("db", store, QUIET) as db:
        db.put(b"b", b"2")
    feed = ChangeFeed("db", store)
    batches = list(feed.changes(old))
    assert [r["key"] for b in batches for r in b.rows.to_pylist()] == [b"b"]
    last = batches[-1].cursor
    assert last.db == feed.identity() == ChangeFeed("db", store).identity()
    assert last.encode().endswith(".d" + feed.identity())
    assert Cursor.decode(last.encode()) == last
    assert list(ChangeFeed("db", store).changes(last.encode())) == []


def test_a_hard_destroy_deletes_the_feeds_objects(store: ObjectStore) -> None:
    """``changes/`` (the identity, a consumer's record) is one of the database's own
    directories: a hard destroy deletes it with the rest."""
    with Db.open("db", store, QUIET) as db:
        db.put(b"k", b"v")
    feed = ChangeFeed("db", store, ChangesOptions(consumer="gone"))
    list(feed.changes(None))
    assert store.exists(changes_identity_path("db"))
    assert store.exists(consumer_record_path("db", "gone"))
    feed.release()  # a consumer's checkpoint would refuse the hard destroy
    destroy("db", store, soft=False)
    assert list(store.list(changes_dir("db"))) == []


def test_no_identity_is_made_where_no_database_is(store: ObjectStore) -> None:
    """A feed of a path without a database raises and leaves nothing there (a clone or a
    database created at that path later must find it empty)."""
    with pytest.raises(DatabaseNotFound):
        list(ChangeFeed("nothing", store).changes())
    with pytest.raises(DatabaseNotFound):
        ChangeFeed("nothing", store).advance(Cursor())
    assert list(store.list("nothing")) == []
