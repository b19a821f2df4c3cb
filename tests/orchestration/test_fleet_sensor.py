"""fleet_sensor driven tick by tick (build_sensor_context with the previous cursor) against real
databases and real runs in an ephemeral instance: no storm on a damaged database, checks of the
current state, the fleet view, skip reasons, runs for live databases only."""

from __future__ import annotations

from datetime import timedelta

import dagster as dg
import pytest

from devtools.sample_data import write_database
from orchestration.alerts import DATABASE_TAG
from orchestration.assets import ASSETS, compaction, garbage_collection
from orchestration.fleet_sensor import evaluate_fleet
from orchestration.fleet_state import BOUNDARIES, CHECK_ORDER, INTACT, L0, LAG, WAL
from orchestration.jobs import JOBS
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from slatedb_core import CheckpointOptions, ObjectStore, admin, run_gc_once
from slatedb_core.health import inspect_database
from slatedb_core.layout import boundary_path
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.lsm.dbstate import resolve_sst_path
from tests.orchestration.conftest import add_partitions
from tests.orchestration.fleet_ticks import Tick, fleet_rows, fleet_view, tick

Result = Tick


@pytest.fixture
def managed(managed: ManagedDatabasesResource) -> ManagedDatabasesResource:
    """The shared settings, with the fleet view materialized on every change (no minimum
    interval), so each tick's view can be read."""
    return ManagedDatabasesResource(**{**managed.model_dump(), "fleet_min_interval_s": 0})


_tick = tick


def _checks(
    result: Result, db: str | None = None
) -> dict[tuple[str, str], dg.AssetCheckEvaluation]:
    return {
        (e.partition or "", e.check_name): e
        for e in result.asset_events
        if isinstance(e, dg.AssetCheckEvaluation) and (db is None or e.partition == db)
    }


def _fleet(result: Result) -> dg.AssetMaterialization:
    return fleet_view(result.asset_events)


_rows = fleet_rows


def _run_compaction(
    instance: dg.DagsterInstance, resources: dict[str, object], db: str
) -> dg.ExecuteInProcessResult:
    defs = dg.Definitions(assets=ASSETS, jobs=JOBS, resources=resources)
    return defs.resolve_job_def("compaction_job").execute_in_process(
        instance=instance, partition_key=db, tags={DATABASE_TAG: db}, raise_on_error=False
    )


def _corrupt_first_l0(store: ObjectStore, db: str) -> tuple[str, bytes]:
    stored, _ = inspect_database(store, db)
    m = stored.manifest
    sst = next(s for s in m.ssts if s.id == m.l0[-1].sst_id)
    path = resolve_sst_path(db, m, sst)
    original = store.get(path).data
    damaged = bytearray(original)
    for i in range(64, min(len(damaged), 4096)):
        damaged[i] ^= 0xFF
    store.put(path, bytes(damaged))
    return path, original


