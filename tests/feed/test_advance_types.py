"""``ChangeFeed.advance`` given no cursor, or a table's (review43 of issue 43, item 1: a wrong
argument to a public API is a typed error, never an ``AssertionError`` that ``python -O``
turns into an ``AttributeError`` after the manifest was read)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from slatedb_core.errors import CursorInvalid
from slatedb_core.feed import ChangeFeed, ChangesOptions
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db


@pytest.mark.parametrize("bad", [None, 7, "t1.eyJtIjoxLCJzIjpbXX0"])
def test_advance_refuses_what_is_no_cursor(store: ObjectStore, bad: object) -> None:
    with Db.open("db", store, DbOptions(flush_interval=timedelta(hours=1))) as db:
        db.put(b"a", b"1")
    feed = ChangeFeed("db", store, ChangesOptions(consumer="c"))
    with pytest.raises(CursorInvalid):
        feed.advance(bad)  # type: ignore[arg-type]
