"""The maintenance assets. Each materialization is one pass over one database (or one table) and
records what it did as metadata (orchestration.metadata: units in the names, a one-line
``summary``), which Dagster plots per partition over time.

A pass with nothing to work on (the database is destroyed, missing or not initialized) records
no materialization, so such a database never shows "Materialized": it records an
``AssetObservation`` saying why. Garbage collection of a destroyed database still runs (it deletes
the database once its grace period is over, docs/clones-and-destroy.md) and observes when.

The passes hand each other objects, not data, so no asset depends on another in the graph (a
dependency would mark every GC partition "Unsynced" after each compaction): compaction leaves
obsolete SSTs that ``garbage_collection`` deletes; ``checkpoint_refresh`` keeps alive the named
snapshot ``delta_export`` may read (``export_checkpoint_name``); ``rescaling`` works on tables,
whose shards are databases of their own. The descriptions say so.
"""

import datetime as dt
import time
from collections.abc import Iterator

import dagster as dg

from orchestration.alerts import surface_alerts
from orchestration.checkpoint_policy import plan_checkpoints
from orchestration.metadata import (
    DEFAULT_OWNERS,
    EXPORT,
    LAYOUT,
    MAINTENANCE,
    SUMMARY,
    age,
    boundaries,
    compaction_metadata,
    count,
    duration,
    gc_kinds_table,
    gc_summary,
    integer,
    live_database,
    millis,
    nbytes,
    not_live,
    size,
    skipped,
    tags,
    text,
    timestamp,
    unchanged,
    with_owners,
)
from orchestration.partitions import databases_partitions
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from orchestration.table_assets import EXPORT_CHECKPOINT_NAME, delta_export, rescaling
from slatedb_core import CheckpointOptions, admin, run_compaction_once, run_gc_once
from slatedb_core.errors import CheckpointNotFound, DatabaseDestroyed, DatabaseNotFound
from slatedb_core.health import DatabaseHealth, inspect_database, read_boundaries

__all__ = [
    "ASSETS",
    "EXPORT",
    "EXPORT_CHECKPOINT_NAME",
    "LAYOUT",
    "MAINTENANCE",
    "checkpoint_refresh",
    "compaction",
    "delta_export",
    "garbage_collection",
    "rescaling",
    "with_owners",
]

Pass = Iterator[dg.MaterializeResult | dg.AssetObservation]  # type: ignore[type-arg]
"""A pass yields one MaterializeResult when it worked on the database, else one observation."""


@dg.asset(
    partitions_def=databases_partitions,
    group_name=MAINTENANCE,
    kinds={"slatedb"},
    owners=list(DEFAULT_OWNERS),
    tags=tags("compaction"),
    output_required=False,
    description=(
        "One compaction pass: merges L0 SSTs and similar-sized sorted runs until the "
        "size-tiered scheduler has nothing left. Records L0 count, sorted runs and bytes "
        "before/after. Its replaced SSTs are deleted later by garbage_collection. A destroyed, "
        "missing or uninitialized database is skipped (an observation, no materialization)."
    ),
)
def compaction(
    context: dg.AssetExecutionContext,
    store: ObjectStoreResource,
    managed: ManagedDatabasesResource,
) -> Pass:
    db = context.partition_key
    s = store.open()
    options = store.compactor_options(managed.compactor_options())
    with surface_alerts(db):
        try:
            _, before = inspect_database(s, db)
        except DatabaseNotFound:
            yield skipped(context, "database not found")
            return
        why = not_live(before)
        if why is not None:
            yield skipped(context, why)
            return
        started = time.monotonic()
        stats = run_compaction_once(db, s, options)
        seconds = time.monotonic() - started
        _, after = inspect_database(s, db)
    metadata = compaction_metadata(before, after, stats, options.l0_trigger, seconds)
    if stats is None or (stats.compactions == 0 and stats.failed == 0):
        yield unchanged(context, metadata)  # nothing compacted: no new materialization
        return
    context.log.info(f"{db}: {metadata[SUMMARY].value}")
    yield dg.MaterializeResult(metadata=metadata)


