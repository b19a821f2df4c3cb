"""Asset checks: invariants of a healthy database, one result per database partition.

Two ways they are evaluated:

* every tick, by ``fleet_sensor``, from the metadata it scanned (cheap: the manifest, boundary
  files, and in rotation a HEAD of each SST); results are reported on the database's partition when
  they change, with the severities below and a description naming the database;
* on demand for one database: ``health_check_job`` (Jobs > health_check_job > pick the partition)
  runs the same checks deeply, reading every SST whole (checksums), with the latest manifest's ids
  behind the boundaries. "Execute" on a check in an asset's page runs it the same way.

Severities: L0, WAL backlog and manifest lag WARN (maintenance is behind); a manifest that does not
decode, a missing or corrupt SST and a GC boundary ahead of what it may cover ERROR (data at risk).
Read-only.
"""

import time
import warnings
from collections.abc import Callable
from typing import Any

import dagster as dg

from orchestration.assets import checkpoint_refresh, compaction, garbage_collection
from orchestration.checkpoint_policy import (
    judged_manifest_lag,
    lingering_checkpoints,
    scheduled_lifetimes,
)
from orchestration.fleet_state import BOUNDARIES, INTACT, L0, LAG, WAL
from orchestration.jobs import PER_DATABASE
from orchestration.markdown import markdown_literal
from orchestration.missing import missing_description
from orchestration.partitions import databases_partitions
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from slatedb_core import FleetScanner
from slatedb_core.durations import parse_duration
from slatedb_core.errors import CorruptionError, DatabaseNotFound
from slatedb_core.health import (
    DatabaseHealth,
    check_boundaries,
    damaged_ssts,
    inspect_database,
    latest_ids,
    read_boundaries,
)

# Partitioned asset checks (one result per database) are "preview" in Dagster 1.13; they are what
# makes a check's history per database readable, so we use them and silence only that warning.
warnings.filterwarnings(
    "ignore", message="Specifying a partitions_def on an AssetCheckSpec", category=dg.PreviewWarning
)


def _result(*, description: str, **kwargs: Any) -> dg.AssetCheckResult:
    """Every check's result: its description names the database (a path anyone who can write
    the bucket chooses) and quotes errors, and the UI renders it as Markdown, so it goes through
    :func:`markdown_literal` (SECURITY.md)."""
    return dg.AssetCheckResult(description=markdown_literal(description), **kwargs)


def _database(context: dg.AssetCheckExecutionContext) -> str:
    """The partition (database) being checked; a run without one fails with what to do."""
    if not context.has_partition_key:
        raise dg.Failure(
            description=(
                "These checks are per database: launch them for one database partition "
                "(Jobs > health_check_job > Launchpad: pick the database in the partition "
                "picker; or Execute on a check with a partition selected)."
            )
        )
    return str(context.partition_key)


def _gone(
    store: ObjectStoreResource,
    db: str,
    severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.WARN,
) -> dg.AssetCheckResult:
    """No manifest: a database destroyed and collected (only its tombstone is left,
    docs/clones-and-destroy.md) passes; any other path has no database behind it, which no check
    may call healthy (a database deleted outside destroy, or a partition with a typo)."""
    if FleetScanner(store.open(), concurrency=1).scan([db])[db].state == "destroyed":
        return _result(
            passed=True,
            description=f"{db}: destroyed (only its tombstone is left): nothing to check",
            metadata={"database": db, "skipped": "database destroyed"},
        )
    return _result(
        passed=False,
        severity=severity,
        description=f"no database at this path: {missing_description(db, store.url)} "
        "(or it was never created)",
        metadata={"database": db},
    )


