"""The maintenance assets. Each materialization is one pass over one database (or one table) and
records what it did as numeric metadata, which Dagster plots per partition over time.

Lineage in the graph follows the data the passes hand each other: compaction leaves obsolete SSTs
that ``garbage_collection`` deletes; ``checkpoint_refresh`` keeps the named snapshot alive that
``delta_export`` reads; ``rescaling`` works on tables, whose shards are databases of their own.
"""


import time
from typing import Any

import dagster as dg

from orchestration.alerts import surface_alerts
from orchestration.checkpoint_policy import plan_checkpoints
from orchestration.delta import export_to_delta, export_uri
from orchestration.partitions import databases_partitions, tables_partitions
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from slatedb_core import (
    CheckpointNotFound,
    CheckpointOptions,
    DatabaseNotFound,
    Table,
    admin,
    run_compaction_once,
    run_gc_once,
)
from slatedb_core.durations import parse_duration
from slatedb_core.gc import KINDS
from slatedb_core.health import DatabaseHealth, inspect_database, split_key

MAINTENANCE = "slatedb_maintenance"
LAYOUT = "slatedb_layout"
EXPORT = "slatedb_export"

EXPORT_CHECKPOINT_NAME = "delta-export"
"""Name of the temporary checkpoint ``delta_export`` takes when no named snapshot is configured."""


def _int(value: int | None) -> dg.MetadataValue:
    return dg.MetadataValue.null() if value is None else dg.MetadataValue.int(int(value))


def _float(value: float) -> dg.MetadataValue:
    return dg.MetadataValue.float(round(float(value), 6))


def _shape(prefix: str, h: DatabaseHealth) -> dict[str, Any]:
    return {
        f"{prefix}l0_ssts": _int(h.l0_ssts),
        f"{prefix}sorted_runs": _int(h.sorted_runs),
        f"{prefix}sst_bytes": _int(h.sst_bytes),
        f"{prefix}ssts": _int(h.ssts),
    }


def _skipped(context: dg.AssetExecutionContext, why: str) -> dg.MaterializeResult:  # type: ignore[type-arg]
    context.log.warning(f"{context.partition_key}: skipped, {why}")
    return dg.MaterializeResult(metadata={"skipped": why})


@dg.asset(
    partitions_def=databases_partitions,
    group_name=MAINTENANCE,
    kinds={"slatedb"},
    description=(
        "One compaction pass: merges L0 SSTs and similar-sized sorted runs until the "
        "size-tiered scheduler has nothing left. Records L0 count, sorted runs and bytes "
        "before/after."
    ),
)
def compaction(
    context: dg.AssetExecutionContext,
    store: ObjectStoreResource,
    managed: ManagedDatabasesResource,
) -> dg.MaterializeResult:  # type: ignore[type-arg]
    db = context.partition_key
    s = store.open()
    with surface_alerts(db):
        try:
            _, before = inspect_database(s, db)
        except DatabaseNotFound:
            return _skipped(context, "database not found")
        if before.destroyed or not before.initialized:
            return _skipped(context, "database destroyed or not initialized")
        started = time.monotonic()
        stats = run_compaction_once(db, s, managed.compactor_options())
        duration = time.monotonic() - started
        stored, after = inspect_database(s, db)
    context.log.info(
        f"{db}: {stats.compactions if stats else 0} compactions; L0 {before.l0_ssts} -> "
        f"{after.l0_ssts}, runs {before.sorted_runs} -> {after.sorted_runs}"
    )
    return dg.MaterializeResult(
        metadata={
            **_shape("before_", before),
            **_shape("", after),
            "compactions": _int(stats.compactions if stats else 0),
            "failed_compactions": _int(stats.failed if stats else 0),
            "bytes_in": _int(stats.bytes_in if stats else 0),
            "bytes_out": _int(stats.bytes_out if stats else 0),
            "rows_in": _int(stats.rows_in if stats else 0),
            "rows_out": _int(stats.rows_out if stats else 0),
            "manifest_id": _int(stored.id),
            "compactor_epoch": _int(after.compactor_epoch),
            "duration_s": _float(duration),
        }
    )


