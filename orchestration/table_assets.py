"""The assets over a database's data and over sharded tables: ``delta_export`` (a snapshot of a
database as a Delta table) and ``rescaling`` (splits and merges a table's shards). Imported by
:mod:`orchestration.assets`, which lists every maintenance asset."""

import datetime as dt
import time
from collections.abc import Iterator
from typing import Any

import dagster as dg

from orchestration.alerts import surface_alerts
from orchestration.delta import export_to_delta, export_uri
from orchestration.metadata import (
    DEFAULT_OWNERS,
    EXPORT,
    LAYOUT,
    SUMMARY,
    age,
    count,
    duration,
    freshness,
    integer,
    live_database,
    millis,
    nbytes,
    size,
    tags,
    text,
    timestamp,
)
from orchestration.partitions import databases_partitions, tables_partitions
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from slatedb_core import CheckpointOptions, Table, admin
from slatedb_core.durations import parse_duration
from slatedb_core.errors import CheckpointNotFound, MergeBlockedByBatch
from slatedb_core.health import DatabaseHealth, inspect_database, split_key
from slatedb_core.manifest.store import StoredManifest
from slatedb_core.table.shardmap import Shard

EXPORT_CHECKPOINT_NAME = "delta-export"
"""Name of the temporary checkpoint ``delta_export`` takes when no named snapshot is configured."""

DAY = dt.timedelta(days=1)


@dg.asset(
    partitions_def=databases_partitions,
    group_name=EXPORT,
    kinds={"slatedb", "deltalake"},
    owners=list(DEFAULT_OWNERS),
    tags=tags("export"),
    output_required=False,
    freshness_policy=freshness(warn=DAY + dt.timedelta(hours=2), fail=2 * DAY),
    description=(
        "A consistent snapshot of the database as a Delta table (key, value) for analysts: "
        "read at a checkpoint with DbReader and written with deltalake (overwrite; older "
        "snapshots stay reachable by Delta time travel). The checkpoint is the newest of "
        "export_checkpoint_name (kept by checkpoint_refresh) when set, else a temporary one. "
        "Records how old the snapshot is and how far the database has moved on since."
    ),
)
def delta_export(
    context: dg.AssetExecutionContext,
    store: ObjectStoreResource,
    managed: ManagedDatabasesResource,
) -> Iterator[dg.MaterializeResult | dg.AssetObservation]:  # type: ignore[type-arg]
    db = context.partition_key
    s = store.open()
    started = time.monotonic()
    with surface_alerts(db):
        found = live_database(context, s, db)
        if isinstance(found, dg.AssetObservation):
            yield found
            return
        _, health = found
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
            created_s = float(int(time.time()))
            result = admin.create_checkpoint(
                db,
                s,
                CheckpointOptions(lifetime=lifetime, name=EXPORT_CHECKPOINT_NAME),
                wal_url=store.wal_url,
            )
            checkpoint_id, manifest_id = result.id, result.manifest_id
        else:
            checkpoint_id, manifest_id = snapshot.id, snapshot.manifest_id
            created_s = float(snapshot.create_time_s)
        try:
            export = export_to_delta(
                s,
                db,
                export_uri(managed.export_root, db),
                checkpoint=checkpoint_id,
                options=store.reader_options(),
            )
        finally:
            if temporary:
                try:
                    admin.delete_checkpoint(db, s, checkpoint_id)
                except CheckpointNotFound:
                    pass
    seconds = time.monotonic() - started
    snapshot_age = max(0, int(time.time() - created_s))
    latest = max(health.manifest_id, manifest_id)
    kind = "temporary" if temporary else "named"
    source = (
        "a temporary checkpoint"
        if temporary
        else f"{managed.export_checkpoint_name!r} taken {age(snapshot_age)} ago"
    )
    summary = (
        f"exported {export.rows} rows ({size(export.bytes)}) at manifest {manifest_id} "
        f"(database at {latest}, {latest - manifest_id} behind) from {source}, "
        f"Delta version {export.version}, {duration(seconds)}"
    )
    context.log.info(f"{db}: {summary} to {export.uri}")
    yield dg.MaterializeResult(
        metadata={
            SUMMARY: text(summary),
            "rows": integer(export.rows),
            **nbytes("arrow_bytes", export.bytes),
            "delta_version": integer(export.version),
            "snapshot_manifest_id": integer(manifest_id),
            "latest_manifest_id": integer(latest),
            "manifests_behind": integer(latest - manifest_id),
            "snapshot_created": timestamp(created_s),
            "snapshot_age_s": integer(snapshot_age),
            "checkpoint_id": text(str(checkpoint_id)),
            "snapshot": text(kind),
            "table_uri": dg.MetadataValue.path(export.uri),
            "duration_ms": millis(seconds),
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
                "data_bytes": size_,
                "data": size(size_),
            }
        )
        for sh, size_ in zip(shards, sizes, strict=True)
    ]
    schema = dg.TableSchema(
        columns=[
            dg.TableColumn("index", "int"),
            dg.TableColumn("start", "string"),
            dg.TableColumn("end", "string"),
            dg.TableColumn("db_path", "string"),
            dg.TableColumn("data_bytes", "int"),
            dg.TableColumn("data", "string"),
        ]
    )
    return dg.MetadataValue.table(records, schema)


