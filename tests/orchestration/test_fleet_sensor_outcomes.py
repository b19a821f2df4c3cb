"""Adversarial review of fleet monitoring: fleet_sensor ticks against real databases in a local
store and real runs in an ephemeral instance, trying to make it report success wrongly, hide
damage, lose an alert or storm (docs/operations.md describes what it must do instead)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

import dagster as dg
import pytest
from dagster._core.test_utils import create_run_for_test

from devtools.sample_data import write_database
from orchestration import fleet_memory
from orchestration.alerts import DATABASE_TAG
from orchestration.assets import ASSETS, compaction
from orchestration.checks import CHECKS, health_check_job
from orchestration.fleet_report import REPORT_JOB, reported
from orchestration.fleet_sensor import evaluate_fleet, scanner_for
from orchestration.fleet_state import BOUNDARIES, INTACT, L0
from orchestration.jobs import JOBS
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from slatedb_core import ObjectStore, SlateDBError, run_gc_once
from slatedb_core.health import inspect_database
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.lsm.dbstate import resolve_sst_path
from slatedb_core.testing import FaultyStore
from tests.orchestration.conftest import add_partitions
from tests.orchestration.fleet_ticks import fleet_rows, fleet_view

Result = dg.SensorResult


@pytest.fixture
def managed(managed: ManagedDatabasesResource) -> ManagedDatabasesResource:
    """The shared settings, with the fleet view materialized on every change."""
    return ManagedDatabasesResource(**{**managed.model_dump(), "fleet_min_interval_s": 0})


def _with(managed: ManagedDatabasesResource, **changes: object) -> ManagedDatabasesResource:
    return ManagedDatabasesResource(**{**managed.model_dump(), **changes})


def _tick(
    instance: dg.DagsterInstance,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    cursor: str | None = None,
) -> Result:
    result = evaluate_fleet(
        dg.build_sensor_context(instance=instance, cursor=cursor), store_resource, managed
    )
    assert isinstance(result, dg.SensorResult)
    return result


@dataclass(frozen=True)
class Reported:
    partition: str
    check_name: str
    passed: bool
    severity: dg.AssetCheckSeverity
    description: str | None


def _checks(result: Result) -> dict[tuple[str, str], Reported]:
    """The check results a tick reports: as asset events, or in a report run's config."""
    out = {
        (e.partition or "", e.check_name): Reported(
            e.partition or "", e.check_name, e.passed, e.severity, e.description
        )
        for e in result.asset_events
        if isinstance(e, dg.AssetCheckEvaluation)
    }
    for request in result.run_requests or []:
        if request.job_name != REPORT_JOB:
            continue
        for e in reported(request):
            out[(e.partition or "", e.check_name)] = Reported(
                e.partition or "", e.check_name, e.passed, e.severity, e.description
            )
    return out


def _maintenance(result: Result) -> list[dg.RunRequest]:
    return [r for r in result.run_requests or [] if r.job_name != REPORT_JOB]


def _fleet(result: Result) -> dg.AssetMaterialization:
    return fleet_view(result.asset_events)


_rows = fleet_rows


def _headline(result: Result) -> str:
    return str(_fleet(result).metadata["headline"].value)


def _requested(result: Result) -> list[str]:
    return [str(r.partition_key) for r in _maintenance(result)]


def _delete_an_sst(store: ObjectStore, db: str) -> str:
    stored, _ = inspect_database(store, db)
    path = resolve_sst_path(db, stored.manifest, stored.manifest.ssts[0])
    store.delete(path)
    return path


def _run(
    instance: dg.DagsterInstance, resources: dict[str, object], job: str, db: str
) -> dg.ExecuteInProcessResult:
    defs = dg.Definitions(assets=ASSETS, jobs=JOBS, resources=resources)
    return defs.resolve_job_def(job).execute_in_process(
        instance=instance, partition_key=db, tags={DATABASE_TAG: db}, raise_on_error=False
    )