def test_a_damaged_database_is_requested_once_then_held_back_until_its_l0_changes(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    resources: dict[str, object],
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    add_partitions(instance, orders)
    path, original = _corrupt_first_l0(store, orders)

    first = _tick(instance, store_resource, managed)
    (request,) = first.run_requests or []
    assert request.partition_key == orders and request.tags[DATABASE_TAG] == orders
    assert request.run_key and request.run_key.startswith(f"compaction:{orders}:l0-")
    assert "L0 SSTs 6 > 4" in request.tags["slatedb/reason"]

    failed = _run_compaction(instance, resources, orders)
    assert not failed.success
    epoch_after_failure = inspect_database(store, orders)[1].compactor_epoch

    # Every later tick: nothing requested, and the tick says why; the failing attempts bumped the
    # compactor epoch and wrote manifests, which used to make a new run key every tick.
    cursor = first.cursor
    for _ in range(3):
        tick = _tick(instance, store_resource, managed, cursor)
        assert tick.run_requests == []
        assert tick.skip_reason is not None
        why = tick.skip_reason.skip_message or ""
        assert "held back" in why.lower() and "CorruptionError" in why
        cursor = tick.cursor
    assert inspect_database(store, orders)[1].compactor_epoch == epoch_after_failure

    # New writes add L0 SSTs, but the one it failed on is still there: still held back.
    write_database(store, orders, prefix="later-", l0_ssts=2, rows_per_sst=50, wal_rows=0)
    assert _tick(instance, store_resource, managed, cursor).run_requests == []

    # Repaired and compacted by hand: the hold is lifted; the next growth is requested again.
    store.put(path, original)
    assert _run_compaction(instance, resources, orders).success
    write_database(store, orders, prefix="again-", l0_ssts=6, rows_per_sst=50, wal_rows=0)
    again = _tick(instance, store_resource, managed, cursor)
    (request2,) = again.run_requests or []
    assert request2.run_key != request.run_key


def test_checks_of_the_current_state_report_on_change_with_severities_and_names(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    write_database(store, "tidy", l0_ssts=1, rows_per_sst=50)
    add_partitions(instance, orders, "tidy")
    first = _tick(instance, store_resource, managed)
    checks = _checks(first)
    l0 = checks[(orders, L0)]
    assert not l0.passed and l0.severity == dg.AssetCheckSeverity.WARN
    assert l0.description is not None and orders in l0.description and "6" in l0.description
    assert l0.asset_key == compaction.key
    assert checks[("tidy", L0)].passed
    assert checks[(orders, WAL)].passed and checks[(orders, LAG)].passed
    assert checks[(orders, BOUNDARIES)].passed
    # SST existence: verified in rotation (50 per tick here), so both got it on the first tick
    assert checks[(orders, INTACT)].passed and checks[(orders, INTACT)].severity.value == "ERROR"

    # Same state: nothing re-reported.
    quiet = _tick(instance, store_resource, managed, first.cursor)
    assert _checks(quiet) == {}

    # A deleted SST: ERROR on that database only, and the tick does not fail.
    stored, _ = inspect_database(store, "tidy")
    sst = stored.manifest.ssts[0]
    store.delete(resolve_sst_path("tidy", stored.manifest, sst))
    gone = _tick(instance, store_resource, managed, quiet.cursor)
    intact = _checks(gone)[("tidy", INTACT)]
    assert not intact.passed and intact.severity == dg.AssetCheckSeverity.ERROR
    assert intact.description is not None and "tidy" in intact.description
    assert "missing" in intact.description
    assert set(_checks(gone)) == {("tidy", INTACT)}
    rows = _rows(_fleet(gone))
    assert "missing" in str(rows["tidy"]["needs_attention"])


def test_a_corrupt_manifest_is_an_error_check_and_in_the_headline_not_a_log_line_per_tick(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    write_database(store, "broken", l0_ssts=2, rows_per_sst=50)
    add_partitions(instance, orders, "broken")
    stored, _ = inspect_database(store, "broken")
    manifest = f"broken/manifest/{stored.id:020d}.manifest"
    store.put(manifest, b"\x00garbage" * 8)
    first = _tick(instance, store_resource, managed)
    intact = _checks(first)[("broken", INTACT)]
    assert not intact.passed and intact.severity == dg.AssetCheckSeverity.ERROR
    assert intact.description is not None and "broken" in intact.description
    fleet = _fleet(first)
    assert _rows(fleet)["broken"]["state"] == "damaged"
    headline = str(fleet.metadata["headline"].value)
    assert "2 of 2 databases need attention" in headline and "`broken`" in headline
    assert fleet.metadata["databases_damaged"].value == 1
    # the damaged database gets no run; the healthy one over its threshold does
    assert [r.partition_key for r in first.run_requests or []] == [orders]
    again = _tick(instance, store_resource, managed, first.cursor)
    assert ("broken", INTACT) not in _checks(again)


def test_fleet_view_rows_states_and_trends(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    write_database(store, "legacy", l0_ssts=6, rows_per_sst=50, wal_rows=0)
    destroy("legacy", store, soft=True)
    add_partitions(instance, orders, "legacy", "vanished")
    first = _tick(instance, store_resource, managed)
    fleet = _fleet(first)
    rows = _rows(fleet)
    assert rows[orders]["state"] == "live" and rows[orders]["l0_ssts"] == "6 / 4"
    assert rows["legacy"]["state"] == "destroyed"
    assert rows["vanished"]["state"] == "missing"
    assert fleet.metadata["databases"].value == 3
    assert fleet.metadata[f"{orders}/l0_ssts"].value == 6
    assert f"{orders}/manifests" in fleet.metadata and f"{orders}/sst_bytes" in fleet.metadata
    assert "legacy/l0_ssts" not in fleet.metadata
    # live only: the destroyed one is over its L0 threshold too, but gets no run
    assert [r.partition_key for r in first.run_requests or []] == [orders]
    # unchanged: no new materialization within fleet_refresh_s
    quiet = _tick(instance, store_resource, managed, first.cursor)
    assert not [e for e in quiet.asset_events if isinstance(e, dg.AssetMaterialization)]


def test_lag_pinned_by_a_checkpoint_is_reported_and_never_a_compaction(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
) -> None:
    write_database(store, "pinned", l0_ssts=1, rows_per_sst=50, wal_rows=0)
    reader_cp = admin.create_checkpoint("pinned", store)
    write_database(store, "pinned", prefix="more-", l0_ssts=2, rows_per_sst=50, wal_rows=0)
    add_partitions(instance, "pinned")
    strict = ManagedDatabasesResource(
        **{**managed.model_dump(), "manifest_lag_max": 2, "l0_max_ssts": 100}
    )
    first = _tick(instance, store_resource, strict)
    assert first.run_requests == []
    lag = _checks(first)[("pinned", LAG)]
    assert not lag.passed and lag.severity == dg.AssetCheckSeverity.WARN
    assert lag.description is not None and "unnamed" in lag.description
    assert str(reader_cp.id) in str(_rows(_fleet(first))["pinned"]["lag_pinned_by"])

    # pinned by the managed retention checkpoint instead: a checkpoint_refresh run, no compaction
    admin.delete_checkpoint("pinned", store, reader_cp.id)
    retention = admin.create_checkpoint(
        "pinned", store, CheckpointOptions(lifetime=timedelta(hours=1), name="retention")
    )
    write_database(store, "pinned", prefix="later-", l0_ssts=3, rows_per_sst=50, wal_rows=0)
    second = _tick(instance, store_resource, strict, first.cursor)
    (request,) = second.run_requests or []
    assert request.job_name == "checkpoint_job" and request.partition_key == "pinned"
    assert request.run_key == f"checkpoint:pinned:{retention.id}"
    assert "pinned by retention" in request.tags["slatedb/reason"]


def test_a_quiet_tick_explains_itself_with_figures_against_thresholds(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
) -> None:
    write_database(store, "small", l0_ssts=2, rows_per_sst=50)
    add_partitions(instance, "small")
    first = _tick(instance, store_resource, managed)
    assert first.run_requests == [] and len(first.reports) == 1  # only its check results
    quiet = _tick(instance, store_resource, managed, first.cursor)
    assert quiet.reports == [] and quiet.skip_reason is not None
    text = quiet.skip_reason.skip_message or ""
    assert "highest L0 2/4 (small)" in text and "none over its thresholds" in text
    empty = _tick(dg.DagsterInstance.ephemeral(), store_resource, managed)
    assert empty.skip_reason is not None
    assert "no database partitions" in (empty.skip_reason.skip_message or "")


def test_boundaries_that_move_back_or_vanish_are_error_checks_and_advances_are_observed(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    add_partitions(instance, orders)
    learnt = _tick(instance, store_resource, managed)  # a first sighting is learnt, not an advance
    assert _rows(_fleet(learnt))[orders]["boundary_advanced"] == ""
    stats = run_gc_once(orders, store, managed.gc_options())
    assert stats.manifest_boundary
    first = _tick(instance, store_resource, managed, learnt.cursor)
    assert _rows(_fleet(first))[orders]["boundary_advanced"] != ""
    (seen,) = [
        e
        for e in first.asset_events
        if isinstance(e, dg.AssetObservation) and e.asset_key == garbage_collection.key
    ]
    assert seen.metadata["manifest_boundary"].value == stats.manifest_boundary
    assert _checks(learnt)[(orders, BOUNDARIES)].passed

    store.put(boundary_path(orders, "manifest"), b"1")
    back = _tick(instance, store_resource, managed, first.cursor)
    check = _checks(back)[(orders, BOUNDARIES)]
    assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR
    assert check.description is not None and "moved back" in check.description
    assert orders in check.description
    assert "moved back" in str(_rows(_fleet(back))[orders]["needs_attention"])

    store.delete(boundary_path(orders, "manifest"))
    vanished = _tick(instance, store_resource, managed, back.cursor)
    # a boundary file GC never deletes is gone: the database is damaged (an ERROR check naming
    # the file), and it gets no run until repaired
    intact = _checks(vanished)[(orders, INTACT)]
    assert not intact.passed and "gc/manifest.boundary" in (intact.description or "")
    assert _rows(_fleet(vanished))[orders]["state"] == "damaged"
    assert vanished.run_requests == []


@pytest.mark.parametrize("bad", [{"fleet_table_rows": 0}, {"verify_ssts_per_tick": -1}])
def test_absurd_fleet_settings_are_refused(
    managed: ManagedDatabasesResource, bad: dict[str, int]
) -> None:
    from slatedb_core.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match=next(iter(bad))):
        ManagedDatabasesResource(**{**managed.model_dump(), **bad}).check_settings()


def test_a_large_first_tick_spreads_its_check_results_failures_first(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    write_database(store, "tidy", l0_ssts=1, rows_per_sst=50)
    add_partitions(instance, orders, "tidy")
    small = ManagedDatabasesResource(**{**managed.model_dump(), "max_events_per_tick": 3})
    first = _tick(instance, store_resource, small)
    reported = _checks(first)
    assert len(reported) == 3
    assert not reported.pop((orders, L0)).passed  # the failing one comes first
    seen = set(_checks(first))
    cursor = first.cursor
    for _ in range(6):
        tick = _tick(instance, store_resource, small, cursor)
        batch = set(_checks(tick))
        assert len(batch) <= 3 and not batch & seen  # each result reported once
        seen |= batch
        cursor = tick.cursor
    assert seen == {(db, c) for db in (orders, "tidy") for c in CHECK_ORDER}


def test_check_results_of_successive_ticks_are_stored_by_a_real_instance(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    resources: dict[str, object],
    orders: str,
) -> None:
    """What the daemon does with a tick, on a SQLite-backed instance: asset events reported
    without a run, run requests launched. A second result for one check of one database,
    reported without a run, broke the instance's unique index (and every later tick)."""
    from orchestration.fleet_report import fleet_report_job

    defs = dg.Definitions(assets=ASSETS, jobs=[*JOBS, fleet_report_job], resources=resources)
    with dg.instance_for_test() as instance:
        add_partitions(instance, orders)

        def daemon_tick(cursor: str | None) -> str | None:
            result = evaluate_fleet(
                dg.build_sensor_context(instance=instance, cursor=cursor), store_resource, managed
            )
            assert isinstance(result, dg.SensorResult)
            for event in result.asset_events:
                instance.report_runless_asset_event(event)
            for request in result.run_requests or []:
                if request.job_name == "fleet_report_job":
                    job = defs.resolve_job_def("fleet_report_job")
                    assert job.execute_in_process(
                        run_config=request.run_config, instance=instance, tags=request.tags
                    ).success
            return result.cursor

        cursor = daemon_tick(None)  # L0 6 > 4: the L0 check fails
        dg.materialize([compaction], partition_key=orders, resources=resources, instance=instance)
        cursor = daemon_tick(cursor)  # L0 0: the same check of the same database passes
        history = instance.event_log_storage.get_asset_check_execution_history(
            dg.AssetCheckKey(compaction.key, L0), limit=10
        )
        assert [(r.partition, r.status.value) for r in history] == [
            (orders, "SUCCEEDED"),
            (orders, "FAILED"),
        ]


def test_the_memory_lives_in_the_instance_and_the_cursor_stays_small(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    """Dagster stores the cursor with every tick: only a pointer goes there. A slot overwritten
    behind the cursor's back (a stale tick) is not trusted: the sensor starts afresh."""
    from orchestration import fleet_memory

    names = [f"db{i:03d}" for i in range(40)]
    for name in names:
        write_database(store, name, l0_ssts=1, rows_per_sst=10, wal_rows=0)
    add_partitions(instance, orders, *names)
    first = _tick(instance, store_resource, managed)
    assert first.cursor is not None and len(first.cursor) < 200
    memory, slot = fleet_memory.load(instance, first.cursor)
    assert set(memory.dbs) == {orders, *names} and slot == "a"
    second = _tick(instance, store_resource, managed, first.cursor)
    assert fleet_memory.load(instance, second.cursor)[1] == "b"
    # a failed tick writes the other slot; the cursor it could not save still reads its own
    memory.verify_from += 1
    fleet_memory.save(instance, memory, "b")  # overwrites slot a, as a stale tick would
    assert fleet_memory.load(instance, second.cursor)[0].dbs  # slot b untouched
    stale, _ = fleet_memory.load(instance, first.cursor)  # slot a no longer matches its pointer
    assert stale.dbs == {}
