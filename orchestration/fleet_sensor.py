"""One tick of ``fleet_sensor``: scan every database partition, judge it, and report.

Per tick, for every database partition (one concurrent scan through ``slatedb_core.FleetScanner``,
which re-reads only what changed since the previous tick):

* **checks of the current state** as asset check evaluations on the database's partition, sent
  when a result changes (and once after a restart), each described with the database's name;
* **runs for live databases only**: compaction when L0 or the WAL backlog is over its threshold,
  keyed on the L0 SST ids and held back after a failure with an alert (see
  :mod:`orchestration.fleet_state`); checkpoint_refresh when a managed retention checkpoint pins a
  manifest lagging past ``manifest_lag_max``;
* **observations**: the figures on ``compaction`` when they change, the boundaries on
  ``garbage_collection`` when one advances;
* **the fleet view** (``slatedb_fleet``) when what it shows changed, at most every
  ``fleet_min_interval_s``, and at least every ``fleet_refresh_s`` so its plots and freshness hold;
* a **skip reason** when nothing was requested: the worst figures against their thresholds and
  the databases held back, so a grey tick still says why.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
import time
from collections.abc import Iterable
from typing import Any

import dagster as dg

from orchestration import fleet_memory
from orchestration.alerts import ALERT_TAG, DATABASE_TAG, alert_in
from orchestration.assets import checkpoint_refresh, compaction, garbage_collection
from orchestration.checkpoint_policy import scheduled_lifetimes
from orchestration.fleet_report import (
    CHECK_ASSET,
    REPORT_JOB,
    CheckResult,
    report_request,
    reported_checks,
    result_of,
)
from orchestration.fleet_state import (
    CHECK_ORDER,
    ERROR,
    L0_TAG,
    Cursor,
    Finding,
    Memory,
    Thresholds,
    checkpoint_decision,
    compaction_decision,
    findings,
    fold_run,
    hold,
    l0_tag,
    remember_boundaries,
    rereport_after,
    state_of,
    unjudged,
    vanished_with_the_store,
)
from orchestration.fleet_view import (
    FLEET_KEY,
    FleetRow,
    digest,
    fleet_metadata,
    fleet_row,
    headline,
    trend_databases,
)
from orchestration.missing import missing_description
from orchestration.partitions import DATABASES
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from slatedb_core import DatabaseStatus, FleetScanner, SlateDBError, Table
from slatedb_core.durations import parse_duration
from slatedb_core.errors import InvalidArgument, StoreError
from slatedb_core.health import BOUNDARY_NAMESPACES
from slatedb_core.store.objectstore import validate_relative_path
from slatedb_core.store.redact import redact_url

COMPACTION_JOB = "compaction_job"
CHECKPOINT_JOB = "checkpoint_job"
GC_JOB = "gc_job"
EXPORT_JOB = "export_job"
ASSET_JOB = "__ASSET_JOB"
"""What "Materialize" on an asset's page launches."""
_FOLDED = (
    (COMPACTION_JOB, "compaction"),
    (GC_JOB, "gc"),
    (CHECKPOINT_JOB, "checkpoint"),
    (EXPORT_JOB, "export"),
    (ASSET_JOB, ""),
)
"""Jobs whose finished runs are folded into the memories: compaction and GC as the last run of
their kind, every kind's alert as the database's latest alert."""
_FINISHED = [
    dg.DagsterRunStatus.SUCCESS,
    dg.DagsterRunStatus.FAILURE,
    dg.DagsterRunStatus.CANCELED,
]
_IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]
REREPORTED_TAG = "slatedb/rereported"
"""On a failed report run whose results a later tick reported again."""
_RUN_OVERLAP_S = 120.0
"""Runs updated this long before the last tick are read again (folding is idempotent), so a run
whose record was written while the previous tick read cannot be missed."""

_scanners: dict[tuple[str, int], FleetScanner] = {}
_scanners_lock = threading.Lock()
_scanning: dict[int, tuple[threading.Lock, list[float]]] = {}
"""Per scanner: held while a tick or schedule scans, and when that scan started."""
SCAN_WAIT_S = 5.0
"""How long a tick waits for another tick's or a schedule's scan before failing: Dagster gives
up on a tick after its timeout but cannot stop its thread, so a scan stuck on a store that does
not answer would otherwise hold every later tick (and a code-server worker each)."""