def _destroyed(
    context: dg.AssetExecutionContext,
    health: DatabaseHealth | None,
    grace: dt.timedelta,
    deleted: bool,
    objects: int,
    freed: int,
) -> dg.AssetObservation:
    if health is None or health.destroyed_at_s is None:  # only the tombstone was left
        why = "database destroyed (only its tombstone is left)"
        return skipped(context, why, {"database_objects_deleted": integer(objects)})
    due = health.destroyed_at_s + grace.total_seconds()
    if deleted:
        why = f"database destroyed; deleted now ({objects} objects, {size(freed)})"
    else:
        when = dt.datetime.fromtimestamp(due, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        why = f"database destroyed; to be deleted after {when} (when no checkpoint is active)"
    return skipped(
        context,
        why,
        {
            "destroyed_at": timestamp(health.destroyed_at_s),
            "deletable_after": timestamp(due),
            "database_deleted": dg.MetadataValue.bool(deleted),
            "database_objects_deleted": integer(objects),
            **nbytes("database_freed_bytes", freed),
        },
    )


@dg.asset(
    partitions_def=databases_partitions,
    group_name=MAINTENANCE,
    kinds={"slatedb"},
    owners=list(DEFAULT_OWNERS),
    tags=tags("gc"),
    output_required=False,
    description=(
        "One garbage-collection pass: old manifests, WAL and compacted SSTs (those compaction "
        "replaced), compactions records (boundary first), expired checkpoints, and "
        "soft-destroyed databases past their grace. Records objects deleted per kind (a table), "
        "bytes freed and the durable boundaries. A destroyed database is observed (destroyed "
        "at, deletable after), not materialized."
    ),
)
def garbage_collection(
    context: dg.AssetExecutionContext,
    store: ObjectStoreResource,
    managed: ManagedDatabasesResource,
) -> Pass:
    db = context.partition_key
    s = store.open()
    options = managed.gc_options()
    with surface_alerts(db):
        try:
            _, health = inspect_database(s, db)
        except DatabaseNotFound:
            health = None  # maybe a tombstone: the pass sweeps what a stalled writer left
        stats = run_gc_once(db, s, options, wal_url=store.wal_url)
        if stats.destroyed:
            yield _destroyed(
                context,
                health,
                options.db_delete_grace,
                stats.database_deleted,
                stats.database_objects.deleted,
                stats.database_objects.bytes_freed,
            )
            return
        if stats.latest_manifest_id is None:
            yield skipped(context, "database not found")
            return
        if health is not None and not health.initialized:
            yield skipped(context, "database not initialized")
            return
        durable = read_boundaries(s, db)
    summary = gc_summary(stats)
    context.log.info(f"{db}: {summary}")
    metadata: dict[str, dg.MetadataValue] = {
        SUMMARY: text(summary),
        "deleted": integer(stats.deleted),
        **nbytes("freed_bytes", stats.bytes_freed),
        "failed_deletes": integer(stats.failed),
        "per_kind": gc_kinds_table(stats),
        **boundaries(durable),
        "expired_checkpoints_removed": integer(stats.expired_checkpoints_removed),
        "latest_manifest_id": integer(stats.latest_manifest_id),
        "requests": integer(stats.total_requests),
        "duration_ms": millis(stats.duration_s),
    }
    if stats.detached:
        metadata["detached"] = text(", ".join(stats.detached))
    if stats.data_gc_skipped:
        metadata["data_gc_skipped"] = text(stats.data_gc_skipped)
    # a failed delete is news (the garbage stays, the store refused): never a quiet no-op
    if not (stats.deleted or stats.failed or stats.expired_checkpoints_removed or stats.detached):
        yield unchanged(context, metadata)  # nothing deleted: no new materialization
        return
    yield dg.MaterializeResult(metadata=metadata)


@dg.asset(
    partitions_def=databases_partitions,
    group_name=MAINTENANCE,
    kinds={"slatedb"},
    owners=list(DEFAULT_OWNERS),
    tags=tags("checkpoints"),
    output_required=False,
    description=(
        "Named checkpoints by policy: keeps retention checkpoints alive (refresh before "
        "expiry, re-taken at the latest manifest once the one they pin lags more than "
        "manifest_lag_max), takes the scheduled ones (e.g. daily, with a lifetime) and deletes "
        "those past their retention or expired. Other checkpoints (readers', clones') are never "
        "touched. delta_export reads the newest of export_checkpoint_name when set."
    ),
)
def checkpoint_refresh(
    context: dg.AssetExecutionContext,
    store: ObjectStoreResource,
    managed: ManagedDatabasesResource,
) -> Pass:
    db = context.partition_key
    s = store.open()
    started = time.monotonic()
    created = refreshed = deleted = 0
    retaken: list[str] = []
    with surface_alerts(db):
        found = live_database(context, s, db)
        if isinstance(found, dg.AssetObservation):
            yield found
            return
        stored, _ = found
        plan = plan_checkpoints(
            list(stored.manifest.checkpoints),
            managed.checkpoints,
            time.time(),
            latest_manifest_id=stored.id,
            manifest_lag_max=managed.manifest_lag_max,
        )
        for old, policy in plan.retake:  # the new one first: the name never lacks a live one
            new = admin.create_checkpoint(
                db,
                s,
                CheckpointOptions(lifetime=policy.lifetime_td, name=policy.name),
                wal_url=store.wal_url,
            )
            created += 1
            note = (
                f"re-took {policy.name} at manifest {new.manifest_id} (it pinned "
                f"{old.manifest_id}, {stored.id - old.manifest_id} behind > manifest_lag_max "
                f"{managed.manifest_lag_max})"
            )
            retaken.append(note)
            context.log.info(f"{db}: {note}")
            plan.delete.append((old, "re-taken at the latest manifest"))
        for cp, reason in plan.delete:
            try:
                admin.delete_checkpoint(db, s, cp.id)
                deleted += 1
                context.log.info(f"{db}: deleted checkpoint {cp.name} {cp.id} ({reason})")
            except CheckpointNotFound:
                context.log.info(f"{db}: checkpoint {cp.id} already gone")
        for cp, policy in plan.refresh:
            try:
                admin.refresh_checkpoint(db, s, cp.id, policy.lifetime_td)
                refreshed += 1
            except CheckpointNotFound:  # expired meanwhile: the next pass creates a new one
                context.log.warning(f"{db}: checkpoint {cp.name} {cp.id} expired before refresh")
            except DatabaseDestroyed:
                # soft-destroyed since the inspection: its checkpoints may only run out now
                # (seed 003; docs/clones-and-destroy.md), so the pass ends like one that saw it
                yield skipped(context, "soft-destroyed during the pass; checkpoints left to expire")
                return
        for policy in plan.create:
            result = admin.create_checkpoint(
                db,
                s,
                CheckpointOptions(lifetime=policy.lifetime_td, name=policy.name),
                wal_url=store.wal_url,
            )
            created += 1
            context.log.info(f"{db}: created checkpoint {policy.name} {result.id}")
        after_stored, _ = inspect_database(s, db)
    now = time.time()
    after = after_stored.manifest.checkpoints
    named = {p.name for p in managed.checkpoints}
    managed_cps = [c for c in after if c.name in named and not c.is_expired(now)]
    oldest = min(managed_cps, key=lambda c: c.create_time_s, default=None)
    lag = max((after_stored.id - c.manifest_id for c in managed_cps), default=None)
    seconds = time.monotonic() - started
    parts = [
        f"{n} {w}"
        for n, w in ((created, "created"), (refreshed, "refreshed"), (deleted, "deleted"))
        if n
    ]
    parts = [*retaken, ", ".join(parts) or "nothing to do"]
    live = count(len(managed_cps), "managed checkpoint") + " live"
    if oldest is not None and lag is not None:
        live += (
            f", the oldest {age(now - oldest.create_time_s)} old, pinning up to "
            f"{count(lag, 'manifest')} behind"
        )
    summary = "; ".join([*parts, f"{live}, {duration(seconds)}"])
    metadata: dict[str, dg.MetadataValue] = {
        SUMMARY: text(summary),
        "created": integer(created),
        "refreshed": integer(refreshed),
        "retaken": integer(len(retaken)),
        "deleted": integer(deleted),
        "managed_checkpoints": integer(len(managed_cps)),
        "checkpoints": integer(len(after)),
        "oldest_managed_created": timestamp(
            None if oldest is None else oldest.create_time_s, "no managed checkpoint"
        ),
        "oldest_managed_age_s": integer(
            None if oldest is None else int(now - oldest.create_time_s),
            "no managed checkpoint",
        ),
        "managed_manifest_lag": integer(lag, "no managed checkpoint"),
        "latest_manifest_id": integer(after_stored.id),
        "duration_ms": millis(seconds),
    }
    if not (created or refreshed or deleted or retaken):
        yield unchanged(context, metadata)  # checkpoints up to date: no new materialization
        return
    yield dg.MaterializeResult(metadata=metadata)


ASSETS = [compaction, garbage_collection, checkpoint_refresh, delta_export, rescaling]
"""Every maintenance asset (the fleet view, ``slatedb_fleet``, is in orchestration.fleet_view)."""