# ---- damage hidden --------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["new manifest", "scanner restart"])
def test_a_missing_sst_stays_an_error_when_its_database_is_outside_the_verify_slice(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
    how: str,
) -> None:
    """SST existence is verified for a rotating slice of databases; the scanner keeps a database
    damaged only while its manifest is the same object in the same process. A writer's next
    manifest (or a code-server restart) must not turn a database with a missing SST back into a
    healthy, live one that gets compaction runs."""
    write_database(store, "alpha", l0_ssts=1, rows_per_sst=50)
    write_database(store, "tidy", l0_ssts=1, rows_per_sst=50)
    add_partitions(instance, "alpha", "tidy")
    one = _with(managed, verify_ssts_per_tick=1, l0_max_ssts=1)
    _delete_an_sst(store, "tidy")
    t1 = _tick(instance, store_resource, one)  # verifies alpha
    t2 = _tick(instance, store_resource, one, t1.cursor)  # verifies tidy
    assert not _checks(t2)[("tidy", INTACT)].passed
    assert "tidy" in _headline(t2)

    if how == "new manifest":  # the writer goes on: one more L0 SST, a new manifest
        write_database(store, "tidy", prefix="more-", l0_ssts=1, rows_per_sst=50, wal_rows=0)
    else:
        scanner_for(store_resource, one.fleet_scan_concurrency).forget(["tidy"])
    t3 = _tick(instance, store_resource, one, t2.cursor)  # verifies alpha again
    assert "tidy" not in _requested(t3), "a run was requested for a database with a missing SST"
    assert t3.skip_reason is not None and "tidy (damaged)" in (t3.skip_reason.skip_message or "")
    views = [e for e in t3.asset_events if isinstance(e, dg.AssetMaterialization)]
    if views:  # the view changed (a new L0 SST): it still names the damage
        assert "tidy" in _headline(t3), "the damaged database vanished from the headline"
        assert "missing" in str(_rows(_fleet(t3))["tidy"]["needs_attention"]).lower()
    assert ("tidy", INTACT) not in _checks(t3) or not _checks(t3)[("tidy", INTACT)].passed


def test_a_database_deleted_outside_destroy_is_an_error_not_a_passing_check(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
) -> None:
    """A database that was live and is now gone (objects deleted by hand or by a bucket rule,
    not by destroy): its intact check must not stay "passed" and the view must name it."""
    write_database(store, "alpha", l0_ssts=1, rows_per_sst=50)
    write_database(store, "tidy", l0_ssts=1, rows_per_sst=50)
    add_partitions(instance, "alpha", "tidy")
    first = _tick(instance, store_resource, managed)
    assert _checks(first)[("tidy", INTACT)].passed
    for meta in list(store.list("tidy")):
        store.delete(meta.path)
    gone = _tick(instance, store_resource, managed, first.cursor)
    assert _rows(_fleet(gone))["tidy"]["state"] == "missing"
    intact = _checks(gone).get(("tidy", INTACT))
    assert intact is not None and not intact.passed
    assert intact.severity == dg.AssetCheckSeverity.ERROR and "tidy" in (intact.description or "")
    assert "`tidy`" in _headline(gone)