@dg.asset(
    partitions_def=tables_partitions,
    group_name=LAYOUT,
    kinds={"slatedb"},
    owners=list(DEFAULT_OWNERS),
    tags=tags("rescaling", scope="table"),
    freshness_policy=freshness(warn=DAY + dt.timedelta(hours=2), fail=2 * DAY),
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
    blocked: dict[tuple[str, str], str] = {}  # pairs whose merge a half-applied batch refused
    with surface_alerts(path), Table.open(path, s, store.table_options()) as table:
        resumed = bool(table.shard_map.pending)
        if resumed:  # a run that died mid-rescale left shards sealed: finish it first
            context.log.warning(f"{path}: finishing {len(table.shard_map.pending)} pending ops")
            merging = [op.sources for op in table.shard_map.pending if op.kind == "merge"]
            paths = {sh.shard_id: sh.db_path for sh in table.shards}
            try:
                table.resume()
            except MergeBlockedByBatch as e:  # raised once every other op was finished
                table.refresh()
                for a, b in merging:  # a cancelled merge left both its shards in the map
                    if table.shard_map.by_id(a) and table.shard_map.by_id(b):
                        blocked[(paths[a], paths[b])] = str(e)
                context.log.warning(f"{path}: {e}")
        shards_before = len(table.shards)

        def measure() -> tuple[list[Shard], list[tuple[StoredManifest, DatabaseHealth]], list[int]]:
            """The latest shards and their sizes, read together: the layout pairs them."""
            table.refresh()
            shards = list(table.shards)
            inspected = [inspect_database(s, sh.db_path) for sh in shards]
            return shards, inspected, [h.data_bytes for _, h in inspected]

        measured, sizes = list(table.shards), [0] * len(table.shards)
        changed = True  # the layout may differ from what `measured` and `sizes` describe
        for _ in range(managed.max_rescale_operations + 1):
            measured, inspected, sizes = measure()
            changed = False
            if splits + merges >= managed.max_rescale_operations:
                break
            at = None
            for i, size_ in enumerate(sizes):
                if size_ <= managed.split_bytes:
                    continue
                at = split_key(inspected[i][0].manifest)
                if at is not None:
                    context.log.info(f"{path}: splitting shard {i} ({size_} bytes) at {at!r}")
                    table.split(i, at=at)
                    splits += 1
                    changed = True
                    break
            if at is not None:
                continue
            shards = measured
            pair = next(
                (
                    i
                    for i in range(len(sizes) - 1)
                    if sizes[i] < managed.merge_bytes
                    and sizes[i + 1] < managed.merge_bytes
                    and sizes[i] + sizes[i + 1] < managed.split_bytes
                    and (shards[i].db_path, shards[i + 1].db_path) not in blocked
                ),
                None,
            )
            if pair is None:
                break
            context.log.info(f"{path}: merging shards {pair} and {pair + 1}")
            try:
                table.merge(pair, expected_map_id=table.shard_map.id)
            except MergeBlockedByBatch as e:
                # a batch reached one of the two shards only: merging now would either lose
                # its rows or write them twice on its re-run (docs/format.md); the shards are
                # left as they were and the pair is tried again by a later pass
                blocked[(shards[pair].db_path, shards[pair + 1].db_path)] = str(e)
                context.log.warning(f"{path}: {e}")
                continue
            merges += 1
            changed = True
        if changed:  # the last round split or merged and the rounds ran out: measure again
            measured, _, sizes = measure()
        layout = _layout(measured, sizes)
        shard_map = table.shard_map
        gc = table.collect_garbage(
            managed.gc_options().min_age, parse_duration(managed.ingest_retention, allow_zero=True)
        )
    seconds = time.monotonic() - started
    done = [count(n, w) for n, w in ((splits, "split"), (merges, "merge")) if n]
    summary = (
        f"{', '.join(done) or 'layout unchanged'}: {shards_before} -> "
        f"{len(shard_map.shards)} shards, {size(sum(sizes))}; deleted "
        f"{gc.shard_maps} shard maps, {gc.ingest_objects} ingest leftovers "
        f"({size(gc.ingest_bytes)}), {duration(seconds)}"
    )
    if resumed:
        summary = "finished a pending rescale; " + summary
    if blocked:
        summary += f"; {count(len(blocked), 'merge')} blocked by a batch applied to one shard only"
    context.log.info(f"{path}: {summary}")
    return dg.MaterializeResult(
        metadata={
            SUMMARY: text(summary),
            "splits": integer(splits),
            "merges": integer(merges),
            "merges_blocked": integer(len(blocked)),
            "merge_blocked_reasons": text("\n".join(blocked.values()) or "none"),
            "shards_before": integer(shards_before),
            "shards": integer(len(shard_map.shards)),
            "shard_map_id": integer(shard_map.id),
            "retired_shards": integer(len(shard_map.retired)),
            "resumed_pending": dg.MetadataValue.bool(resumed),
            **nbytes("table_bytes", sum(sizes)),
            "shard_maps_deleted": integer(gc.shard_maps),
            "snapshot_records_deleted": integer(gc.snapshot_records),
            "snapshot_checkpoints_swept": integer(gc.snapshot_checkpoints),
            "ingest_leftovers_deleted": integer(gc.ingest_objects),
            **nbytes("ingest_leftover_freed_bytes", gc.ingest_bytes),
            "layout": layout,
            "duration_ms": millis(seconds),
        }
    )
