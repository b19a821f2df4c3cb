"""The change feed's public types are importable from ``slatedb_core`` (issue 43 gaps, item 3):
what a consumer needs to type its code (cursors, batches, options, the feed classes, the row
schema), the very classes the feed hands out; its errors are in ``slatedb_core.errors`` as every
other error is."""

from __future__ import annotations

from datetime import timedelta

import pytest

import slatedb_core
from slatedb_core import (
    CHANGE_SCHEMA,
    ChangeBatch,
    ChangeFeed,
    ChangesOptions,
    ConsumerHold,
    Cursor,
    Db,
    DbOptions,
    SnapshotPosition,
    Table,
    TableChangeBatch,
    TableChangeFeed,
    TableCursor,
    open_store,
)
from slatedb_core.errors import ChangesCollected, CursorInvalid, ErrorKind, SlateDBError

FEED_NAMES = {
    "CHANGE_SCHEMA",
    "ChangeBatch",
    "ChangeFeed",
    "ChangesOptions",
    "ConsumerHold",
    "Cursor",
    "SnapshotPosition",
    "TableChangeBatch",
    "TableChangeFeed",
    "TableCursor",
}


def test_the_feed_types_are_in_the_public_api() -> None:
    assert set(slatedb_core.__all__) >= FEED_NAMES
    namespace: dict[str, object] = {}
    exec("from slatedb_core import *", namespace)
    assert FEED_NAMES <= set(namespace)
    assert SnapshotPosition.__module__.startswith("slatedb_core.feed")
    # its errors: with the others, typed by kind
    assert issubclass(ChangesCollected, SlateDBError) and issubclass(CursorInvalid, SlateDBError)
    assert slatedb_core.errors.ChangesCollected is ChangesCollected
    assert CursorInvalid("x").kind is ErrorKind.INVALID


def test_the_feed_hands_out_the_exported_classes() -> None:
    store = open_store("memory://changes-exports")
    with Db.open("db", store, DbOptions(flush_interval=timedelta(hours=1))) as db:
        db.put(b"k", b"v")
        (batch,) = list(db.changes(None, ChangesOptions(batch_rows=10)))
    assert isinstance(batch, ChangeBatch) and isinstance(batch.cursor, Cursor)
    assert batch.rows.schema == CHANGE_SCHEMA
    assert Cursor.decode(batch.cursor.encode()) == batch.cursor
    feed = ChangeFeed("db", store, ChangesOptions(consumer="c"))
    list(feed.changes(batch.cursor))
    (hold,) = feed.consumers()
    assert isinstance(hold, ConsumerHold)
    with Table.create("t", store, [b"m"]) as table:
        with table.writer(0) as w:
            w.put(b"a", b"1")
        batches = list(table.changes())
        assert isinstance(table.changes_tail(), TableCursor)
    assert batches and all(isinstance(b, TableChangeBatch) for b in batches)
    assert isinstance(batches[-1].cursor, TableCursor)
    assert TableChangeFeed.__name__ == "TableChangeFeed"
    with pytest.raises(CursorInvalid):
        TableCursor.decode("nope")
