"""issue 43 adversarial review: a registered table consumer must not skip an ingest into a
split's target shard committed before the consumer first read that target.

A split's targets are new databases: the consumer's checkpoint is created on a target only
when its feed first reads it, from the target's manifest 1 (``TableChangeFeed._start``). An
ingest into the target before that carries no marker for the consumer
(:func:`slatedb_core.feed.ingests.mark_ingest` marks for live consumer checkpoints only), and a
registered feed took the unmarked, L0-covered seq gap for a failed ingest's: its rows were
skipped with no error.
"""

from __future__ import annotations

import pyarrow as pa

from slatedb_core.errors import ChangesCollected
from slatedb_core.feed import ChangesOptions
from slatedb_core.table import Table
from tests.table.conftest import OPTS, fill, memory


def test_an_ingest_into_a_split_target_before_the_consumer_reads_it() -> None:
    store = memory()
    opts = ChangesOptions(batch_rows=2, consumer="sink")
    with Table.create("t", store, [b"m"], OPTS) as table:
        fill(table, {b"a": b"1"})
        cursor = list(table.changes(None, opts))[-1].cursor
        table.split(0, b"g")  # shard 0 (keys below m) into [.., g) and [g, m)
        with table.writer(0) as db:
            db.put(b"b", b"before")
            db.bulk_ingest(pa.table({"key": [b"c", b"d"], "value": [b"ing", b"ing"]}))
            db.put(b"e", b"after")
        try:
            got = [
                (r["key"], r["value"])
                for b in table.changes(cursor, opts)
                for r in b.rows.to_pylist()
            ]
        except ChangesCollected:
            got = None
        assert got is None or got == [
            (b"b", b"before"),
            (b"c", b"ing"),
            (b"d", b"ing"),
            (b"e", b"after"),
        ], f"the feed delivered {got}"


def test_an_ingest_into_a_merge_target_before_the_consumer_reads_it() -> None:
    store = memory()
    opts = ChangesOptions(batch_rows=2, consumer="sink")
    with Table.create("t", store, [b"m"], OPTS) as table:
        fill(table, {b"a": b"1", b"x": b"1"})
        cursor = list(table.changes(None, opts))[-1].cursor
        table.merge(0)  # one shard again: a union of both
        with table.writer(0) as db:
            db.put(b"b", b"before")
            db.bulk_ingest(pa.table({"key": [b"c", b"y"], "value": [b"ing", b"ing"]}))
            db.put(b"e", b"after")
        try:
            got = [
                (r["key"], r["value"])
                for b in table.changes(cursor, opts)
                for r in b.rows.to_pylist()
            ]
        except ChangesCollected:
            got = None
        assert got is None or got == [
            (b"b", b"before"),
            (b"c", b"ing"),
            (b"y", b"ing"),
            (b"e", b"after"),
        ], f"the feed delivered {got}"
