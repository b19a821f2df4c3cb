"""The check pages agree with themselves (issue 40, item 10): after maintenance runs
materialize a database's assets and fleet_sensor reports, every check of every database has a
current result in the instance (none grey "missing"), a healthy database's pass, and a damaged
or deleted database's fail (none "Passed" beside "Failed").

Why they did not: fleet_report_job logged its evaluations without the materialization they
judged, so Dagster counted any partition ever materialized as "not evaluated since the last
materialization" (grey); the sensor reports only changes, so a run's materialization was never
followed by a result; and a damaged or deleted database had only its intact check failed, its
L0 check still "Passed".

Real Dagster: an ephemeral instance, real compaction and GC runs, real sensor ticks and
fleet_report_job runs; the statuses are the instance's own (``get_asset_check_state``, what the
UI's check pages read).
"""

from __future__ import annotations

from datetime import timedelta

import dagster as dg
from dagster._core.definitions.partitions.context import partition_loading_context

from devtools.sample_data import write_database
from orchestration.assets import ASSETS
from orchestration.fleet_report import CHECK_ASSET, fleet_report_job
from orchestration.fleet_state import CHECK_ORDER, LINGER
from orchestration.jobs import JOBS
from orchestration.partitions import databases_partitions
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from slatedb_core import CheckpointOptions, ObjectStore, admin
from slatedb_core.health import inspect_database
from tests.orchestration.conftest import add_partitions
from tests.orchestration.fleet_ticks import Tick, tick


def _report(instance: dg.DagsterInstance, t: Tick) -> None:
    """Run the tick's report as the daemon would launch it."""
    for request in t.reports:
        result = fleet_report_job.execute_in_process(
            instance=instance, run_config=request.run_config, tags=dict(request.tags)
        )
        assert result.success


def _materialize(
    instance: dg.DagsterInstance, resources: dict[str, object], job: str, db: str
) -> None:
    defs = dg.Definitions(assets=ASSETS, jobs=JOBS, resources=resources)
    result = defs.resolve_job_def(job).execute_in_process(instance=instance, partition_key=db)
    assert result.success
    (key,) = defs.resolve_job_def(job).asset_layer.executable_asset_keys
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[db]), limit=1
    ).records
    assert records and records[0].event_log_entry.run_id == result.run_id  # it materialized


def _statuses(instance: dg.DagsterInstance) -> dict[tuple[str, str], str]:
    """(database, check) -> the status the UI shows for that partition; absent: grey."""
    keys = [dg.AssetCheckKey(CHECK_ASSET[c], c) for c in CHECK_ORDER]
    with partition_loading_context(dynamic_partitions_store=instance):
        states = instance.event_log_storage.get_asset_check_state(
            [(k, databases_partitions) for k in keys]
        )
    out: dict[tuple[str, str], str] = {}
    for key, state in states.items():
        for status, subset in state.subsets.items():
            value = subset.value
            for pk in value.get_partition_keys():  # type: ignore[union-attr]
                assert (pk, key.name) not in out
                out[(pk, key.name)] = status.value
    return out


def test_every_check_of_every_database_has_a_current_consistent_result(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    resources: dict[str, object],
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    write_database(store, "calm", l0_ssts=4, rows_per_sst=50, wal_rows=0)
    for db in ("broken", "gone"):
        write_database(store, db, l0_ssts=1, rows_per_sst=50, wal_rows=0)
    dbs = [orders, "calm", "broken", "gone"]
    add_partitions(instance, *dbs)
    first = tick(instance, store_resource, managed)
    _report(instance, first)

    # maintenance runs materialize the healthy databases' assets ...
    _materialize(instance, resources, "compaction_job", orders)
    _materialize(instance, resources, "compaction_job", "calm")
    _materialize(instance, resources, "gc_job", "calm")  # deletes what compaction replaced
    # ... one database's latest manifest is damaged, another deleted by hand
    stored, _ = inspect_database(store, "broken")
    store.put(f"broken/manifest/{stored.id:020d}.manifest", b"\x00garbage" * 8)
    for meta in list(store.list("gone")):
        store.delete(meta.path)

    second = tick(instance, store_resource, managed, first.cursor)
    _report(instance, second)

    got = _statuses(instance)
    expected = {
        (db, check): ("FAILED" if db in ("broken", "gone") else "SUCCEEDED")
        for db in dbs
        for check in CHECK_ORDER
    }
    assert got == expected


def test_the_sensor_reports_an_expired_checkpoint_lingering(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    """``no_expired_checkpoint_lingering`` had no sensor form: after each checkpoint refresh it
    went grey until someone ran health_check_job by hand (issue 40, item 10 review). The sensor
    judges it from the manifest it scanned, by the rule the deep check uses."""
    write_database(store, "calm", l0_ssts=1, rows_per_sst=10, wal_rows=0)
    # expired years ago, and no GC pass has removed it since
    admin.create_checkpoint(
        orders, store, CheckpointOptions(lifetime=timedelta(seconds=1)), now=lambda: 1.0e9
    )
    add_partitions(instance, orders, "calm")
    _report(instance, tick(instance, store_resource, managed))
    got = _statuses(instance)
    assert got[(orders, LINGER)] == "FAILED"
    assert got[("calm", LINGER)] == "SUCCEEDED"