def scanner_for(store: ObjectStoreResource, concurrency: int) -> FleetScanner:
    """One scanner per store for the life of the code server, so ticks (and schedules) reuse what
    the previous tick read."""
    key = (store.url, concurrency)
    with _scanners_lock:
        scanner = _scanners.get(key)
        if scanner is None:
            scanner = _scanners[key] = FleetScanner(store.open(), concurrency=concurrency)
        return scanner


def retired_shards(
    store: ObjectStoreResource, managed: ManagedDatabasesResource, log: Any = None
) -> frozenset[str]:
    """Database paths the managed tables list as retired (kept until the GC deletes them)."""
    out: set[str] = set()
    for path in managed.tables:
        try:
            with Table.open(path, store.open()) as table:
                out.update(table.shard_map.retired)
        except SlateDBError as e:
            if log is not None:
                log.warning(f"table {path!r} not opened: {type(e).__name__}: {e}")
    return frozenset(out)


def scan_fleet(
    scanner: FleetScanner, dbs: list[str], verify: Iterable[str] = ()
) -> dict[str, DatabaseStatus]:
    """The status of every partition in ``dbs``. A partition that is not a database path (one
    added by hand in the UI) gets an ``invalid`` status naming the error instead of making the
    scan of every other database raise."""
    valid: list[str] = []
    out: dict[str, DatabaseStatus] = {}
    for db in dbs:
        try:
            validate_relative_path(db, what="database path")
        except InvalidArgument as e:
            out[db] = DatabaseStatus(
                path=db,
                state="invalid",
                health=None,
                checkpoints=(),
                pinned_by=None,
                l0_sst_ids=(),
                boundaries=dict.fromkeys(BOUNDARY_NAMESPACES),
                error_kind=type(e).__name__,
                error=str(e),
                missing_ssts=None,
                changed=False,
            )
        else:
            valid.append(db)
    with _scanners_lock:
        guard, since = _scanning.setdefault(id(scanner), (threading.Lock(), [0.0]))
    if not guard.acquire(timeout=SCAN_WAIT_S):
        raise StoreError(
            f"the previous scan of the store has been running for "
            f"{time.time() - since[0]:.0f} s and is still running: the store is slow or does "
            "not answer; this tick did not wait for it (nothing was scanned or judged)"
        )
    try:
        since[0] = time.time()
        out.update(scanner.scan(valid, verify=set(verify) - set(out)))
    finally:
        guard.release()
    return out


def limits_of(managed: ManagedDatabasesResource) -> Thresholds:
    return Thresholds(
        l0_max_ssts=managed.l0_max_ssts,
        wal_backlog_max=managed.wal_backlog_max,
        manifest_lag_max=managed.manifest_lag_max,
        retention_checkpoints=frozenset(p.name for p in managed.checkpoints if p.every is None),
        scheduled_checkpoints=tuple(scheduled_lifetimes(managed.checkpoints).items()),
        expired_checkpoint_grace_s=parse_duration(
            managed.expired_checkpoint_grace, allow_zero=True
        ).total_seconds(),
    )


def _verify_set(dbs: list[str], cursor: Cursor, per_tick: int) -> list[str]:
    """A rotating slice of the databases whose SSTs this tick checks for existence (HEADs are
    one request per SST, too many to repeat for every database every tick)."""
    if per_tick <= 0 or not dbs:
        return []
    start = cursor.verify_from % len(dbs)
    chosen = (dbs[start:] + dbs[:start])[:per_tick]
    cursor.verify_from = (start + len(chosen)) % len(dbs)
    return chosen


def _run_alert(instance: dg.DagsterInstance, record: dg.RunRecord) -> str | None:
    run = record.dagster_run
    tagged = run.tags.get(ALERT_TAG)
    if tagged or run.status != dg.DagsterRunStatus.FAILURE:
        return tagged
    for entry in instance.all_logs(
        run.run_id, of_type={dg.DagsterEventType.RUN_FAILURE, dg.DagsterEventType.STEP_FAILURE}
    ):
        data = entry.dagster_event.event_specific_data if entry.dagster_event else None
        kind = alert_in(getattr(data, "error", None))
        if kind is not None:
            return kind
    return None


