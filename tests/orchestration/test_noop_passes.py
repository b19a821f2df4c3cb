"""A maintenance pass that changed nothing records no materialization (issue 40, item 10): the
second compaction, GC and checkpoint pass on a quiet database each record an observation saying
what they found, and the partition's last materialization stays the pass that did work."""

from __future__ import annotations

import dagster as dg
import pytest

from orchestration.assets import ASSETS
from orchestration.jobs import JOBS
from orchestration.metadata import SUMMARY
from tests.orchestration.conftest import add_partitions


def _counts(instance: dg.DagsterInstance, key: dg.AssetKey) -> tuple[int, int]:
    """(materializations, observations) of the asset recorded in the instance."""
    mats = instance.fetch_materializations(key, limit=100).records
    obs = instance.fetch_observations(key, limit=100).records
    return len(mats), len(obs)


@pytest.mark.parametrize(
    ("job", "asset", "quiet"),
    [
        ("compaction_job", "compaction", "nothing to compact"),
        ("gc_job", "garbage_collection", "nothing to delete"),
        ("checkpoint_job", "checkpoint_refresh", "nothing to do"),
    ],
)
def test_a_second_pass_on_a_quiet_database_is_an_observation(
    resources: dict[str, object],
    instance: dg.DagsterInstance,
    orders: str,
    job: str,
    asset: str,
    quiet: str,
) -> None:
    add_partitions(instance, orders)
    defs = dg.Definitions(assets=ASSETS, jobs=JOBS, resources=resources)
    run = defs.resolve_job_def(job)
    key = dg.AssetKey(asset)
    if job == "gc_job":  # compaction first, so the first GC pass has SSTs to delete
        defs.resolve_job_def("compaction_job").execute_in_process(
            partition_key=orders, instance=instance
        )
    assert run.execute_in_process(partition_key=orders, instance=instance).success
    assert _counts(instance, key) == (1, 0)  # the pass that did work
    for _ in range(2):
        assert run.execute_in_process(partition_key=orders, instance=instance).success
    assert _counts(instance, key) == (1, 2)
    observed = instance.fetch_observations(key, limit=1).records[0]
    observation = observed.asset_observation
    assert observation is not None and observation.partition == orders
    summary = observation.metadata[SUMMARY].value
    assert isinstance(summary, str) and quiet in summary, summary
