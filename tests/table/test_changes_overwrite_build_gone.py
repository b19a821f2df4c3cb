"""A read between two cursors across an overwrite once the GC collected the overwrite's build
(review43 of issue 43, items 2 and 3): the new shard's first manifest holding data is gone,
and a later one, holding the writes after the end cursor too, was read as the build. Those
writes were delivered before ``until`` and again after it. docs/changes.md ("Tables"): an
overwrite's build the GC already deleted is ChangesCollected."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa

from slatedb_core.errors import ChangesCollected
from slatedb_core.feed import ChangesOptions
from slatedb_core.gc import GarbageCollector
from slatedb_core.options import GarbageCollectorOptions
from slatedb_core.table import Table
from slatedb_core.table.changes import TableChangeFeed
from tests.table.conftest import OPTS, fill, memory


def test_a_collected_build_is_never_read_from_a_later_manifest() -> None:
    store = memory()
    with Table.create("t", store, [], OPTS) as table:
        feed = TableChangeFeed(
            "t", store, table.maps, ChangesOptions(batch_rows=1, bootstrap=False)
        )
        fill(table, {b"a": b"1"})
        start = feed.tail()
        table.overwrite([pa.record_batch({"key": [b"b"], "value": [b"new"]})])
        end = feed.tail()
        fill(table, {b"b": b"2", b"z": b"2"}, flush=True)  # after end
        for s in table.shards:
            GarbageCollector(
                s.db_path, store, GarbageCollectorOptions(min_age=timedelta(0))
            ).run_once()
        try:
            got = [
                (r["key"], r["value"])
                for x in feed.changes(start, until=end)
                for r in x.rows.to_pylist()
            ]
        except ChangesCollected:
            return
        assert got == [(b"a", None), (b"b", b"new")]