def fold_runs(instance: dg.DagsterInstance, cursor: Cursor, now: float) -> None:
    """Fold the compaction and GC runs that finished since the last tick into the memories."""
    after = fold_maintenance_runs(instance, cursor, now)
    _rereport_failed_reports(instance, cursor, after)


def fold_maintenance_runs(
    instance: dg.DagsterInstance, cursor: Cursor, now: float
) -> dt.datetime | None:
    """Fold the maintenance runs that finished since ``cursor.runs_seen_until`` into the
    memories (reads only: a schedule folds the sensor's memory forward the same way, see
    :mod:`orchestration.holds`); returns the time runs were read from."""
    since = cursor.runs_seen_until
    after = None if since is None else dt.datetime.fromtimestamp(since - _RUN_OVERLAP_S, dt.UTC)
    for job, kind in _FOLDED:
        records = instance.get_run_records(
            filters=dg.RunsFilter(job_name=job, statuses=_FINISHED, updated_after=after),
            limit=None if after is not None else 10_000,
        )
        for record in records:
            run = record.dagster_run
            db = run.tags.get(DATABASE_TAG) or run.tags.get("dagster/partition")
            if db is None:
                continue
            end = record.end_time or record.update_timestamp.timestamp()
            memory = cursor.dbs.setdefault(db, Memory())
            alert = _run_alert(instance, record)
            l0 = run.tags.get(L0_TAG)
            fold_run(
                memory,
                kind or _kind_of(run),
                run.status.value,
                end,
                alert,
                l0.split(",") if l0 else None,
            )
            if run.status == dg.DagsterRunStatus.SUCCESS:
                for asset in _assets_of(job, run):
                    checks = CHECKS_OF.get(asset)
                    if checks:
                        rereport_after(memory, asset.to_user_string(), checks, end)
    cursor.runs_seen_until = now
    return after


def _rereport_failed_reports(
    instance: dg.DagsterInstance, cursor: Cursor, after: dt.datetime | None
) -> None:
    # A report run that failed or was canceled recorded nothing: its results are reported again,
    # once (the run is tagged so a later tick skips it).
    for record in instance.get_run_records(
        filters=dg.RunsFilter(job_name=REPORT_JOB, statuses=_FINISHED[1:], updated_after=after)
    ):
        if record.dagster_run.tags.get(REREPORTED_TAG):
            continue
        instance.add_run_tags(record.dagster_run.run_id, {REREPORTED_TAG: "true"})
        for db, check in reported_checks(record.dagster_run.run_config):
            if db in cursor.dbs and check in CHECK_ORDER:
                bits, i = (
                    cursor.dbs[db].checks.ljust(len(CHECK_ORDER), "-"),
                    CHECK_ORDER.index(check),
                )
                cursor.dbs[db].checks = bits[:i] + "-" + bits[i + 1 :]


CHECKS_OF: dict[dg.AssetKey, tuple[str, ...]] = {
    key: tuple(c for c in CHECK_ORDER if CHECK_ASSET[c] == key) for key in CHECK_ASSET.values()
}
"""The checks the sensor reports on each asset."""
_JOB_ASSET = {
    COMPACTION_JOB: compaction.key,
    GC_JOB: garbage_collection.key,
    CHECKPOINT_JOB: checkpoint_refresh.key,
}


def _assets_of(job: str, run: dg.DagsterRun) -> list[dg.AssetKey]:
    """The assets a run of ``job`` materializes (from an asset's page: its selection)."""
    if job in _JOB_ASSET:
        return [_JOB_ASSET[job]]
    return sorted(run.asset_selection or ())


def _kind_of(run: dg.DagsterRun) -> str:
    """compaction or gc for a run of that asset alone (from an asset's page), else "asset"."""
    selected = run.asset_selection or frozenset()
    for key, kind in ((compaction.key, "compaction"), (garbage_collection.key, "gc")):
        if selected == {key}:
            return kind
    return "asset"


