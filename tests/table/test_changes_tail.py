"""A sharded table's change-feed tail and a read between two table cursors (issue 43, items 2
and 3: the end a Spark micro-batch or a CLI poll stops at). ``Table.changes_tail()`` names every
live shard's tail under the map version; ``changes(since, until=tail)`` yields the same rows each
time it runs, a split or more writes after the tail included, and reading on from the tail
yields exactly the rest.
"""

from __future__ import annotations

import pytest

from slatedb_core.errors import CursorInvalid
from slatedb_core.feed import ChangesOptions
from slatedb_core.table import Table
from slatedb_core.table.changes import TableChangeBatch, TableCursor
from tests.table.conftest import OPTS, fill, memory

Change = tuple[bytes, bytes | None, int]


def changes_of(batches: list[TableChangeBatch]) -> list[Change]:
    return [(r["key"], r["value"], r["seq"]) for b in batches for r in b.rows.to_pylist()]


def keyed(changes: list[Change]) -> dict[bytes, list[bytes | None]]:
    out: dict[bytes, list[bytes | None]] = {}
    for k, v, _ in changes:
        out.setdefault(k, []).append(v)
    return out


def test_tail_after_writes_delivers_only_later_changes() -> None:
    with Table.create("t", memory(), [b"m"], OPTS) as table:
        fill(table, {b"a": b"1", b"n": b"1"})
        tail = table.changes_tail()
        assert isinstance(tail, TableCursor) and len(tail.shards) == 2
        assert TableCursor.decode(tail.encode()) == tail
        assert changes_of(list(table.changes(tail))) == []
        fill(table, {b"a": b"2", b"z": b"1"})
        assert keyed(changes_of(list(table.changes(tail)))) == {b"a": [b"2"], b"z": [b"1"]}
        # everything up to the tail, nothing after it
        upto = keyed(changes_of(list(table.changes(None, until=tail))))
        assert upto == {b"a": [b"1"], b"n": [b"1"]}


@pytest.mark.parametrize("batch_rows", [1, 100])
def test_a_read_between_two_cursors_is_the_same_twice_across_a_split(batch_rows: int) -> None:
    opts = ChangesOptions(batch_rows=batch_rows)
    with Table.create("t", memory(), [b"m"], OPTS) as table:
        fill(table, {b"a": b"1", b"g": b"1", b"n": b"1"})
        a = table.changes_tail()
        fill(table, {b"a": b"2", b"g": b"2", b"n": b"2"})
        table.split(0, b"f")  # a split between A and the tail
        fill(table, {b"a": b"3", b"g": b"3"})
        tail = table.changes_tail()
        first = list(table.changes(a, opts, until=tail))
        want = {b"a": [b"2", b"3"], b"g": [b"2", b"3"], b"n": [b"2"]}
        assert keyed(changes_of(first)) == want
        assert first[-1].cursor.map_id == tail.map_id
        # more writes and another split after the tail change nothing between A and the tail
        fill(table, {b"a": b"4", b"g": b"4", b"n": b"3"})
        table.split(2, b"p")
        again = list(table.changes(a, opts, until=tail))
        assert changes_of(again) == changes_of(first)
        # reading on from the tail (or from the last cursor of the bounded read): the rest
        rest = {b"a": [b"4"], b"g": [b"4"], b"n": [b"3"]}
        assert keyed(changes_of(list(table.changes(tail, opts)))) == rest
        assert keyed(changes_of(list(table.changes(first[-1].cursor, opts)))) == rest


def test_until_is_checked() -> None:
    with Table.create("t", memory(), [b"m"], OPTS) as table:
        fill(table, {b"a": b"1"})
        tail = table.changes_tail()
        table.split(0, b"f")
        later = table.changes_tail()
        with pytest.raises(CursorInvalid):
            list(table.changes(later, until=tail))  # until before since
        with pytest.raises(CursorInvalid):
            list(table.changes(None, until="c1.1.0"))