@dg.asset_check(
    asset=garbage_collection,
    name=INTACT,
    partitions_def=databases_partitions,
    description=(
        "ERROR: the latest manifest decodes and every SST it references exists (the sensor, "
        "with HEADs in rotation) and reads back with valid checksums (on demand)."
    ),
)
def manifest_and_ssts_intact(
    context: dg.AssetCheckExecutionContext, store: ObjectStoreResource
) -> dg.AssetCheckResult:
    db = _database(context)
    s = store.open()
    try:
        stored, health = inspect_database(s, db)
    except DatabaseNotFound:
        return _gone(store, db, dg.AssetCheckSeverity.ERROR)
    except CorruptionError as e:
        return _result(
            passed=False,
            severity=dg.AssetCheckSeverity.ERROR,
            description=f"{db}: latest manifest does not decode: {e}",
            metadata={"database": db, "error": f"{type(e).__name__}: {e}"},
        )
    damaged = damaged_ssts(s, db, stored.manifest)
    metadata: dict[str, Any] = {
        "database": db,
        "manifest_id": dg.MetadataValue.int(stored.id),
        "ssts": dg.MetadataValue.int(health.ssts),
        "damaged": dg.MetadataValue.int(len(damaged)),
    }
    if damaged:
        metadata["damaged_ssts"] = dg.MetadataValue.text(
            "\n".join(f"{p}: {why}" for p, why in damaged[:50])
        )
    described = (
        f"{db}: {len(damaged)} of {health.ssts} SSTs missing or corrupt: "
        + ", ".join(f"{p} ({why[:80]})" for p, why in damaged[:3])
        if damaged
        else f"{db}: manifest #{stored.id} decodes; its {health.ssts} SSTs read back intact"
    )
    return _result(
        passed=not damaged,
        severity=dg.AssetCheckSeverity.ERROR,
        description=described,
        metadata=metadata,
    )


def _figure_check(
    context: dg.AssetCheckExecutionContext,
    store: ObjectStoreResource,
    what: str,
    figure: Callable[[DatabaseHealth], int],
    limit: int,
) -> dg.AssetCheckResult:
    db = _database(context)
    try:
        _, health = inspect_database(store.open(), db)
    except DatabaseNotFound:
        return _gone(store, db)
    except CorruptionError as e:
        return _result(
            passed=False,
            severity=dg.AssetCheckSeverity.ERROR,
            description=f"{db}: latest manifest does not decode: {e}",
            metadata={"database": db},
        )
    value = figure(health)
    ok = value <= limit
    return _result(
        passed=ok,
        severity=dg.AssetCheckSeverity.WARN,
        description=f"{db}: {value} {what} (threshold {limit})" + ("" if ok else ": over"),
        metadata={
            "database": db,
            "value": dg.MetadataValue.int(value),
            "threshold": dg.MetadataValue.int(limit),
        },
    )


@dg.asset_check(
    asset=compaction,
    name=L0,
    partitions_def=databases_partitions,
    description="WARN: L0 holds at most l0_max_ssts SSTs (more: compaction is not keeping up).",
)
def l0_under_threshold(
    context: dg.AssetCheckExecutionContext,
    store: ObjectStoreResource,
    managed: ManagedDatabasesResource,
) -> dg.AssetCheckResult:
    return _figure_check(context, store, "L0 SSTs", lambda h: h.l0_ssts, managed.l0_max_ssts)


@dg.asset_check(
    asset=compaction,
    name=WAL,
    partitions_def=databases_partitions,
    description=(
        "WARN: at most wal_backlog_max WAL SSTs wait for a recovering writer to replay them "
        "(more: the writer's memtable flushes are not landing in L0)."
    ),
)
def wal_backlog_under_threshold(
    context: dg.AssetCheckExecutionContext,
    store: ObjectStoreResource,
    managed: ManagedDatabasesResource,
) -> dg.AssetCheckResult:
    return _figure_check(
        context, store, "WAL SSTs to replay", lambda h: h.wal_backlog, managed.wal_backlog_max
    )


@dg.asset_check(
    asset=checkpoint_refresh,
    name=LAG,
    partitions_def=databases_partitions,
    description=(
        "WARN: the oldest manifest a checkpoint pins is at most manifest_lag_max versions behind "
        "the latest (more: a checkpoint keeps old SSTs from the GC; refresh or delete it)."
    ),
)
def manifest_lag_under_threshold(
    context: dg.AssetCheckExecutionContext,
    store: ObjectStoreResource,
    managed: ManagedDatabasesResource,
) -> dg.AssetCheckResult:
    db = _database(context)
    now = time.time()
    try:
        stored, _ = inspect_database(store.open(), db, now=lambda: now)
    except (DatabaseNotFound, CorruptionError):
        return _figure_check(  # the same results as the other figure checks
            context, store, "manifest versions of lag", lambda h: h.manifest_lag, 0
        )
    scheduled = scheduled_lifetimes(managed.checkpoints)
    return _figure_check(
        context,
        store,
        "manifest versions of lag (beyond what the checkpoint policies keep)",
        lambda h: judged_manifest_lag(stored.manifest.checkpoints, h.manifest_id, now, scheduled)[
            0
        ],
        managed.manifest_lag_max,
    )


