"""The definitions load (from the default settings and from a given file) and hold every asset,
check, job, schedule and sensor; bad settings fail at load time with a clear error."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from orchestration.definitions import build_definitions
from orchestration.settings import CONFIG_ENV, STORE_URL_ENV, load_settings
from slatedb_core.errors import InvalidArgument


def test_default_definitions_load() -> None:
    from orchestration.definitions import defs

    dg.Definitions.validate_loadable(defs)
    repo = defs.get_repository_def()
    assert {k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()} == {
        "compaction",
        "garbage_collection",
        "checkpoint_refresh",
        "delta_export",
        "rescaling",
        "slatedb_fleet",
        "changes_to_delta",
        "changes_table_to_delta",
    }
    checks = {k.name for k in repo.asset_graph.asset_check_keys}
    assert checks == {
        "manifest_and_ssts_intact",
        "l0_under_threshold",
        "wal_backlog_under_threshold",
        "manifest_lag_under_threshold",
        "no_expired_checkpoint_lingering",
        "boundaries_behind_latest",
        "changes_consumer_retained",
        "changes_table_retained",
    }
    assert "health_check_job" in {j.name for j in repo.get_all_jobs()}
    # maintenance is on unless the deployment's settings say otherwise; the change-feed
    # schedules are off unless they say so (orchestration/changes_schedules.py)
    changes = {"changes_to_delta_schedule", "changes_table_to_delta_schedule"}
    assert {s.default_status for s in repo.schedule_defs if s.name not in changes} == {
        dg.DefaultScheduleStatus.RUNNING
    }
    assert {s.name for s in repo.schedule_defs} == {
        "compaction_schedule",
        "gc_schedule",
        "checkpoint_schedule",
        "export_schedule",
        "rescaling_schedule",
        *changes,
    }
    assert {s.name for s in repo.sensor_defs} == {
        "database_discovery_sensor",
        "fleet_sensor",
        "slatedb_alert_sensor",
    }


def test_settings_file_drives_crons_and_resources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "slatedb.yaml"
    config.write_text(
        "store: {url: memory://x}\n"
        "managed: {databases: [a, b], l0_max_ssts: 3}\n"
        "schedules: {compaction: '*/5 * * * *', running: true}\n"
        "sensors_running: false\n"
    )
    monkeypatch.setenv(CONFIG_ENV, str(config))
    monkeypatch.setenv(STORE_URL_ENV, (tmp_path / "s").as_uri())
    settings = load_settings()
    assert settings.store["url"] == (tmp_path / "s").as_uri()
    defs = build_definitions(settings)
    repo = defs.get_repository_def()
    schedule = repo.get_schedule_def("compaction_schedule")
    assert schedule.cron_schedule == "*/5 * * * *"
    assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    sensor = repo.get_sensor_def("fleet_sensor")
    assert sensor.default_status == dg.DefaultSensorStatus.STOPPED
    assert defs.resources is not None
    assert defs.resources["managed"].l0_max_ssts == 3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("store: {url: memory://x}\nmanged: {}\n", "unknown keys"),
        ("managed: {}\n", "store.url is required"),
        ("store: {url: memory://x}\nschedules: {compation: '* * * * *'}\n", "unknown schedules"),
    ],
)
def test_bad_settings_are_refused(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    with pytest.raises(InvalidArgument, match=message):
        load_settings(config)


def test_bad_durations_fail_when_the_definitions_are_built(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(
        "store: {url: memory://x}\nmanaged: {checkpoints: [{name: daily, lifetime: 1 fortnight}]}\n"
    )
    with pytest.raises(InvalidArgument, match="fortnight"):
        build_definitions(load_settings(config))
