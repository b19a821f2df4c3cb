"""review43, issue 43: a table cursor whose shard entries are all overwrite states (``x<key>``:
deleting a replaced shard's keys, ``s``: seeding a new shard from its build) carries no
change-feed identity, so another table's such cursor (a table dropped and created again at the
path, with the same shard names and map ids) is read as this table's: the feed delivers a delete
of every key of this table's replaced shards and its new contents to a consumer that never had
them, with no error. A cursor another database handed out must be CursorInvalid (docs/changes.md,
"Whose cursor"): the table cursor now carries those shards' identities."""

from __future__ import annotations

import pyarrow as pa
import pytest

from slatedb_core.errors import CursorInvalid
from slatedb_core.feed import ChangesOptions
from slatedb_core.table import Table
from slatedb_core.table.changes import TableCursor
from tests.table.conftest import OPTS, fill, memory


def test_another_tables_cursor_inside_an_overwrite_is_cursor_invalid() -> None:
    store = memory()
    opts = ChangesOptions(batch_rows=1)
    with Table.create("t", store, [b"m"], OPTS) as t:
        fill(t, {b"a": b"1", b"n": b"1"})
        start = list(t.changes(None, opts))[-1].cursor
        t.overwrite([pa.record_batch({"key": [b"b"], "value": [b"new"]})])
        inside = next(
            b.cursor
            for b in t.changes(start, opts)
            if any(isinstance(c, str) and c.startswith("x") for _, c in b.cursor.shards)
        )
    with Table.create("u", store, [b"m"], OPTS) as u:  # the same history at another path
        fill(u, {b"c": b"U", b"z": b"U"})
        u.overwrite([pa.record_batch({"key": [b"k"], "value": [b"U"]})])
        foreign = TableCursor.decode(inside.encode())
        with pytest.raises(CursorInvalid):
            list(u.changes(foreign, opts))


def test_an_own_cursor_inside_an_overwrite_resumes_with_or_without_identities() -> None:
    """The table's own cursor resumes; one of an earlier build (no ``d``) is read as before."""
    store = memory()
    opts = ChangesOptions(batch_rows=1)
    with Table.create("t", store, [b"m"], OPTS) as t:
        fill(t, {b"a": b"1", b"n": b"1"})
        start = list(t.changes(None, opts))[-1].cursor
        t.overwrite([pa.record_batch({"key": [b"b"], "value": [b"new"]})])
        batches = list(t.changes(start, opts))
        at = next(i for i, b in enumerate(batches) if b.cursor.ids)
        rest = [(r["key"], r["value"]) for b in batches[at + 1 :] for r in b.rows.to_pylist()]
        for c in (
            batches[at].cursor,
            TableCursor(batches[at].cursor.map_id, batches[at].cursor.shards),
        ):
            again = TableCursor.decode(c.encode())
            got = [
                (r["key"], r["value"]) for b in t.changes(again, opts) for r in b.rows.to_pylist()
            ]
            assert got == rest