@dg.asset_check(
    asset=checkpoint_refresh,
    partitions_def=databases_partitions,
    description=(
        "No checkpoint is still listed longer than expired_checkpoint_grace after it expired "
        "(the GC removes expired checkpoints; one lingering means GC is not running)."
    ),
)
def no_expired_checkpoint_lingering(
    context: dg.AssetCheckExecutionContext,
    store: ObjectStoreResource,
    managed: ManagedDatabasesResource,
) -> dg.AssetCheckResult:
    db = _database(context)
    now = time.time()
    try:
        _, health = inspect_database(store.open(), db, now=lambda: now)
    except DatabaseNotFound:
        return _gone(store, db)
    grace = parse_duration(managed.expired_checkpoint_grace, allow_zero=True).total_seconds()
    lingering = lingering_checkpoints(health.expired_checkpoints, now, grace)
    return _result(
        passed=not lingering,
        severity=dg.AssetCheckSeverity.WARN,
        description=f"{db}: {len(lingering)} checkpoints still listed longer than "
        f"{managed.expired_checkpoint_grace} after they expired",
        metadata={
            "expired": dg.MetadataValue.int(len(health.expired_checkpoints)),
            "lingering": dg.MetadataValue.int(len(lingering)),
            "lingering_ids": dg.MetadataValue.text(
                ", ".join(f"{c.name or '-'}:{c.id}" for c in lingering)
            ),
        },
    )


@dg.asset_check(
    asset=garbage_collection,
    name=BOUNDARIES,
    partitions_def=databases_partitions,
    description=(
        "ERROR: every gc/*.boundary is at or behind the newest id of its namespace (the manifest and "
        "compactions boundaries strictly behind the latest object)."
    ),
)
def boundaries_behind_latest(
    context: dg.AssetCheckExecutionContext, store: ObjectStoreResource
) -> dg.AssetCheckResult:
    db = _database(context)
    s = store.open()
    try:
        stored, _ = inspect_database(s, db)
    except DatabaseNotFound:
        return _gone(store, db, dg.AssetCheckSeverity.ERROR)
    boundaries = read_boundaries(s, db)
    latest = latest_ids(s, db, stored, wal_url=store.wal_url)  # RFC 0009: its WAL store
    violations = check_boundaries(boundaries, latest)
    metadata: dict[str, Any] = {}
    for ns, value in boundaries.items():
        metadata[f"{ns}_boundary"] = (
            dg.MetadataValue.null() if value is None else dg.MetadataValue.int(value)
        )
        newest = latest.get(ns)
        metadata[f"{ns}_latest"] = (
            dg.MetadataValue.null() if newest is None else dg.MetadataValue.int(newest)
        )
    if violations:
        metadata["violations"] = dg.MetadataValue.text(
            "\n".join(f"{v.namespace}: {v.boundary} vs {v.latest}: {v.reason}" for v in violations)
        )
    return _result(
        passed=not violations,
        severity=dg.AssetCheckSeverity.ERROR,
        description=f"{db}: "
        + (
            "; ".join(f"gc/{v.namespace}.boundary {v.boundary}: {v.reason}" for v in violations)
            if violations
            else "every GC boundary is behind what it may cover"
        ),
        metadata=metadata,
    )


CHECKS = [
    manifest_and_ssts_intact,
    l0_under_threshold,
    wal_backlog_under_threshold,
    manifest_lag_under_threshold,
    no_expired_checkpoint_lingering,
    boundaries_behind_latest,
]

health_check_job = dg.define_asset_job(
    "health_check_job",
    selection=dg.AssetSelection.checks(*CHECKS),
    config=PER_DATABASE,  # partitions_def= is dropped for a job of checks only (jobs.py)
    executor_def=dg.in_process_executor,
    description=(
        "Every check of one database, deeply (each SST read whole): pick the database "
        "partition in the launchpad. fleet_sensor evaluates the cheap form every tick."
    ),
)
