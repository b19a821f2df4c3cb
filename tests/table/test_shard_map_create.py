"""The shard map's update loop settles an ambiguous create by its content."""

from __future__ import annotations

from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.table.shardmap import ShardMap, ShardMapStore
from slatedb_core.testing import FaultyStore
from tests.table.conftest import OPTS


def test_held_a_shard_map_create_that_landed_but_reported_failure_commits_once(
    mem: ObjectStore,
) -> None:
    """The shard map's loop settles an ambiguous create by content: the change is committed once,
    not re-applied on top of itself.

    Found by the adversarial review of the regrouping, issue 20 (was test_review_regroup.py)."""
    faulty = FaultyStore(mem)
    Table.create("t", mem, [b"m"], OPTS).close()
    maps = ShardMapStore(faulty, "t")
    before = maps.read_latest()
    faulty.fail_next("put_if_absent", "t/shardmap/*", after_effect=True)

    def bump(m: ShardMap) -> ShardMap:
        return ShardMap(m.id, m.shards, m.created_at, m.next_shard_id + 1, m.pending, m.retired)

    committed = maps.update(bump)
    assert committed.id == before.id + 1
    assert maps.read_latest().next_shard_id == before.next_shard_id + 1
