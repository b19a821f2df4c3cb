"""A database deleted outside ``destroy`` stays in the UI as missing, with an ERROR check naming
the next step, until an operator acknowledges it (issue 40, item 8: its partition key was
dropped silently and the database vanished from the UI); one destroyed by ``destroy`` still goes
away without an error.

Real Dagster throughout: the real discovery and fleet sensors on an ephemeral instance, a real
``acknowledge_missing_database_job`` run, real databases in a local store deleted by hand.
"""

from __future__ import annotations

import dagster as dg
import pytest

from devtools.sample_data import write_database
from orchestration.fleet_state import INTACT
from orchestration.missing import ACKNOWLEDGE_JOB, ACKNOWLEDGE_OP, acknowledge_missing_database_job
from orchestration.partitions import DATABASES
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from orchestration.sensors import build_sensors
from slatedb_core import ObjectStore
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.store.redact import redact_url
from tests.orchestration.fleet_ticks import Tick, tick


def _discover(
    instance: dg.DagsterInstance,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
) -> list[str]:
    """One tick of the real discovery sensor, its requests applied as the daemon applies them;
    returns the database partitions after it."""
    sensor = next(s for s in build_sensors(running=True) if s.name == "database_discovery_sensor")
    ctx = dg.build_sensor_context(
        instance=instance, resources={"store": store_resource, "managed": managed}
    )
    result = sensor(ctx)
    if isinstance(result, dg.SensorResult):
        for request in result.dynamic_partitions_requests or []:
            if isinstance(request, dg.AddDynamicPartitionsRequest):
                instance.add_dynamic_partitions(DATABASES, list(request.partition_keys))
            else:
                for key in request.partition_keys:
                    instance.delete_dynamic_partition(DATABASES, key)
    return sorted(instance.get_dynamic_partitions(DATABASES))


def _intact(t: Tick, db: str) -> dg.AssetCheckEvaluation | None:
    for e in t.asset_events:
        if isinstance(e, dg.AssetCheckEvaluation) and e.partition == db and e.check_name == INTACT:
            return e
    return None


def _acknowledge(
    instance: dg.DagsterInstance, resources: dict[str, object], db: str
) -> dg.ExecuteInProcessResult:
    defs = dg.Definitions(jobs=[acknowledge_missing_database_job], resources=resources)
    return defs.resolve_job_def(ACKNOWLEDGE_JOB).execute_in_process(
        instance=instance,
        run_config={"ops": {ACKNOWLEDGE_OP: {"config": {"database": db}}}},
        raise_on_error=False,
    )


def _delete_by_hand(store: ObjectStore, db: str) -> None:
    for meta in list(store.list(db)):
        store.delete(meta.path)


@pytest.fixture
def seen(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
) -> str | None:
    """Two live databases, discovered and seen by one fleet_sensor tick; its cursor."""
    write_database(store, "tidy", l0_ssts=1, rows_per_sst=50)
    write_database(store, "keep", l0_ssts=1, rows_per_sst=50)
    assert _discover(instance, store_resource, managed) == ["keep", "tidy"]
    return tick(instance, store_resource, managed).cursor


def test_a_database_deleted_by_hand_stays_missing_with_an_error_until_acknowledged(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    resources: dict[str, object],
    instance: dg.DagsterInstance,
    seen: str | None,
) -> None:
    _delete_by_hand(store, "tidy")

    # discovery keeps the partition (it used to drop it: the database vanished from the UI)
    assert _discover(instance, store_resource, managed) == ["keep", "tidy"]
    gone = tick(instance, store_resource, managed, seen)
    intact = _intact(gone, "tidy")
    assert intact is not None and not intact.passed
    assert intact.severity == dg.AssetCheckSeverity.ERROR
    text = (intact.description or "").replace("\\", "")  # as Markdown shows it
    assert "tidy" in text and "missing from" in text and redact_url(store_resource.url) in text
    assert "outside destroy" in text and ACKNOWLEDGE_JOB in text  # the next step
    # still kept on later discovery ticks
    assert _discover(instance, store_resource, managed) == ["keep", "tidy"]

    # acknowledging a live database is refused, and changes nothing
    refused = _acknowledge(instance, resources, "keep")
    assert not refused.success
    assert _discover(instance, store_resource, managed) == ["keep", "tidy"]

    # the operator acknowledges: the partition goes, and discovery does not bring it back
    assert _acknowledge(instance, resources, "tidy").success
    assert sorted(instance.get_dynamic_partitions(DATABASES)) == ["keep"]
    assert _discover(instance, store_resource, managed) == ["keep"]


@pytest.mark.parametrize("soft", [False, True])
def test_a_database_destroyed_by_destroy_goes_away_without_an_error(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
    seen: str | None,
    soft: bool,
) -> None:
    destroy("tidy", store, soft=soft)
    if soft:  # the GC deletes a soft-destroyed database after its grace (0 s here)
        from slatedb_core import run_gc_once

        run_gc_once("tidy", store, managed.gc_options())
    assert _discover(instance, store_resource, managed) == ["keep"]
    after = tick(instance, store_resource, managed, seen)
    assert _intact(after, "tidy") is None
    assert not [
        e for e in after.asset_events if isinstance(e, dg.AssetCheckEvaluation) and not e.passed
    ]


def test_the_acknowledgement_is_a_job_of_the_deployed_definitions() -> None:
    """The operator action exists in the UI: the code location carries the job."""
    from orchestration.definitions import defs

    repo = defs.get_repository_def()
    assert ACKNOWLEDGE_JOB in {j.name for j in repo.get_all_jobs()}


def test_the_deep_checks_of_a_deleted_database_name_the_next_step_too(
    store: ObjectStore,
    resources: dict[str, object],
    instance: dg.DagsterInstance,
    seen: str | None,
) -> None:
    """health_check_job on the kept partition agrees with the sensor: every check fails, the
    intact one at ERROR, and says how to acknowledge."""
    from orchestration.checks import CHECKS, health_check_job

    _delete_by_hand(store, "tidy")
    defs = dg.Definitions(asset_checks=CHECKS, jobs=[health_check_job], resources=resources)
    result = defs.resolve_job_def("health_check_job").execute_in_process(
        instance=instance, partition_key="tidy", raise_on_error=False
    )
    evaluations = result.get_asset_check_evaluations()
    assert len(evaluations) == len(CHECKS) and not any(e.passed for e in evaluations)
    (intact,) = [e for e in evaluations if e.check_name == INTACT]
    assert intact.severity == dg.AssetCheckSeverity.ERROR
    assert ACKNOWLEDGE_JOB in (intact.description or "").replace("\\", "")


def test_a_store_that_lists_none_of_its_databases_is_not_a_mass_deletion(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
    seen: str | None,
) -> None:
    """Every database the sensor had seen vanishes in one tick: an unmounted volume or an
    emptied bucket prefix, not N deletions by hand. No database is reported "deleted outside
    destroy" (whose next step, the acknowledgement, would drop the whole fleet from the UI);
    each is unreachable, and the tick names the store problem. Found by the issue 40
    adversarial review."""
    _delete_by_hand(store, "tidy")
    _delete_by_hand(store, "keep")
    assert _discover(instance, store_resource, managed) == ["keep", "tidy"]
    gone = tick(instance, store_resource, managed, seen)
    for db in ("keep", "tidy"):
        intact = _intact(gone, db)
        assert intact is None or "outside destroy" not in (intact.description or ""), intact
    assert gone.skip_reason is not None and "lists none of the 2 databases" in str(
        gone.skip_reason.skip_message
    ), gone.skip_reason
