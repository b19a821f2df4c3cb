"""A table's changes between two cursors across an overwrite (what a Spark micro-batch reads,
with no bootstrap; issue 43, items 2 and 3): the old keys' deletes, then the overwrite's rows
and the writes after it, the same rows when read again after the new shards flushed and
compacted. An overwrite followed by a write before the feed's next call was ChangesCollected
(the new shard's ingest was taken for an unmarked one).
"""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pytest

from slatedb_core.compactor.compactor import Compactor
from slatedb_core.errors import ChangesCollected
from slatedb_core.feed import ChangesOptions
from slatedb_core.gc import GarbageCollector
from slatedb_core.options import CompactorOptions, GarbageCollectorOptions
from slatedb_core.table import Table
from slatedb_core.table.changes import TableChangeFeed
from tests.table.conftest import OPTS, fill, memory


def test_a_read_between_two_cursors_across_an_overwrite() -> None:
    store = memory()
    with Table.create("t", store, [b"m"], OPTS) as table:
        feed = TableChangeFeed(
            "t", store, table.maps, ChangesOptions(batch_rows=1, bootstrap=False)
        )
        fill(table, {b"a": b"1", b"n": b"1", b"q": b"1"})
        start = feed.tail()
        table.overwrite([pa.record_batch({"key": [b"b", b"q"], "value": [b"new", b"new"]})])
        fill(table, {b"b": b"2"})
        end = feed.tail()

        def between() -> list[tuple[bytes, bytes | None, str]]:
            return [
                (r["key"], r["value"], r["op"])
                for x in feed.changes(start, until=end)
                for r in x.rows.to_pylist()
            ]

        first = between()
        assert first == [
            (b"a", None, "delete"),
            (b"n", None, "delete"),
            (b"q", None, "delete"),
            (b"b", b"new", "put"),
            (b"b", b"2", "put"),
            (b"q", b"new", "put"),
        ]
        fill(table, {b"b": b"3", b"z": b"3"}, flush=True)
        for s in table.shards:
            with Compactor(s.db_path, store, CompactorOptions(l0_trigger=1)) as c:
                c.run_once()
        assert between() == first  # read again: the same rows
        rest = [(r["key"], r["value"]) for x in feed.changes(end) for r in x.rows.to_pylist()]
        assert rest == [(b"b", b"3"), (b"z", b"3")]


def test_a_read_resumed_inside_an_overwrites_rows_after_gc_is_told() -> None:
    """A cursor inside an overwrite's new shard's rows goes on in the manifest it was read
    from; once the GC collected that one (no consumer holds it), ChangesCollected, not the
    rest of a later manifest's rows (a key's overwrite value skipped, a batch read again
    different)."""
    store = memory()
    gc = GarbageCollectorOptions(min_age=timedelta(0))
    with Table.create("t", store, [], OPTS) as table:
        feed = TableChangeFeed(
            "t", store, table.maps, ChangesOptions(batch_rows=1, bootstrap=False)
        )
        fill(table, {b"a": b"1"})
        cursor = feed.tail()
        keys = [b"b", b"c", b"d"]
        table.overwrite([pa.record_batch({"key": keys, "value": [b"new"] * 3})])
        inside = None
        for x in feed.changes(cursor):
            if x.rows.num_rows and x.rows.column(0)[0].as_py() == b"b":
                inside = x.cursor
                break
        assert inside is not None
        fill(table, {b"c": b"2"}, flush=True)
        (shard,) = table.shards
        with Compactor(shard.db_path, store, CompactorOptions(l0_trigger=1)) as c:
            c.run_once()
        GarbageCollector(shard.db_path, store, gc).run_once()
        with pytest.raises(ChangesCollected):
            list(feed.changes(inside))