def runs_in_flight(instance: dg.DagsterInstance, job_name: str) -> dict[str, str]:
    """Database -> status of a run of ``job_name`` queued or running for it (one query)."""
    out: dict[str, str] = {}
    for record in instance.get_run_records(
        filters=dg.RunsFilter(job_name=job_name, statuses=_IN_FLIGHT)
    ):
        run = record.dagster_run
        db = run.tags.get(DATABASE_TAG) or run.tags.get("dagster/partition")
        if db is not None:
            out[db] = f"run {run.run_id[:8]} {run.status.value.lower()}"
    return out


def compactions_in_flight(instance: dg.DagsterInstance) -> dict[str, str]:
    """Database -> status of a compaction run queued or running for it. While one is, no other
    is requested: the L0 a writer keeps adding to would otherwise make a new run key every tick
    (a queue of runs behind the per-database limit, or one compactor fencing the other)."""
    out = runs_in_flight(instance, COMPACTION_JOB)
    for record in instance.get_run_records(
        filters=dg.RunsFilter(job_name=ASSET_JOB, statuses=_IN_FLIGHT)
    ):
        run = record.dagster_run
        db = run.tags.get(DATABASE_TAG) or run.tags.get("dagster/partition")
        if db is not None and _kind_of(run) == "compaction":
            out[db] = f"run {run.run_id[:8]} {run.status.value.lower()}"
    return out


def _bits(checks: Iterable[Finding], before: str) -> str:
    now = {f.check: ("p" if f.passed else "f") for f in checks}
    old = before.ljust(len(CHECK_ORDER), "-")
    return "".join(now.get(name, old[i]) for i, name in enumerate(CHECK_ORDER))


def _figures(status: DatabaseStatus) -> dict[str, dg.MetadataValue]:
    h = status.health
    assert h is not None
    return {
        "manifest_id": dg.MetadataValue.int(h.manifest_id),
        "l0_ssts": dg.MetadataValue.int(h.l0_ssts),
        "wal_backlog": dg.MetadataValue.int(h.wal_backlog),
        "manifest_lag": dg.MetadataValue.int(h.manifest_lag),
        "sst_bytes": dg.MetadataValue.int(h.sst_bytes),
    }


def _boundaries(status: DatabaseStatus, advanced: list[str]) -> dict[str, dg.MetadataValue]:
    md: dict[str, dg.MetadataValue] = {"advanced": dg.MetadataValue.text(", ".join(advanced))}
    for ns in BOUNDARY_NAMESPACES:
        v = status.boundaries.get(ns)
        if v is None:
            md[f"{ns}_boundary"] = dg.MetadataValue.text("not set yet (no GC pass advanced it)")
        elif ns == "compacted":  # a ULID time in milliseconds
            md[f"{ns}_boundary"] = dg.MetadataValue.timestamp(v / 1000)
        else:
            md[f"{ns}_boundary"] = dg.MetadataValue.int(v)
    return md


def _within_budget(
    context: dg.SensorEvaluationContext,
    cursor: Cursor,
    changes: list[tuple[str, Finding, str | None]],
    observations: list[dg.AssetObservation],
    managed: ManagedDatabasesResource,
    now: float,
) -> tuple[list[CheckResult], list[dg.AssetObservation]]:
    """The tick's check results (reported by one fleet_report_job run, see
    :mod:`orchestration.fleet_report`) and observations, at most ``max_events_per_tick`` of
    them: failing checks first, then passing ones, then observations. A check result left out
    keeps its old value in the cursor, so it is reported by a later tick (the first tick over a
    large fleet spreads its thousands of results over several ticks)."""
    budget = managed.max_events_per_tick
    changes.sort(key=lambda c: (c[1].passed, c[1].severity != ERROR, c[0]))
    out: list[CheckResult] = []
    for db, f, error_kind in changes[:budget]:
        out.append(result_of(db, f))
        memory = cursor.dbs[db]
        i = CHECK_ORDER.index(f.check)
        memory.checks = memory.checks[:i] + ("p" if f.passed else "f") + memory.checks[i + 1 :]
        if not f.passed and f.severity == ERROR:
            context.log.error(f"SLATEDB ALERT {f.check}: {f.description}")
            memory.alert = [error_kind or f.check, now, f.description.split(": ", 1)[-1]]
    room = max(0, budget - len(out))
    deferred = max(0, len(changes) - budget) + max(0, len(observations) - room)
    if deferred:
        context.log.info(
            f"{deferred} check results and observations over max_events_per_tick ({budget}): "
            "the check results follow in the next ticks"
        )
    return out, observations[:room]


