"""The change-feed schedules (issue 43 gaps, item 1): ``changes_to_delta_schedule`` requests a
pass per live database and ``changes_table_to_delta_schedule`` one per table, on the cron of
``schedules.changes_to_delta``, stopped unless ``changes_to_delta_running``; the runs they
request apply the changes incrementally (real Dagster, real deltalake, real databases)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import dagster as dg
import pytest
from deltalake import DeltaTable

from orchestration.changes_assets import CHANGES_ASSETS, CHANGES_CHECKS, ChangesToDeltaResource
from orchestration.changes_schedules import build_changes_schedules
from orchestration.definitions import build_definitions
from orchestration.partitions import DATABASES, TABLES
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from orchestration.settings import CONFIG_ENV, STORE_URL_ENV, ScheduleSettings, load_settings
from slatedb_core import Db, ObjectStore, Table
from slatedb_core.lifecycle.destroy import destroy


def _kv(uri: str) -> dict[bytes, bytes]:
    t = DeltaTable(uri).to_pyarrow_table()
    return dict(zip(t.column("key").to_pylist(), t.column("value").to_pylist(), strict=True))


def test_the_schedules_are_stopped_unless_configured_with_their_cron(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    off = {s.name: s for s in build_changes_schedules(ScheduleSettings())}
    assert set(off) == {"changes_to_delta_schedule", "changes_table_to_delta_schedule"}
    assert {s.cron_schedule for s in off.values()} == {"*/5 * * * *"}
    assert {s.default_status for s in off.values()} == {dg.DefaultScheduleStatus.STOPPED}

    config = tmp_path / "slatedb.yaml"
    config.write_text(
        "store: {url: memory://x}\n"
        "schedules: {changes_to_delta: '*/2 * * * *', changes_to_delta_running: true}\n"
    )
    monkeypatch.setenv(CONFIG_ENV, str(config))
    monkeypatch.setenv(STORE_URL_ENV, (tmp_path / "s").as_uri())
    repo = build_definitions(load_settings()).get_repository_def()
    for name in off:
        schedule = repo.get_schedule_def(name)
        assert schedule.cron_schedule == "*/2 * * * *"
        assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    # running: false for every schedule still wins
    stopped = build_changes_schedules(
        ScheduleSettings(running=False, changes_to_delta_running=True)
    )
    assert {s.default_status for s in stopped} == {dg.DefaultScheduleStatus.STOPPED}


def test_ticks_request_live_databases_and_tables_and_their_runs_apply_only_new_changes(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    persistent_instance: dg.DagsterInstance,
    tmp_path: Path,
) -> None:
    instance = persistent_instance
    with Db.open("orders", store) as db:
        db.put(b"a", b"1")
    with Db.open("legacy", store) as db:
        db.put(b"x", b"1")
    destroy("legacy", store, soft=True)
    with Table.create("t", store, [b"m"]) as table:
        with table.writer(0) as w:
            w.put(b"k", b"1")
    instance.add_dynamic_partitions(DATABASES, ["orders", "legacy"])
    instance.add_dynamic_partitions(TABLES, ["t"])
    schedules = {
        s.name: s for s in build_changes_schedules(ScheduleSettings(changes_to_delta_running=True))
    }
    changes = ChangesToDeltaResource(
        root=str(tmp_path / "changes"), table_root=str(tmp_path / "tchanges")
    )
    defs = dg.Definitions(
        assets=CHANGES_ASSETS,
        asset_checks=CHANGES_CHECKS,
        jobs=[s.job for s in schedules.values()],
        resources={"store": store_resource, "managed": managed, "changes_delta": changes},
    )

    def tick(name: str, minute: int) -> dict[str, dg.RunRequest]:
        when = dt.datetime(2026, 11, 24, 12, minute, tzinfo=dt.UTC)
        with dg.build_schedule_context(
            instance=instance,
            resources={"store": store_resource, "managed": managed},
            scheduled_execution_time=when,
        ) as ctx:
            result = schedules[name](ctx)
        assert isinstance(result, list), result
        return {r.partition_key or "": r for r in result}

    def run(name: str, request: dg.RunRequest) -> None:
        job = defs.resolve_job_def(str(schedules[name].job_name))
        result = job.execute_in_process(
            partition_key=request.partition_key, instance=instance, tags=request.tags
        )
        assert result.success

    for minute, puts in ((0, {}), (5, {b"b": b"2"})):
        if puts:
            with Db.open("orders", store) as db:
                for k, v in puts.items():
                    db.put(k, v)
            with Table.open("t", store) as table, table.writer(0) as w:
                w.put(b"k", b"2")
        dbs = tick("changes_to_delta_schedule", minute)
        assert set(dbs) == {"orders"}  # not the destroyed one
        assert dbs["orders"].run_key == f"orders@2026-11-24T12:{minute:02d}:00+00:00"
        tables = tick("changes_table_to_delta_schedule", minute)
        assert set(tables) == {"t"}
        run("changes_to_delta_schedule", dbs["orders"])
        run("changes_table_to_delta_schedule", tables["t"])
    assert _kv(changes.uri("orders")) == {b"a": b"1", b"b": b"2"}
    assert _kv(changes.table_uri("t")) == {b"k": b"2"}
    # two passes, each one commit: the second applied only the changes after the first
    assert len(DeltaTable(changes.uri("orders")).history()) == 2
    assert len(DeltaTable(changes.table_uri("t")).history()) == 2