@dg.asset(
    partitions_def=databases_partitions,
    group_name=MAINTENANCE,
    kinds={"slatedb"},
    deps=[compaction],
    description=(
        "One garbage-collection pass: old manifests, WAL and compacted SSTs, compactions "
        "records (boundary first), expired checkpoints, and soft-destroyed databases past "
        "their grace. Records objects deleted per kind, bytes freed and the boundaries."
    ),
)
def garbage_collection(
    context: dg.AssetExecutionContext,
    store: ObjectStoreResource,
    managed: ManagedDatabasesResource,
) -> dg.MaterializeResult:  # type: ignore[type-arg]
    db = context.partition_key
    with surface_alerts(db):
        stats = run_gc_once(db, store.open(), managed.gc_options())
    if stats.latest_manifest_id is None:
        return _skipped(context, "database not found (already deleted)")
    context.log.info(stats.summary())
    metadata: dict[str, Any] = {
        "deleted": _int(stats.deleted),
        "bytes_freed": _int(stats.bytes_freed),
        "failed_deletes": _int(stats.failed),
    }
    for kind in KINDS:
        k = stats.kind(kind)
        metadata[f"{kind}_deleted"] = _int(k.deleted)
        metadata[f"{kind}_bytes_freed"] = _int(k.bytes_freed)
    metadata.update(
        {
            "manifest_boundary": _int(stats.manifest_boundary),
            "wal_boundary": _int(stats.wal_boundary),
            "compactions_boundary": _int(stats.compactions_boundary),
            "expired_checkpoints_removed": _int(stats.expired_checkpoints_removed),
            "destroyed": dg.MetadataValue.bool(stats.destroyed),
            "database_deleted": dg.MetadataValue.bool(stats.database_deleted),
            "database_objects_deleted": _int(stats.database_objects.deleted),
            "database_bytes_freed": _int(stats.database_objects.bytes_freed),
            "detached": dg.MetadataValue.text(", ".join(stats.detached)),
            "latest_manifest_id": _int(stats.latest_manifest_id),
            "requests": _int(stats.total_requests),
            "duration_s": _float(stats.duration_s),
        }
    )
    if stats.data_gc_skipped:
        metadata["data_gc_skipped"] = dg.MetadataValue.text(stats.data_gc_skipped)
    return dg.MaterializeResult(metadata=metadata)


@dg.asset(
    partitions_def=databases_partitions,
    group_name=MAINTENANCE,
    kinds={"slatedb"},
    description=(
        "Named checkpoints by policy: keeps retention checkpoints alive (refresh before "
        "expiry), takes the scheduled ones (e.g. daily, with a lifetime) and deletes those past "
        "their retention or expired. Other checkpoints (readers', clones') are never touched."
    ),
)
def checkpoint_refresh(
    context: dg.AssetExecutionContext,
    store: ObjectStoreResource,
    managed: ManagedDatabasesResource,
) -> dg.MaterializeResult:  # type: ignore[type-arg]
    db = context.partition_key
    s = store.open()
    started = time.monotonic()
    created = refreshed = deleted = 0
    with surface_alerts(db):
        try:
            stored, health = inspect_database(s, db)
        except DatabaseNotFound:
            return _skipped(context, "database not found")
        if health.destroyed or not health.initialized:
            return _skipped(context, "database destroyed or not initialized")
        plan = plan_checkpoints(list(stored.manifest.checkpoints), managed.checkpoints, time.time())
        for cp, why in plan.delete:
            try:
                admin.delete_checkpoint(db, s, cp.id)
                deleted += 1
                context.log.info(f"{db}: deleted checkpoint {cp.name} {cp.id} ({why})")
            except CheckpointNotFound:
                context.log.info(f"{db}: checkpoint {cp.id} already gone")
        for cp, policy in plan.refresh:
            try:
                admin.refresh_checkpoint(db, s, cp.id, policy.lifetime_td)
                refreshed += 1
            except CheckpointNotFound:  # expired meanwhile: the next pass creates a new one
                context.log.warning(f"{db}: checkpoint {cp.name} {cp.id} expired before refresh")
        for policy in plan.create:
            result = admin.create_checkpoint(
                db, s, CheckpointOptions(lifetime=policy.lifetime_td, name=policy.name)
            )
            created += 1
            context.log.info(f"{db}: created checkpoint {policy.name} {result.id}")
        after = admin.list_checkpoints(db, s)
    now = time.time()
    named = {p.name for p in managed.checkpoints}
    managed_cps = [c for c in after if c.name in named and not c.is_expired(now)]
    oldest = min((c.create_time_s for c in managed_cps), default=None)
    return dg.MaterializeResult(
        metadata={
            "created": _int(created),
            "refreshed": _int(refreshed),
            "deleted": _int(deleted),
            "managed_checkpoints": _int(len(managed_cps)),
            "checkpoints": _int(len(after)),
            "oldest_managed_age_s": _int(None if oldest is None else int(now - oldest)),
            "duration_s": _float(time.monotonic() - started),
        }
    )