def test_a_compaction_that_failed_on_corruption_is_an_error_in_the_view(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    resources: dict[str, object],
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    """A corrupt L0 SST is only found by the compactor (the sensor's check sees that it exists):
    the row must then be an error naming CorruptionError, not an L0 warning."""
    add_partitions(instance, orders)
    stored, _ = inspect_database(store, orders)
    m = stored.manifest
    sst = next(s for s in m.ssts if s.id == m.l0[-1].sst_id)
    path = resolve_sst_path(orders, m, sst)
    original = store.get(path).data
    data = bytearray(original)
    for i in range(64, min(len(data), 4096)):
        data[i] ^= 0xFF
    store.put(path, bytes(data))
    first = _tick(instance, store_resource, managed)
    assert _requested(first) == [orders]
    assert not _run(instance, resources, "compaction_job", orders).success
    after = _tick(instance, store_resource, managed, first.cursor)
    fleet = _fleet(after)
    assert fleet.metadata["databases_with_errors"].value == 1
    assert "CorruptionError" in _headline(after)
    assert "CorruptionError" in str(_rows(fleet)[orders]["needs_attention"])
    # repaired and compacted: no longer an error (the alert stays in its column)
    store.put(path, original)
    assert _run(instance, resources, "compaction_job", orders).success
    repaired = _fleet(_tick(instance, store_resource, managed, after.cursor))
    assert repaired.metadata["databases_with_errors"].value == 0
    assert "CorruptionError" in str(_rows(repaired)[orders]["latest_alert"])


# ---- the tick fails for everyone ------------------------------------------------------------


@pytest.mark.parametrize(
    "cursor",
    [
        '{"v":2,"verify_from":"x"}',
        '{"v":2,"runs_until":"yesterday"}',
        '{"v":2,"fleet_at":"soon","fleet_digest":null}',
        '{"v":2,"dbs":{"orders":{"b":["a","b","c"],"k":"ppppp"}}}',
        '{"v":2,"dbs":{"orders":{"c":"FAILURE","rl0":"abc","k":5}}}',
        '{"v":2,"dbs":{"orders":{"c":["FAILURE"],"alert":[1]}}}',
        '{"v":2,"dbs":{"orders":{"c":["FAILURE","x","CorruptionError"],"rl0":[1,2]}}}',
        '{"v":2,"dbs":[1,2]}',
        "[]",
        "null",
    ],
)
def test_a_hand_edited_cursor_does_not_fail_every_tick(
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
    orders: str,
    cursor: str,
) -> None:
    """A failed tick keeps its cursor, so a cursor the sensor cannot use would fail every later
    tick until someone resets it by hand: what cannot be used is dropped instead."""
    add_partitions(instance, orders)
    tick = _tick(instance, store_resource, managed, cursor)
    assert _requested(tick) == [orders]
    again = _tick(instance, store_resource, managed, tick.cursor)
    assert _requested(again) in ([], [orders])


def test_one_partition_that_is_not_a_valid_path_does_not_hide_the_others(
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    """Partitions can be added by hand in the UI; one that is not a database path used to make
    the scan raise, failing every tick for the whole fleet."""
    add_partitions(instance, orders, "typo/", "../up")
    tick = _tick(instance, store_resource, managed)
    assert _requested(tick) == [orders]
    rows = _rows(_fleet(tick))
    assert rows["typo/"]["state"] == "invalid" and "typo/" in _headline(tick)
    assert "InvalidArgument" in str(rows["../up"]["needs_attention"])
    assert _fleet(tick).metadata["databases_invalid"].value == 2


# ---- storms and the opposite ----------------------------------------------------------------


def test_a_compaction_that_failed_without_an_alert_is_requested_again(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    """Dagster launches a sensor's run key once: after a failure that is not an alert (a
    network error, a bad setting fixed since), keying on the unchanged L0 SSTs would mean the
    database is never compacted again while no writer adds an L0 SST."""
    add_partitions(instance, orders)
    first = _tick(instance, store_resource, managed)
    (request,) = _maintenance(first)
    bad = _with(managed, compactor_max_sst_size_bytes=0)
    failed = _run(instance, {"store": store_resource, "managed": bad}, "compaction_job", orders)
    assert not failed.success
    again = _tick(instance, store_resource, managed, first.cursor)
    (retry,) = _maintenance(again)
    assert retry.run_key != request.run_key
    # one retry per failure, not one per tick
    quiet = _tick(instance, store_resource, managed, again.cursor)
    assert [r.run_key for r in _maintenance(quiet)] == [retry.run_key]
    # the retry fails too: held back with a backoff that the tick explains, not a run per tick
    assert not _run(
        instance, {"store": store_resource, "managed": bad}, "compaction_job", orders
    ).success
    backoff = _tick(instance, store_resource, managed, quiet.cursor)
    assert _maintenance(backoff) == [] and backoff.skip_reason is not None
    assert "2 runs in a row failed" in (backoff.skip_reason.skip_message or "")
    # a success resets it: the next growth is requested under its own key
    assert _run(
        instance, {"store": store_resource, "managed": managed}, "compaction_job", orders
    ).success
    write_database(store, orders, prefix="later-", l0_ssts=6, rows_per_sst=50, wal_rows=0)
    fresh = _tick(instance, store_resource, managed, backoff.cursor)
    (request2,) = _maintenance(fresh)
    assert request2.run_key and "retry" not in request2.run_key


def test_no_second_compaction_while_one_for_the_database_is_queued_or_running(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    """A writer adds L0 SSTs while a long compaction runs: each tick saw a new set of L0 ids, so
    a new run key, and requested another compaction of the same database every tick (queued
    behind it by the per-database limit, or fencing it where there is none)."""
    add_partitions(instance, orders)
    first = _tick(instance, store_resource, managed)
    (request,) = _maintenance(first)
    for status in (dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTED):
        # what the daemon does with the request: a run of compaction_job for the partition
        run = create_run_for_test(
            instance,
            job_name="compaction_job",
            status=status,
            tags={**request.tags, "dagster/partition": orders, "dagster/run_key": request.run_key},
        )
        write_database(store, orders, prefix=f"{status.value}-", l0_ssts=1, wal_rows=0)
        busy = _tick(instance, store_resource, managed, first.cursor)
        assert _maintenance(busy) == []
        assert busy.skip_reason is not None
        assert "in progress" in (busy.skip_reason.skip_message or "")
        instance.report_run_canceled(run)
    # finished (here canceled): the next tick requests again
    after = _tick(instance, store_resource, managed, first.cursor)
    assert _requested(after) == [orders]


def test_a_compaction_launched_from_the_asset_page_that_fails_on_corruption_shows_in_the_view(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    resources: dict[str, object],
    instance: dg.DagsterInstance,
) -> None:
    """ "Materialize" on the compaction asset runs __ASSET_JOB, not compaction_job: its alert
    must reach the fleet view like the sensor's own runs' alerts."""
    write_database(store, "small", l0_ssts=5, rows_per_sst=50)  # over compactor_l0_trigger
    add_partitions(instance, "small")
    stored, _ = inspect_database(store, "small")
    m = stored.manifest
    path = resolve_sst_path("small", m, next(s for s in m.ssts if s.id == m.l0[-1].sst_id))
    data = bytearray(store.get(path).data)
    for i in range(64, min(len(data), 4096)):
        data[i] ^= 0xFF
    store.put(path, bytes(data))
    first = _tick(instance, store_resource, managed)
    defs = dg.Definitions(assets=ASSETS, jobs=JOBS, resources=resources)
    job = defs.resolve_implicit_global_asset_job_def()
    assert job.name == "__ASSET_JOB"
    by_hand = job.execute_in_process(
        instance=instance,
        partition_key="small",
        asset_selection=[compaction.key],
        raise_on_error=False,
    )
    assert not by_hand.success
    after = _tick(instance, store_resource, managed, first.cursor)
    row = _rows(_fleet(after))["small"]
    assert "CorruptionError" in str(row["latest_alert"])
    assert "failed" in str(row["last_compaction"])
    assert "`small`" in _headline(after)


def test_the_cursor_keeps_no_l0_ids_once_a_compaction_succeeded(
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    resources: dict[str, object],
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    """Dagster stores the cursor with every tick (successful ticks are kept for good): at 10,000
    databases each byte per database is 10 KB per tick. The L0 ids of a request (~30 bytes each)
    are only needed until its run succeeded."""
    add_partitions(instance, orders)
    first = _tick(instance, store_resource, managed)
    assert _requested(first) == [orders]
    assert _run(instance, resources, "compaction_job", orders).success
    after = _tick(instance, store_resource, managed, first.cursor)
    memory, _ = fleet_memory.load(instance, after.cursor)
    entry = memory.dbs[orders].to_json()
    assert "rl0" not in entry
    assert len(json.dumps(entry, separators=(",", ":"))) < 200


_HANGING: dict[str, FaultyStore] = {}


class _HangingStoreResource(ObjectStoreResource):
    """The test's store behind a FaultyStore whose pause point parks a request (a store that
    accepted the request and never answers)."""

    def open(self) -> ObjectStore:
        return _HANGING[self.url]


def test_a_tick_after_one_stuck_on_a_hanging_store_fails_quickly_and_says_why(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
) -> None:
    """Dagster gives up on a tick after its timeout but cannot stop the code server's thread,
    which keeps the scanner busy; every later tick (and schedule) waited for it, each holding a
    gRPC worker of the code server, with nothing on the sensor page but timeouts."""
    write_database(store, "tidy", l0_ssts=1, rows_per_sst=50)
    add_partitions(instance, "tidy")
    faulty = FaultyStore(store)
    _HANGING[store_resource.url] = faulty
    hanging = _HangingStoreResource(url=store_resource.url)
    stuck = faulty.pause("hang", "list", "tidy*")  # the scan's first request: a LIST under tidy
    first: list[object] = []

    def stuck_tick() -> None:
        try:
            first.append(
                evaluate_fleet(dg.build_sensor_context(instance=instance), hanging, managed)
            )
        except Exception as e:  # shown by the assertions below
            first.append(e)

    thread = threading.Thread(target=stuck_tick, daemon=True)
    thread.start()
    try:
        assert stuck.wait_reached(30), first
        started = time.monotonic()
        with pytest.raises(SlateDBError, match="still running"):
            evaluate_fleet(dg.build_sensor_context(instance=instance), hanging, managed)
        assert time.monotonic() - started < 20
    finally:
        stuck.release()
        thread.join(60)
        _HANGING.pop(store_resource.url)
    assert first and isinstance(first[0], dg.SensorResult)  # the stuck tick itself completes


def test_a_database_recreated_after_it_went_missing_has_no_stale_boundary_error(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
) -> None:
    """The boundaries remembered of a database that went missing belong to that database: once
    one is created again at the path, its own (unset) boundaries are no "moved back" or
    "disappeared" error, which nothing but a cursor reset would clear."""
    write_database(store, "tidy", l0_ssts=3, rows_per_sst=50)
    add_partitions(instance, "tidy")
    assert run_gc_once("tidy", store, managed.gc_options()).manifest_boundary
    first = _tick(instance, store_resource, managed)
    for meta in list(store.list("tidy")):
        store.delete(meta.path)
    gone = _tick(instance, store_resource, managed, first.cursor)
    assert not _checks(gone)[("tidy", INTACT)].passed
    write_database(store, "tidy", l0_ssts=1, rows_per_sst=50)
    again = _tick(instance, store_resource, managed, gone.cursor)
    assert _checks(again)[("tidy", INTACT)].passed
    assert ("tidy", BOUNDARIES) not in _checks(again) or _checks(again)[("tidy", BOUNDARIES)].passed
    assert _rows(_fleet(again))["tidy"]["needs_attention"] == ""


def test_a_partition_with_no_database_behind_it_is_named_in_the_headline(
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    """A listed database that does not exist (a typo in the settings) must not read as
    "All 2 databases are healthy"."""
    add_partitions(instance, orders, "ordres")
    tick = _tick(instance, store_resource, managed)
    assert "`ordres`" in _headline(tick)
    assert "no database" in str(_rows(_fleet(tick))["ordres"]["needs_attention"])


def test_the_deep_intact_check_of_a_deleted_database_fails_and_of_a_destroyed_one_passes(
    store: ObjectStore,
    resources: dict[str, object],
    instance: dg.DagsterInstance,
) -> None:
    """health_check_job (or "Execute" on a check) on a partition with no database behind it
    passed its intact check ("skipped: database not found"), flipping the sensor's failure for
    a database deleted outside destroy back to passed with nothing repaired."""
    write_database(store, "tidy", l0_ssts=1, rows_per_sst=50)
    write_database(store, "legacy", l0_ssts=1, rows_per_sst=50)
    destroy("legacy", store, soft=False)  # destroyed and collected: only the tombstone is left
    for meta in list(store.list("tidy")):
        store.delete(meta.path)
    add_partitions(instance, "tidy", "legacy")
    defs = dg.Definitions(
        assets=ASSETS, asset_checks=CHECKS, jobs=[health_check_job], resources=resources
    )
    job = defs.resolve_job_def("health_check_job")
    results = {}
    for db in ("tidy", "legacy"):
        run = job.execute_in_process(
            tags={"dagster/partition": db}, instance=instance, raise_on_error=False
        )
        results[db] = {e.check_name: e for e in run.get_asset_check_evaluations()}
    intact = results["tidy"][INTACT]
    assert not intact.passed and intact.severity == dg.AssetCheckSeverity.ERROR
    assert "tidy" in (intact.description or "") and "no database" in (intact.description or "")
    assert results["legacy"][INTACT].passed
    assert "destroyed" in (results["legacy"][INTACT].description or "")


def test_a_check_that_fails_again_with_the_same_figures_is_reported_again(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    resources: dict[str, object],
    instance: dg.DagsterInstance,
) -> None:
    """Dagster launches a sensor's run key once. A report keyed on its content alone is skipped
    when a check fails again with the same figures as an earlier failure (L0 back at 6 after a
    compaction): the check stays "passed" in Dagster while the sensor believes it reported the
    failure, and it never reports it again."""
    write_database(store, "small", l0_ssts=2, rows_per_sst=50)
    add_partitions(instance, "small")
    t1 = _tick(instance, store_resource, managed)
    write_database(store, "small", prefix="a-", l0_ssts=4, rows_per_sst=50, wal_rows=0)
    t2 = _tick(instance, store_resource, managed, t1.cursor)
    assert not _checks(t2)[("small", L0)].passed
    assert _run(instance, resources, "compaction_job", "small").success
    t3 = _tick(instance, store_resource, managed, t2.cursor)
    assert _checks(t3)[("small", L0)].passed
    write_database(store, "small", prefix="b-", l0_ssts=6, rows_per_sst=50, wal_rows=0)
    t4 = _tick(instance, store_resource, managed, t3.cursor)
    again = _checks(t4)[("small", L0)]
    assert not again.passed and again.description == _checks(t2)[("small", L0)].description
    keys = [{r.run_key for r in t.run_requests or [] if r.job_name == REPORT_JOB} for t in (t2, t4)]
    assert keys[0] and keys[1] and not keys[0] & keys[1], "the second report has a used run key"


def test_results_of_a_report_run_that_failed_are_reported_again(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
) -> None:
    """The cursor counts a result as reported when the tick requests its report run; a run that
    then fails or is canceled (a worker lost, canceled from the queue) recorded nothing, and
    the sensor would never report those results again."""
    write_database(store, "small", l0_ssts=2, rows_per_sst=50)
    add_partitions(instance, "small")
    t1 = _tick(instance, store_resource, managed)
    (report,) = [r for r in t1.run_requests or [] if r.job_name == REPORT_JOB]
    assert ("small", L0) in _checks(t1)
    create_run_for_test(  # what the daemon launched for the request, failed
        instance,
        job_name=REPORT_JOB,
        status=dg.DagsterRunStatus.FAILURE,
        run_config=report.run_config,
        tags={**report.tags, "dagster/run_key": report.run_key},
    )
    t2 = _tick(instance, store_resource, managed, t1.cursor)
    assert set(_checks(t2)) == set(_checks(t1))
    t3 = _tick(instance, store_resource, managed, t2.cursor)
    assert ("small", L0) not in _checks(t3)  # reported again once, not every tick
