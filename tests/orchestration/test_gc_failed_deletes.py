"""A garbage-collection pass whose deletes all failed is not recorded as "unchanged": it used to
yield the no-op observation (nothing deleted), so the partition's history read as a quiet pass
while the garbage stayed and the store refused every delete (issue 40 adversarial review: a
failed pass recorded as a no-op observation; item 10 made no-op passes observations).
Compaction already counts its failures as a change to record; GC now does the same.

Real Dagster (the real asset on an ephemeral instance), a real database in a local store whose
deletes fail through slatedb_core.testing.faults' FaultyStore (the store refuses every delete)."""

from __future__ import annotations

import dagster as dg

from devtools.sample_data import write_database
from orchestration.assets import garbage_collection
from orchestration.resources import ObjectStoreResource
from slatedb_core import ObjectStore, run_compaction_once
from slatedb_core.testing.faults import FaultRule, FaultyStore
from tests.orchestration.conftest import add_partitions


class _DeletesRefused(ObjectStoreResource):
    """The store of ``url`` refusing every delete (a bucket policy, a lost permission)."""

    def open(self) -> ObjectStore:
        return FaultyStore(super().open(), rules=[FaultRule(op="delete", fail_before=1.0)])


def test_a_gc_pass_whose_deletes_all_failed_is_not_unchanged(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    resources: dict[str, object],
    instance: dg.DagsterInstance,
) -> None:
    write_database(store, "db", l0_ssts=3, rows_per_sst=50, wal_rows=0)
    managed = resources["managed"]
    run_compaction_once("db", store, store_resource.compactor_options(managed.compactor_options()))  # type: ignore[attr-defined]
    add_partitions(instance, "db")
    refused = _DeletesRefused(url=store_resource.url)
    result = dg.materialize(
        [garbage_collection],
        partition_key="db",
        instance=instance,
        resources={"store": refused, "managed": managed},
        raise_on_error=False,
    )
    observations = instance.fetch_observations(garbage_collection.key, limit=10).records
    materializations = result.get_asset_materialization_events() if result.success else []
    if result.success:
        # recorded as a pass that changed something (its failed deletes), not as a quiet one
        assert observations == [], [r.asset_observation for r in observations]
        assert len(materializations) == 1
        metadata = materializations[0].materialization.metadata
        assert metadata["failed_deletes"].value > 0  # type: ignore[operator]
    # (a failed run is also truthful: then nothing may claim the pass was a no-op)
    assert not [
        r
        for r in observations
        if r.asset_observation is not None and "failed" not in str(r.asset_observation.metadata)
    ]