@dg.asset(
    partitions_def=databases_partitions,
    group_name=EXPORT,
    kinds={"slatedb", "deltalake"},
    deps=[checkpoint_refresh],
    description=(
        "A consistent snapshot of the database as a Delta table (key, value) for analysts: "
        "read at a checkpoint with DbReader and written with deltalake (overwrite; older "
        "snapshots stay reachable by Delta time travel)."
    ),
)
def delta_export(
    context: dg.AssetExecutionContext,
    store: ObjectStoreResource,
    managed: ManagedDatabasesResource,
) -> dg.MaterializeResult:  # type: ignore[type-arg]
    db = context.partition_key
    s = store.open()
    started = time.monotonic()
    with surface_alerts(db):
        try:
            _, health = inspect_database(s, db)
        except DatabaseNotFound:
            return _skipped(context, "database not found")
        if health.destroyed or not health.initialized:
            return _skipped(context, "database destroyed or not initialized")
        snapshot = None
        if managed.export_checkpoint_name:
            live = [
                c
                for c in admin.list_checkpoints(db, s, managed.export_checkpoint_name)
                if not c.is_expired(time.time() + 60)
            ]
            snapshot = max(live, key=lambda c: c.create_time_s, default=None)
        temporary = snapshot is None
        if snapshot is None:
            lifetime = parse_duration(managed.export_checkpoint_lifetime)
            result = admin.create_checkpoint(
                db, s, CheckpointOptions(lifetime=lifetime, name=EXPORT_CHECKPOINT_NAME)
            )
            checkpoint_id, manifest_id = result.id, result.manifest_id
        else:
            checkpoint_id, manifest_id = snapshot.id, snapshot.manifest_id
        try:
            export = export_to_delta(
                s, db, export_uri(managed.export_root, db), checkpoint=checkpoint_id
            )
        finally:
            if temporary:
                try:
                    admin.delete_checkpoint(db, s, checkpoint_id)
                except CheckpointNotFound:
                    pass
    context.log.info(f"{db}: exported {export.rows} rows at manifest {manifest_id} to {export.uri}")
    return dg.MaterializeResult(
        metadata={
            "rows": _int(export.rows),
            "bytes": _int(export.bytes),
            "delta_version": _int(export.version),
            "manifest_id": _int(manifest_id),
            "checkpoint_id": dg.MetadataValue.text(str(checkpoint_id)),
            "snapshot": dg.MetadataValue.text("temporary" if temporary else "named"),
            "table_uri": dg.MetadataValue.path(export.uri),
            "duration_s": _float(time.monotonic() - started),
        }
    )


