"""issue 43 adversarial review: a cursor another database handed out is a wrong cursor.

docs/changes.md says a cursor naming WAL SSTs this database never wrote (another database's,
or one restored from an older copy) is CursorInvalid. Only a cursor *ahead* of the WAL is
caught: a cursor carries no identity of the database it came from, so another database's cursor
at a WAL id this one also has is taken as this one's, and its seq filter skips this database's
changes (or repeats them) with no error.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from slatedb_core.errors import CursorInvalid
from slatedb_core.feed import ChangeFeed, Cursor
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db

QUIET = DbOptions(flush_interval=timedelta(hours=1))


@pytest.mark.xfail(
    strict=True,
    reason="a cursor names no database (c1.<wal>.<seq>): telling another database's from this "
    "one's needs an identity in the cursor, a new encoding",
)
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
