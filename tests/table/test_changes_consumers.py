"""``Table.changes_consumers``: the holds a table's change-feed consumer keeps on each live
shard, as a check of the consumer reads them (issue 43, item 4; orchestration's
``changes_table_retained``). Reading them registers and moves nothing. And the check's probe,
an unregistered read of the consumer's cursor, finds where a split target's changes start
from the consumer's carried hold once the GC collected the target's manifest 1."""

from __future__ import annotations

from datetime import timedelta

import pytest

from slatedb_core import (
    ChangeFeed,
    ChangesOptions,
    GarbageCollectorOptions,
    Table,
    run_gc_once,
)
from slatedb_core.errors import ChangesCollected, InvalidArgument
from tests.table.conftest import OPTS, fill, memory


def test_the_holds_of_each_live_shard_are_listed_and_follow_a_split() -> None:
    store = memory()
    with Table.create("t", store, [b"m"], OPTS) as table:
        fill(table, {b"a": b"1", b"n": b"1"})
        paths = [s.db_path for s in table.shards]
        assert table.changes_consumers("etl") == dict.fromkeys(paths)  # not registered yet
        opts = ChangesOptions(consumer="etl", consumer_lifetime=timedelta(hours=1))
        for _ in table.changes(None, opts):
            pass
        holds = table.changes_consumers("etl")
        assert list(holds) == paths
        for path, hold in holds.items():
            assert hold is not None and hold.name == "table:etl" and not hold.expired
            assert hold.checkpoint.expire_time_s is not None and hold.wal_behind == 0
            # the same checkpoint the shard database lists, and nothing was moved
            assert [h.checkpoint for h in ChangeFeed(path, store).consumers()] == [hold.checkpoint]
        assert table.changes_consumers("other") == dict.fromkeys(paths)

        ChangeFeed(paths[1], store, ChangesOptions(consumer="table:etl")).release()
        after = table.changes_consumers("etl")
        assert after[paths[0]] == holds[paths[0]] and after[paths[1]] is None

        table.split(0, b"f")  # the targets inherit the hold of their source
        split = table.changes_consumers("etl")
        live = [s.db_path for s in table.shards]
        assert list(split) == live and len(live) == 3
        assert all(split[p] is not None for p in live[:2]) and split[live[2]] is None

        with pytest.raises(InvalidArgument):
            table.changes_consumers("")


def test_an_unregistered_read_past_a_split_starts_a_target_from_a_carried_hold() -> None:
    store = memory()
    with Table.create("t", store, [b"m"], OPTS) as table:
        fill(table, {b"a": b"1", b"n": b"1"})
        etl = ChangesOptions(consumer="etl")
        cursor = None
        for b in table.changes(None, etl):
            cursor = b.cursor
        table.split(0, b"f")
        fill(table, {b"b": b"2", b"g": b"2"}, flush=True)
        fill(table, {b"c": b"3", b"h": b"3"}, flush=True)
        for s in table.shards:  # min_age 0: every target's manifest 1 is collected
            run_gc_once(s.db_path, store, GarbageCollectorOptions(min_age=timedelta(0)))
        holds = table.changes_consumers("etl")

        def keys(opts: ChangesOptions) -> list[bytes]:
            return [
                k for b in table.changes(cursor, opts) for k in b.rows.column("key").to_pylist()
            ]

        # nothing moved: the unregistered read yields what the consumer's next read yields
        plain = keys(ChangesOptions())
        assert table.changes_consumers("etl") == holds
        assert sorted(plain) == [b"b", b"c", b"g", b"h"]
        assert keys(etl) == plain
        for p in [s.db_path for s in table.shards]:  # no carried hold left: no start known
            ChangeFeed(p, store, ChangesOptions(consumer="table:etl")).release()
        with pytest.raises(ChangesCollected, match="manifest 1"):
            keys(ChangesOptions())