def _layout(shards: list[Any], sizes: list[int]) -> dg.MetadataValue:
    def show(b: bytes | None) -> str:
        return "-inf/+inf" if b is None else b.decode("utf-8", "backslashreplace")

    records = [
        dg.TableRecord(
            {
                "index": sh.index,
                "start": show(sh.key_range.start),
                "end": show(sh.key_range.end),
                "db_path": sh.db_path,
                "data_bytes": size,
            }
        )
        for sh, size in zip(shards, sizes, strict=True)
    ]
    schema = dg.TableSchema(
        columns=[
            dg.TableColumn("index", "int"),
            dg.TableColumn("start", "string"),
            dg.TableColumn("end", "string"),
            dg.TableColumn("db_path", "string"),
            dg.TableColumn("data_bytes", "int"),
        ]
    )
    return dg.MetadataValue.table(records, schema)


@dg.asset(
    partitions_def=tables_partitions,
    group_name=LAYOUT,
    kinds={"slatedb"},
    description=(
        "Sharded-table layout: splits a shard holding more than split_bytes (projection into "
        "two clones, at the estimated median key) and merges adjacent shards both under "
        "merge_bytes (union), through the table's shard map; then deletes the table's own "
        "garbage: shard-map versions older than gc_min_age and ingest leftovers older than "
        "ingest_retention. Records the new layout and what was deleted."
    ),
)
def rescaling(
    context: dg.AssetExecutionContext,
    store: ObjectStoreResource,
    managed: ManagedDatabasesResource,
) -> dg.MaterializeResult:  # type: ignore[type-arg]
    path = context.partition_key
    s = store.open()
    started = time.monotonic()
    splits = merges = 0
    with surface_alerts(path), Table.open(path, s) as table:
        resumed = bool(table.shard_map.pending)
        if resumed:  # a run that died mid-rescale left shards sealed: finish it first
            context.log.warning(f"{path}: finishing {len(table.shard_map.pending)} pending ops")
            table.resume()
        shards_before = len(table.shards)
        sizes: list[int] = []
        for _ in range(managed.max_rescale_operations + 1):
            table.refresh()
            inspected = [inspect_database(s, sh.db_path) for sh in table.shards]
            sizes = [h.data_bytes for _, h in inspected]
            if splits + merges >= managed.max_rescale_operations:
                break
            at = None
            for i, size in enumerate(sizes):
                if size <= managed.split_bytes:
                    continue
                at = split_key(inspected[i][0].manifest)
                if at is not None:
                    context.log.info(f"{path}: splitting shard {i} ({size} bytes) at {at!r}")
                    table.split(i, at=at)
                    splits += 1
                    break
            if at is not None:
                continue
            pair = next(
                (
                    i
                    for i in range(len(sizes) - 1)
                    if sizes[i] < managed.merge_bytes
                    and sizes[i + 1] < managed.merge_bytes
                    and sizes[i] + sizes[i + 1] < managed.split_bytes
                ),
                None,
            )
            if pair is None:
                break
            context.log.info(f"{path}: merging shards {pair} and {pair + 1}")
            table.merge(pair, expected_map_id=table.shard_map.id)
            merges += 1
        layout = _layout(table.shards, sizes)
        shard_map = table.shard_map
        gc = table.collect_garbage(
            managed.gc_options().min_age, parse_duration(managed.ingest_retention, allow_zero=True)
        )
    return dg.MaterializeResult(
        metadata={
            "splits": _int(splits),
            "merges": _int(merges),
            "shards_before": _int(shards_before),
            "shards": _int(len(shard_map.shards)),
            "shard_map_id": _int(shard_map.id),
            "retired_shards": _int(len(shard_map.retired)),
            "resumed_pending": dg.MetadataValue.bool(resumed),
            "table_bytes": _int(sum(sizes)),
            "shard_maps_deleted": _int(gc.shard_maps),
            "snapshot_records_deleted": _int(gc.snapshot_records),
            "snapshot_checkpoints_swept": _int(gc.snapshot_checkpoints),
            "ingest_leftovers_deleted": _int(gc.ingest_objects),
            "ingest_leftover_bytes_freed": _int(gc.ingest_bytes),
            "layout": layout,
            "duration_s": _float(time.monotonic() - started),
        }
    )


ASSETS = [compaction, garbage_collection, checkpoint_refresh, delta_export, rescaling]
