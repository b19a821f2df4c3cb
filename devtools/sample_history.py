"""History for the sample databases of ``make ui``: several real ticks of ``fleet_sensor`` with real
changes to the databases between them, so the fleet view (``slatedb_fleet``) opens with several
materializations and its per-database plots (``orders/l0_ssts``, ``orders/manifests``, ...) have
lines, not single points.

Each tick is what the daemon does with the sensor: ``evaluate_fleet`` on the previous tick's cursor,
its asset events (check evaluations, observations, the fleet view) written into the instance, its
run requests executed as runs of their jobs on their partition with their tags. Between ticks the
script changes the databases as a workload and the schedules would: more memtable flushes (L0
grows), a GC pass, a few more rows.

The sample runs with two settings changed from the repository's ``orchestration/slatedb.yaml``, so
that seconds-apart ticks show what hours of a real deployment would: ``gc_min_age`` 0 (GC deletes
the manifests compaction made obsolete at once) and ``fleet_min_interval_s`` 0 (every tick that
changes the view materializes it). ``dagster dev`` later reads the file unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import dagster as dg
import pyarrow as pa

from orchestration.fleet_sensor import evaluate_fleet
from orchestration.partitions import DATABASES
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from slatedb_core import Db, DbOptions, ObjectStore

HISTORY_OVERRIDES: Mapping[str, Any] = {"gc_min_age": "0s", "fleet_min_interval_s": 0}
"""Settings of the sample's runs and ticks that differ from the deployment's (see above)."""


REFUSED = (
    "Dagster 1.13 stores a runless check evaluation (a sensor's) under run id '' and keeps one row "
    "per (asset, check, run id, partition) in asset_check_executions: a second evaluation of the "
    "same check on the same partition fails with an IntegrityError. In the daemon that fails the "
    "tick before its cursor is saved."
)


@dataclass(frozen=True)
class Step:
    """What changes before one tick: ``change`` runs against the store, then ``runs`` (job name,
    partition) are executed, as a schedule would launch them."""

    title: str
    change: Callable[[ObjectStore], None] | None = None
    runs: tuple[tuple[str, str], ...] = ()


def _rows(prefix: str, start: int, count: int) -> pa.Table:
    keys = [f"{prefix}{i:08d}".encode() for i in range(start, start + count)]
    values = [f"value-{i:010d}".encode() + b"x" * 48 for i in range(start, start + count)]
    return pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())})


def flushes(
    path: str, prefix: str, count: int, rows_per_flush: int, start: int
) -> Callable[[ObjectStore], None]:
    """``count`` memtable flushes of ``rows_per_flush`` new keys each into ``path`` (L0 grows)."""

    def change(store: ObjectStore) -> None:
        with Db.open(path, store, DbOptions(l0_max_ssts=max(16, count + 8))) as db:
            for i in range(count):
                db.put_arrow(_rows(prefix, start + i * rows_per_flush, rows_per_flush))
                db.flush_memtable()

    return change


STEPS: tuple[Step, ...] = (
    Step("first look at the fleet"),
    Step(
        "orders: 10 memtable flushes (L0 over its threshold)",
        flushes("orders", "order-", 10, 400, 100_000),
    ),
    Step("after the compaction fleet_sensor requested"),
    Step(
        "the GC schedule's pass over orders and customers",
        runs=(("gc_job", "orders"), ("gc_job", "customers")),
    ),
    Step("customers: 2 memtable flushes", flushes("customers", "customer-", 2, 300, 50_000)),
    Step("orders: 4 memtable flushes", flushes("orders", "order-", 4, 400, 200_000)),
)


@dataclass(frozen=True)
class TickReport:
    title: str
    events: int
    fleet_materialized: bool
    runs: list[str]
    skip_reason: str | None
    refused: int = 0
    """Check evaluations the instance would not store (REFUSED)."""


def run_job(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    job_name: str,
    partition: str,
    tags: Mapping[str, str] | None = None,
    run_config: Mapping[str, Any] | None = None,
) -> str:
    """Run ``job_name`` for one partition (or none: fleet_report_job) in this process, recorded
    in ``instance`` like a launched run; returns "job [partition]: STATUS"."""
    job = defs.resolve_job_def(job_name)
    if not partition:
        done = job.execute_in_process(
            instance=instance,
            tags=dict(tags or {}),
            run_config=dict(run_config or {}),
            raise_on_error=False,
        )
        return f"{job_name}: {'SUCCESS' if done.success else 'FAILURE'}"
    # The partition as the run tag a launched run carries: execute_in_process(partition_key=...)
    # refuses a job of checks only (health_check_job: "no PartitionsDefinition shared by all the
    # provided assets"), though its runs take the partition from this tag.
    result = job.execute_in_process(
        instance=instance,
        tags={**(tags or {}), "dagster/partition": partition},
        raise_on_error=False,
    )
    status = "SUCCESS" if result.success else "FAILURE"
    return f"{job_name} [{partition}]: {status}"


def tick(
    instance: dg.DagsterInstance,
    defs: dg.Definitions,
    store: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    cursor: str | None,
    title: str,
) -> tuple[str | None, TickReport]:
    """One tick of fleet_sensor as the daemon runs it; returns the next cursor and what happened."""
    context = dg.build_sensor_context(instance=instance, cursor=cursor, sensor_name="fleet_sensor")
    result = evaluate_fleet(context, store, managed)
    if isinstance(result, dg.SkipReason):
        return cursor, TickReport(title, 0, False, [], result.skip_message)
    events = list(result.asset_events or [])
    refused = 0
    for event in events:
        try:
            instance.report_runless_asset_event(event)
        except Exception:  # see REFUSED below; anything else is re-raised
            if not isinstance(event, dg.AssetCheckEvaluation) or event.partition is None:
                raise
            refused += 1
    runs = [
        run_job(
            defs,
            instance,
            r.job_name or "",
            r.partition_key or "",
            {**r.tags, "dagster/sensor_name": "fleet_sensor"},
            r.run_config,
        )
        for r in result.run_requests or []
    ]
    fleet = any(isinstance(e, dg.AssetMaterialization) for e in events)
    skip = result.skip_reason.skip_message if result.skip_reason else None
    return result.cursor, TickReport(title, len(events), fleet, runs, skip, refused)


def drive_history(
    instance: dg.DagsterInstance,
    defs: dg.Definitions,
    store: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    steps: tuple[Step, ...] = STEPS,
    pause_s: float = 1.0,
) -> list[TickReport]:
    """Every step's change and runs, then one tick; the cursor passes from tick to tick.
    ``pause_s`` between ticks keeps the plots' points apart on their time axis."""
    if not instance.get_dynamic_partitions(DATABASES):
        return []
    reports: list[TickReport] = []
    cursor: str | None = None
    opened = store.open()
    for i, step in enumerate(steps):
        if i and pause_s:
            time.sleep(pause_s)
        if step.change is not None:
            step.change(opened)
        done = [run_job(defs, instance, job, part) for job, part in step.runs]
        cursor, report = tick(instance, defs, store, managed, cursor, step.title)
        reports.append(
            TickReport(
                report.title,
                report.events,
                report.fleet_materialized,
                done + report.runs,
                report.skip_reason,
                report.refused,
            )
        )
    return reports