def evaluate_fleet(
    context: dg.SensorEvaluationContext,
    store: ObjectStoreResource,
    managed: ManagedDatabasesResource,
) -> dg.SensorResult | dg.SkipReason:
    now = time.time()
    cursor, slot = fleet_memory.load(context.instance, context.cursor)
    known = frozenset(cursor.dbs)
    dbs = sorted(context.instance.get_dynamic_partitions(DATABASES))
    retired = retired_shards(store, managed, context.log)
    scanner = scanner_for(store, managed.fleet_scan_concurrency)
    # Besides the rotating slice, every database whose intact check stands failed is verified
    # again each tick: the scanner forgets a missing SST when the manifest changes or the code
    # server restarts, and the check must only pass once the SST is back.
    failed = [db for db in dbs if db in cursor.dbs and cursor.dbs[db].checks[:1] == "f"]
    verify = {*_verify_set(dbs, cursor, managed.verify_ssts_per_tick), *failed}
    statuses = scan_fleet(scanner, dbs, verify)
    fold_runs(context.instance, cursor, now)
    busy = compactions_in_flight(context.instance)
    limits = limits_of(managed)
    runs: list[dg.RunRequest] = []
    events: list[dg.AssetObservation | dg.AssetMaterialization | dg.AssetCheckEvaluation] = []
    held: list[str] = []
    judged: list[tuple[DatabaseStatus, Memory, list[Finding]]] = []
    changes: list[tuple[str, Finding, str | None]] = []
    observations: list[dg.AssetObservation] = []
    vanished = vanished_with_the_store(
        {db: state_of(statuses[db], retired) for db in dbs}, cursor.dbs
    )
    if vanished:
        store_problem = (
            f"the store lists none of the {len(vanished)} databases it held "
            f"({redact_url(store.url)}): a volume not mounted, or a bucket or prefix emptied? "
            "Each is shown unreachable, none is reported deleted; check the store"
        )
        context.log.error(f"SLATEDB ALERT store: {store_problem}")
        for db in vanished:
            statuses[db] = dataclasses.replace(
                statuses[db], state="unreachable", error_kind="StoreEmpty", error=store_problem
            )
    for db in dbs:
        status = statuses[db]
        memory = cursor.dbs.setdefault(db, Memory())
        state = state_of(status, retired)
        deleted = missing_description(db, store.url) if state == "missing" else ""
        checks = findings(status, state, memory, limits, deleted=deleted)
        every = checks + unjudged(status, state, memory, checks)
        before = memory.checks.ljust(len(CHECK_ORDER), "-")
        bits = _bits(every, memory.checks)
        memory.checks = before
        for f in every:
            i = CHECK_ORDER.index(f.check)
            if before[i] != bits[i]:
                changes.append((db, f, status.error_kind))
        advanced = remember_boundaries(status, memory, now, first=db not in known)
        if advanced and status.health is not None:
            observations.append(
                dg.AssetObservation(
                    asset_key=garbage_collection.key,
                    partition=db,
                    metadata=_boundaries(status, advanced),
                )
            )
        if state == "live" and status.changed and status.health is not None:
            observations.append(
                dg.AssetObservation(
                    asset_key=compaction.key, partition=db, metadata=_figures(status)
                )
            )
        if state == "live":
            for decision in (
                compaction_decision(status, memory, limits, now),
                checkpoint_decision(status, limits),
            ):
                if decision is None:
                    continue
                if decision.held is None and decision.kind == "compaction" and db in busy:
                    decision = dataclasses.replace(
                        decision,
                        held=f"{db}: compaction not requested: {busy[db]} is in progress",
                    )
                if decision.held is None:  # the hold the schedules share (compaction's is in
                    # compaction_decision already)
                    decision = dataclasses.replace(
                        decision, held=hold(decision.kind, status, memory, now)
                    )
                if decision.held is not None:
                    held.append(decision.held)
                    continue
                job = COMPACTION_JOB if decision.kind == "compaction" else CHECKPOINT_JOB
                runs.append(
                    dg.RunRequest(
                        run_key=decision.run_key,
                        job_name=job,
                        partition_key=db,
                        tags={
                            "slatedb/reason": "; ".join(decision.reasons),
                            DATABASE_TAG: db,
                            **(l0_tag(status.l0_sst_ids) if decision.kind == "compaction" else {}),
                        },
                    )
                )
                if decision.kind == "compaction":
                    memory.requested_l0 = list(status.l0_sst_ids)
                    memory.requested_at = now
        judged.append((status, memory, checks))
    results, kept = _within_budget(context, cursor, changes, observations, managed, now)
    events.extend(kept)
    if results:
        runs.append(report_request(results, context.cursor or ""))
    rows = [fleet_row(status, retired, memory, checks, now) for status, memory, checks in judged]
    cursor.dbs = {db: cursor.dbs[db] for db in dbs}
    for line in held:
        context.log.info(line)
    view = digest(rows)
    due = cursor.fleet_at is None or now - cursor.fleet_at >= managed.fleet_refresh_s
    changed = view != cursor.fleet_digest and (
        cursor.fleet_at is None or now - cursor.fleet_at >= managed.fleet_min_interval_s
    )
    if due or changed:
        md = fleet_metadata(
            rows,
            l0_max=managed.l0_max_ssts,
            wal_max=managed.wal_backlog_max,
            lag_max=managed.manifest_lag_max,
            table_rows=managed.fleet_table_rows,
            trend_dbs=trend_databases(rows, managed.trend_databases, managed.trend_max_databases),
        )
        events.append(
            dg.AssetMaterialization(asset_key=FLEET_KEY, description=headline(rows), metadata=md)
        )
        cursor.fleet_at, cursor.fleet_digest = now, view
    context.log.info(
        f"scanned {len(dbs)} databases in {time.time() - now:.2f} s "
        f"({scanner.last_scan_requests} requests); {len(runs)} runs requested"
    )
    why = skip_reason(rows, held, limits)
    if vanished:
        why = f"{store_problem}. {why}"
    if runs:
        # a tick with runs cannot carry a skip reason: the explanation goes to the tick's log
        context.log.info(why)
        return dg.SensorResult(
            run_requests=runs,
            asset_events=events,
            cursor=fleet_memory.save(context.instance, cursor, slot),
        )
    return dg.SensorResult(
        skip_reason=why,
        asset_events=events,
        cursor=fleet_memory.save(context.instance, cursor, slot),
    )


def skip_reason(rows: list[FleetRow], held: list[str], limits: Thresholds) -> str:
    """Why nothing was requested: the highest figures against their thresholds, and the
    databases held back."""
    live = [r for r in rows if r.state == "live"]
    if not rows:
        return "no database partitions yet (database_discovery_sensor adds them)"
    over = "some over their thresholds but held back" if held else "none over its thresholds"
    parts = [f"{len(live)} live of {len(rows)} databases, {over}"]
    for name, attr, limit in (
        ("L0", "l0_ssts", limits.l0_max_ssts),
        ("WAL backlog", "wal_backlog", limits.wal_backlog_max),
        ("manifest lag", "manifest_lag", limits.manifest_lag_max),
    ):
        top = max(live, key=lambda r: getattr(r, attr) or 0, default=None)
        if top is not None:
            parts.append(f"highest {name} {getattr(top, attr)}/{limit} ({top.database})")
    text = "; ".join(parts)
    if held:
        text += f". Held back ({len(held)}): " + " | ".join(held[:5])
    bad = [r for r in rows if r.severity == 2]
    if bad:
        text += f". Errors ({len(bad)}): " + ", ".join(f"{r.database} ({r.state})" for r in bad[:5])
    return text
