"""A table's ``until`` whose shard cursors another database handed out (a table dropped and
created again at the path, whose shard databases are named as before) is CursorInvalid, as a
``since`` is (review43 of issue 43, item 2: a read cut at another database's positions
reports success for rows the caller never asked for)."""

from __future__ import annotations

import pytest

from slatedb_core.errors import CursorInvalid
from slatedb_core.table import Table
from slatedb_core.table.changes import TableCursor
from tests.table.conftest import OPTS, fill, memory


def test_a_table_until_of_another_tables_shards_is_cursor_invalid() -> None:
    store = memory()
    with Table.create("t", store, [b"m"], OPTS) as t:
        fill(t, {b"a": b"1", b"n": b"1"})
        mine = t.changes_tail()
    with Table.create("u", store, [b"m"], OPTS) as u:
        fill(u, {b"a": b"1", b"n": b"1"})
        theirs = u.changes_tail()
    # u's shard cursors under t's shard paths: positions t's shards have too
    assert [p for p, _ in mine.shards] == [p for p, _ in theirs.shards]
    foreign = TableCursor(mine.map_id, theirs.shards)
    with Table.open("t", store, OPTS) as t, pytest.raises(CursorInvalid, match="another"):
        list(t.changes(None, until=foreign))
