"""The rescaling asset's recorded layout is the table it leaves, also when a blocked merge used up
one of the pass's rounds (found by the table simulation, tests/sim/test_table_sim.py's long
campaign: seeds 1072, 1094, 1118, 1156 crashed in ``_layout`` with "zip() argument 2 is longer
than argument 1": the last round merged, the loop ran out, and the layout paired the new, shorter
shard list with the sizes measured before that merge)."""

from __future__ import annotations

from typing import Any

import dagster as dg
import pyarrow as pa

from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from orchestration.table_assets import rescaling
from slatedb_core import ObjectStore
from slatedb_core.manifest.model import AppVersion
from slatedb_core.table import Table
from slatedb_core.table.ingest import attempt_dir, commit_shard, plan_ingest, stage_ssts


def test_a_pass_whose_last_round_merges_records_the_layout_it_leaves(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
) -> None:
    keys = [b"k%03d" % i for i in range(100)]
    with Table.create("t", store, [b"k025", b"k050", b"k075"]) as table:
        for shard in (0, 1):
            with table.writer(shard) as db:
                for k in keys[25 * shard : 25 * shard + 25]:
                    db.put(k, k)
    # a batch that reached shards 2 and 3 only: (0+1, 2) cannot merge, (2, 3) can
    plan = plan_ingest("t", store, job_id="job-1", txn=AppVersion("loader", 1))
    batch = pa.record_batch([pa.array(keys[50:], pa.binary())] * 2, ["key", "value"])
    staged = list(stage_ssts(store, plan, attempt_dir(plan, "run", 0, 0), 0, [batch], partition=0))
    for i in (2, 3):
        mine = [s for s in staged if s.shard.index == i]
        commit_shard(
            store, plan, "run", plan.shards[i], [s.path for s in mine], seqs=[s.seq for s in mine]
        )
    # three rounds: merge (0, 1); (0+1, 2) blocked; merge (2, 3), and the rounds run out
    policy = ManagedDatabasesResource(
        tables=["t"],
        gc_min_age="0s",
        max_rescale_operations=2,
        merge_bytes=10**9,
        split_bytes=10**10,
    )
    ctx = dg.build_asset_context(partition_key="t")
    result = rescaling(context=ctx, store=store_resource, managed=policy)
    assert isinstance(result, dg.MaterializeResult)
    metadata: dict[str, Any] = dict(result.metadata or {})
    assert (metadata["merges"].value, metadata["merges_blocked"].value) == (2, 1)
    with Table.open("t", store) as table:
        assert metadata["shard_map_id"].value == table.shard_map.id
        assert [r.data["db_path"] for r in metadata["layout"].value.records] == [
            s.db_path for s in table.shards
        ]
        assert len(table.shards) == 2
        assert dict(table.scan()) == {k: k for k in keys}
