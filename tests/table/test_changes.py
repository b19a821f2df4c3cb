"""``Table.changes``: a sharded table's change feed under one combined cursor, through a split
and a merge during consumption, each key's changes in order and once, resuming from every cursor
yielding exactly the rest; an overwrite delivers a delete of each old key then the new contents,
and one the cursor cannot follow is ChangesCollected, never a silent gap (issue 43, item 2).
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from slatedb_core.errors import ChangesCollected, CursorInvalid
from slatedb_core.feed import ChangesOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.table.changes import TableChangeBatch, TableCursor
from tests.table.conftest import OPTS, fill, memory

Change = tuple[bytes, bytes | None, int]


def changes_of(batches: list[TableChangeBatch]) -> list[Change]:
    return [(r["key"], r["value"], r["seq"]) for b in batches for r in b.rows.to_pylist()]


def per_key(changes: list[Change]) -> dict[bytes, list[bytes | None]]:
    out: dict[bytes, list[bytes | None]] = {}
    for k, v, _ in changes:
        out.setdefault(k, []).append(v)
    return out


def write(table: Table, rows: dict[bytes, bytes]) -> None:
    fill(table, rows)


def check_resume(table: Table, batches: list[TableChangeBatch], opts: ChangesOptions) -> None:
    """From every cursor (encoded and decoded), the feed yields exactly the changes after it."""
    all_changes = changes_of(batches)
    done = 0
    for b in batches:
        done += b.rows.num_rows
        cursor = TableCursor.decode(b.cursor.encode())
        rest = changes_of(list(table.changes(cursor, opts)))
        assert sorted(rest, key=repr) == sorted(all_changes[done:], key=repr)


@pytest.mark.parametrize("store", [memory()])
def test_changes_across_shards_resume_from_every_cursor(store: ObjectStore) -> None:
    opts = ChangesOptions(batch_rows=2)
    with Table.create("t", store, [b"m"], OPTS) as table:
        write(table, {b"a": b"1", b"b": b"1", b"n": b"1", b"z": b"1"})
        write(table, {b"a": b"2", b"z": b"2"})
        batches = list(table.changes(None, opts))
        got = per_key(changes_of(batches))
        assert got == {b"a": [b"1", b"2"], b"b": [b"1"], b"n": [b"1"], b"z": [b"1", b"2"]}
        check_resume(table, batches, opts)
        with pytest.raises(CursorInvalid):
            list(table.changes("c1.1.0"))


@pytest.mark.parametrize("consumer", [None, "sink"])
def test_a_split_and_a_merge_during_consumption(consumer: str | None) -> None:
    store = memory()
    opts = ChangesOptions(batch_rows=3, consumer=consumer)
    with Table.create("t", store, [b"m"], OPTS) as table:
        write(table, {b"a": b"1", b"g": b"1", b"n": b"1"})
        first = list(table.changes(None, opts))
        cursor = first[-1].cursor
        write(table, {b"a": b"2", b"g": b"2"})  # before the split: in the parent
        table.split(0, b"f")
        write(table, {b"a": b"3", b"g": b"3", b"n": b"2"})  # in the children
        after_split = list(table.changes(cursor, opts))
        assert per_key(changes_of(after_split)) == {
            b"a": [b"2", b"3"],
            b"g": [b"2", b"3"],
            b"n": [b"2"],
        }
        check_resume(table, after_split, opts)
        cursor2 = after_split[-1].cursor
        assert len(cursor2.shards) == 3  # the parent dropped once read to its end
        table.merge(0)  # a + g's shards back together
        write(table, {b"a": b"4", b"g": b"4"})
        after_merge = list(table.changes(cursor2, opts))
        assert per_key(changes_of(after_merge)) == {b"a": [b"4"], b"g": [b"4"]}
        check_resume(table, after_merge, opts)
        # a consumer that slept through both sees each key's changes in order, once
        slept = per_key(changes_of(list(table.changes(cursor, opts))))
        assert slept == {
            b"a": [b"2", b"3", b"4"],
            b"g": [b"2", b"3", b"4"],
            b"n": [b"2"],
        }


@pytest.mark.parametrize("store", [memory()])
def test_split_before_the_first_read_of_a_cursor_is_followed(store: ObjectStore) -> None:
    """A shard split twice between two calls: the middle shard is read from its manifest 1."""
    opts = ChangesOptions(batch_rows=100)
    with Table.create("t", store, [], OPTS) as table:
        write(table, {b"a": b"1", b"k": b"1", b"t": b"1"})
        cursor = list(table.changes(None, opts))[-1].cursor
        table.split(0, b"h")
        write(table, {b"a": b"2", b"k": b"2", b"t": b"2"})
        table.split(1, b"p")
        write(table, {b"k": b"3", b"t": b"3"})
        got = per_key(changes_of(list(table.changes(cursor, opts))))
        assert got == {b"a": [b"2"], b"k": [b"2", b"3"], b"t": [b"2", b"3"]}


@pytest.mark.parametrize("batch_rows", [1, 100])
def test_an_overwrite_deletes_the_old_keys_then_puts_the_new(batch_rows: int) -> None:
    """The replaced shards to their end, a delete of each of their keys, the new contents."""
    store = memory()
    opts = ChangesOptions(batch_rows=batch_rows)
    with Table.create("t", store, [b"m"], OPTS) as table:
        write(table, {b"a": b"1", b"n": b"1", b"q": b"1"})
        cursor = list(table.changes(None, opts))[-1].cursor
        write(table, {b"a": b"2"})
        table.overwrite([pa.record_batch({"key": [b"b", b"q"], "value": [b"new", b"new"]})])
        batches = list(table.changes(cursor, opts))
        assert per_key(changes_of(batches)) == {
            b"a": [b"2", None],
            b"n": [None],
            b"q": [None, b"new"],
            b"b": [b"new"],
        }
        check_resume(table, batches, opts)
        assert all(TableCursor.decode(batches[-1].cursor.encode()).shards)
        write(table, {b"z": b"after"})
        assert per_key(changes_of(list(table.changes(batches[-1].cursor, opts)))) == {
            b"z": [b"after"]
        }


def test_an_overwrite_after_an_unseen_split_is_told() -> None:
    store = memory()
    with Table.create("t", store, [], OPTS) as table:
        write(table, {b"a": b"1", b"n": b"1"})
        cursor = list(table.changes())[-1].cursor
        table.split(0, b"h")
        table.overwrite([pa.record_batch({"key": [b"q"], "value": [b"new"]})])
        seen = []
        with pytest.raises(ChangesCollected):
            for b in table.changes(cursor):
                seen.append(b)


def test_a_registered_table_consumer_follows_a_shard_ingest_through_a_split() -> None:
    """An ingest into a shard (rows in no WAL SST) is delivered between the writes around it,
    and the split after it hands the consumer on to the children (issue 43, items 1 and 2)."""
    store = memory()
    opts = ChangesOptions(batch_rows=2, consumer="sink")
    with Table.create("t", store, [b"m"], OPTS) as table:
        write(table, {b"a": b"1"})
        cursor = list(table.changes(None, opts))[-1].cursor
        with table.writer(0) as db:
            db.put(b"b", b"before")
            db.bulk_ingest(pa.table({"key": [b"b", b"c"], "value": [b"ing", b"ing"]}))
            db.put(b"c", b"after")
        table.split(0, b"bb")
        write(table, {b"b": b"child", b"c": b"child"})
        got = per_key(changes_of(list(table.changes(cursor, opts))))
        assert got == {b"b": [b"before", b"ing", b"child"], b"c": [b"ing", b"after", b"child"]}
