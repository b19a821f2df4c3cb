"""The rescaling asset resumes a pending merge a half-applied batch blocks: the pass reports it
as a blocked merge and goes on (issue 37, final review of 456d978).

A run that died after sealing a merge leaves it pending; the asset's ``table.resume()`` runs it,
and the look under the fence refuses it (MergeBlockedByBatch, raised once ``resume()`` finished
every other op and retirement). The asset used to fail its whole run there, never reaching the
layout and the table's GC; now the merge is reported like one the policy's own merge found
blocked."""

from __future__ import annotations

import dataclasses
import time
import uuid

import dagster as dg

from orchestration.assets import rescaling
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from slatedb_core import ObjectStore
from slatedb_core.keys import KeyRange
from slatedb_core.manifest.model import AppVersion
from slatedb_core.table import Table
from slatedb_core.table.ingest import commit_shard, plan_ingest
from slatedb_core.table.shardmap import PendingOp, ShardMap, ShardMapStore


def test_a_resumed_merge_a_half_applied_batch_blocks_is_reported_not_a_failed_run(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
) -> None:
    Table.create("half", store, [b"k050"]).close()
    plan = plan_ingest("half", store, job_id="job", txn=AppVersion("loader", 3))
    commit_shard(store, plan, "run", plan.shards[0], [])  # shard 0 only: the job died

    def sealed_by_a_dead_run(cur: ShardMap) -> ShardMap:
        a, b = cur.shards
        op = PendingOp(
            uuid.uuid4(),
            "merge",
            (a.shard_id, b.shard_id),
            ((cur.next_shard_id, KeyRange()),),
            time.time(),
        )
        return dataclasses.replace(
            cur, created_at=time.time(), next_shard_id=cur.next_shard_id + 1, pending=(op,)
        )

    ShardMapStore(store, "half").update(sealed_by_a_dead_run)
    ctx = dg.build_asset_context(partition_key="half")
    result = rescaling(context=ctx, store=store_resource, managed=managed)
    metadata = result.metadata or {}
    assert metadata["resumed_pending"].value is True
    assert metadata["merges"].value == 0
    assert metadata["merges_blocked"].value == 1
    assert "'loader'" in metadata["merge_blocked_reasons"].value
    with Table.open("half", store) as table:
        assert len(table.shards) == 2 and not table.shard_map.pending
        with table.writer(1) as db:  # unsealed: writable again
            db.put(b"k099", b"x")
