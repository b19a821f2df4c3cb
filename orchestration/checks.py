"""Asset checks: invariants of a healthy database, evaluated per database partition after the
maintenance asset they belong to (or on their own from the UI). Read-only."""


import time
import warnings
from typing import Any

import dagster as dg

from orchestration.assets import checkpoint_refresh, compaction, garbage_collection
from orchestration.partitions import databases_partitions
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from slatedb_core import CorruptionError, DatabaseNotFound
from slatedb_core.durations import parse_duration
from slatedb_core.health import (
    check_boundaries,
    inspect_database,
    latest_ids,
    missing_ssts,
    read_boundaries,
)

# Partitioned asset checks (one result per database) are "preview" in Dagster 1.13; they are what
# makes a check's history per database readable, so we use them and silence only that warning.
warnings.filterwarnings(
    "ignore", message="Specifying a partitions_def on an AssetCheckSpec", category=dg.PreviewWarning
)


def _gone(db: str) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        passed=True, metadata={"database": db, "skipped": "database not found"}
    )


@dg.asset_check(
    asset=garbage_collection,
    partitions_def=databases_partitions,
    description="The latest manifest decodes and every SST it references exists in the store.",
)
def manifest_and_ssts_intact(
    context: dg.AssetCheckExecutionContext, store: ObjectStoreResource
) -> dg.AssetCheckResult:
    db = context.partition_key
    s = store.open()
    try:
        stored, health = inspect_database(s, db)
    except DatabaseNotFound:
        return _gone(db)
    except CorruptionError as e:
        return dg.AssetCheckResult(
            passed=False, metadata={"database": db, "error": f"{type(e).__name__}: {e}"}
        )
    missing = missing_ssts(s, db, stored.manifest)
    metadata: dict[str, Any] = {
        "manifest_id": dg.MetadataValue.int(stored.id),
        "ssts": dg.MetadataValue.int(health.ssts),
        "missing": dg.MetadataValue.int(len(missing)),
    }
    if missing:
        metadata["missing_paths"] = dg.MetadataValue.text("\n".join(missing[:50]))
    return dg.AssetCheckResult(passed=not missing, metadata=metadata)


@dg.asset_check(
    asset=compaction,
    partitions_def=databases_partitions,
    description="L0 holds at most l0_max_ssts SSTs (more: compaction is not keeping up).",
)
def l0_under_threshold(
    context: dg.AssetCheckExecutionContext,
    store: ObjectStoreResource,
    managed: ManagedDatabasesResource,
) -> dg.AssetCheckResult:
    db = context.partition_key
    try:
        _, health = inspect_database(store.open(), db)
    except DatabaseNotFound:
        return _gone(db)
    return dg.AssetCheckResult(
        passed=health.l0_ssts <= managed.l0_max_ssts,
        metadata={
            "l0_ssts": dg.MetadataValue.int(health.l0_ssts),
            "threshold": dg.MetadataValue.int(managed.l0_max_ssts),
        },
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
    db = context.partition_key
    now = time.time()
    try:
        _, health = inspect_database(store.open(), db, now=lambda: now)
    except DatabaseNotFound:
        return _gone(db)
    grace = parse_duration(managed.expired_checkpoint_grace, allow_zero=True).total_seconds()
    lingering = [
        c
        for c in health.expired_checkpoints
        if c.expire_time_s is not None and now - c.expire_time_s > grace
    ]
    return dg.AssetCheckResult(
        passed=not lingering,
        severity=dg.AssetCheckSeverity.WARN,
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
    partitions_def=databases_partitions,
    description=(
        "Every gc/*.boundary is at or behind the newest id of its namespace (the manifest and "
        "compactions boundaries strictly behind the latest object)."
    ),
)
def boundaries_behind_latest(
    context: dg.AssetCheckExecutionContext, store: ObjectStoreResource
) -> dg.AssetCheckResult:
    db = context.partition_key
    s = store.open()
    try:
        stored, _ = inspect_database(s, db)
    except DatabaseNotFound:
        return _gone(db)
    boundaries = read_boundaries(s, db)
    latest = latest_ids(s, db, stored)
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
    return dg.AssetCheckResult(passed=not violations, metadata=metadata)


CHECKS = [
    manifest_and_ssts_intact,
    l0_under_threshold,
    no_expired_checkpoint_lingering,
    boundaries_behind_latest,
]
