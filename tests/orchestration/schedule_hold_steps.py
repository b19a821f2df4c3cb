"""Steps of the schedule-hold tests (tests/orchestration/test_schedule_holds.py,
test_hold_any_launch.py): one schedule tick, a compaction launched by hand, a corrupt last L0
SST, and the partitions a tick requested."""

from __future__ import annotations

import datetime as dt

import dagster as dg

from orchestration.assets import ASSETS
from orchestration.jobs import JOBS
from orchestration.schedules import build_schedules
from orchestration.settings import ScheduleSettings
from slatedb_core import ObjectStore
from slatedb_core.health import inspect_database
from slatedb_core.lsm.dbstate import resolve_sst_path

T0 = dt.datetime(2026, 11, 24, 12, 0, tzinfo=dt.UTC)


def schedule_tick(
    instance: dg.DagsterInstance,
    resources: dict[str, object],
    when: dt.datetime,
    name: str = "compaction_schedule",
) -> list[dg.RunRequest] | dg.SkipReason:
    schedule = next(s for s in build_schedules(ScheduleSettings()) if s.name == name)
    with dg.build_schedule_context(
        instance=instance, resources=resources, scheduled_execution_time=when
    ) as ctx:
        result = schedule(ctx)
    assert isinstance(result, list | dg.SkipReason)
    return result


def by_hand(
    instance: dg.DagsterInstance, resources: dict[str, object], db: str
) -> dg.ExecuteInProcessResult:
    """A compaction launched from the Launchpad: the partition, no tags of ours."""
    defs = dg.Definitions(assets=ASSETS, jobs=JOBS, resources=resources)
    return defs.resolve_job_def("compaction_job").execute_in_process(
        instance=instance, partition_key=db, raise_on_error=False
    )


def corrupt_last_l0(store: ObjectStore, db: str) -> tuple[str, bytes]:
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


def requested(result: list[dg.RunRequest] | dg.SkipReason) -> set[str]:
    return set() if isinstance(result, dg.SkipReason) else {r.partition_key or "" for r in result}
