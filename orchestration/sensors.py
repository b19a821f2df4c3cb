"""Sensors: keep the partitions in step with the store, watch the GC boundaries and the lag of
every database, and make fencing and corruption failures stand out.

Cursors are JSON, so an operator can read (and, after fixing a store by hand, reset) them in the
UI. Each sensor reads only metadata (manifests, boundary files), never SSTs.
"""


import json
from typing import Any

import dagster as dg

from orchestration.alerts import ALERT_TAG, DATABASE_TAG, alert_in
from orchestration.assets import compaction, garbage_collection
from orchestration.jobs import compaction_job
from orchestration.partitions import (
    DATABASES,
    TABLES,
    databases_partitions,
    tables_partitions,
)
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from slatedb_core import (
    BoundaryMissing,
    CorruptionError,
    DatabaseNotFound,
    SlateDBError,
    Table,
)
from slatedb_core.health import inspect_database, read_boundaries

DISCOVERY_INTERVAL_S = 60
WATCH_INTERVAL_S = 30


def _status(running: bool) -> dg.DefaultSensorStatus:
    return dg.DefaultSensorStatus.RUNNING if running else dg.DefaultSensorStatus.STOPPED


def _cursor(context: dg.SensorEvaluationContext) -> dict[str, Any]:
    if not context.cursor:
        return {}
    loaded = json.loads(context.cursor)
    return loaded if isinstance(loaded, dict) else {}


def table_shards(
    store: ObjectStoreResource, managed: ManagedDatabasesResource, log: Any = None
) -> tuple[list[str], list[str]]:
    """(tables that exist, the database paths of their shards and of their retired shards, which
    stay managed until the GC has deleted them)."""
    tables: list[str] = []
    shards: list[str] = []
    for path in managed.tables:
        try:
            with Table.open(path, store.open()) as table:
                current = table.shard_map
        except SlateDBError as e:
            if log is not None:
                log.warning(f"table {path!r} not opened: {type(e).__name__}: {e}")
            continue
        tables.append(path)
        shards.extend(sh.db_path for sh in current.shards)
        shards.extend(current.retired)
    return tables, shards


def discovery_requests(
    instance: dg.DagsterInstance,
    store: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    log: Any = None,
) -> list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest]:
    """Partition changes that make the database and table partitions match the store."""
    tables, shards = table_shards(store, managed, log)
    wanted = {
        DATABASES: set(managed.database_paths(store.open(), shards)),
        TABLES: set(tables),
    }
    requests: list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest] = []
    for name, definition in ((DATABASES, databases_partitions), (TABLES, tables_partitions)):
        existing = set(instance.get_dynamic_partitions(name))
        added = sorted(wanted[name] - existing)
        removed = sorted(existing - wanted[name])
        if added:
            requests.append(definition.build_add_request(added))
        if removed:
            requests.append(definition.build_delete_request(removed))
    return requests


def build_sensors(running: bool = True) -> list[dg.SensorDefinition]:
    status = _status(running)

    @dg.sensor(
        name="database_discovery_sensor",
        minimum_interval_seconds=DISCOVERY_INTERVAL_S,
        default_status=status,
        description=(
            "Adds a partition for every managed database (listed, discovered under the prefix, "
            "or a table shard) and every table; removes those that no longer exist."
        ),
    )
    def database_discovery_sensor(
        context: dg.SensorEvaluationContext,
        store: ObjectStoreResource,
        managed: ManagedDatabasesResource,
    ) -> dg.SensorResult | dg.SkipReason:
        requests = discovery_requests(context.instance, store, managed, context.log)
        if not requests:
            return dg.SkipReason("partitions already match the store")
        return dg.SensorResult(dynamic_partitions_requests=requests)

    @dg.sensor(
        name="boundary_sensor",
        minimum_interval_seconds=WATCH_INTERVAL_S,
        default_status=status,
        asset_selection=[garbage_collection],
        description=(
            "Watches gc/*.boundary of every database: records an observation on "
            "garbage_collection when one advances; fails the tick when one moved backwards or "
            "disappeared (the cursor keeps the last good values until an operator resets it)."
        ),
    )
    def boundary_sensor(
        context: dg.SensorEvaluationContext, store: ObjectStoreResource
    ) -> dg.SensorResult | dg.SkipReason:
        return evaluate_boundaries(context, store)

    @dg.sensor(
        name="manifest_lag_sensor",
        minimum_interval_seconds=WATCH_INTERVAL_S,
        default_status=status,
        job=compaction_job,
        description=(
            "Per database: manifest lag behind the oldest pinned checkpoint, WAL backlog and L0 "
            "count; requests a compaction run (run key = database + manifest id, so the same "
            "state is never requested twice) when a threshold is exceeded."
        ),
    )
    def manifest_lag_sensor(
        context: dg.SensorEvaluationContext,
        store: ObjectStoreResource,
        managed: ManagedDatabasesResource,
    ) -> dg.SensorResult | dg.SkipReason:
        return evaluate_lag(context, store, managed)

    @dg.run_failure_sensor(
        name="slatedb_alert_sensor",
        default_status=status,
        description=(
            "Tags failed runs whose error is Fenced, CorruptionError or BoundaryMissing with "
            f"{ALERT_TAG}=<error> and logs them at error level."
        ),
    )
    def slatedb_alert_sensor(context: dg.RunFailureSensorContext) -> None:
        tag_alert(context)

    return [
        database_discovery_sensor,
        boundary_sensor,
        manifest_lag_sensor,
        slatedb_alert_sensor,
    ]


def evaluate_boundaries(
    context: dg.SensorEvaluationContext, store: ObjectStoreResource
) -> dg.SensorResult | dg.SkipReason:
    s = store.open()
    seen = _cursor(context)
    cursor: dict[str, dict[str, int]] = {}
    events: list[dg.AssetObservation] = []
    backwards: list[str] = []
    missing: list[str] = []
    for db in context.instance.get_dynamic_partitions(DATABASES):
        before: dict[str, int] = seen.get(db, {})
        try:
            inspect_database(s, db)
        except DatabaseNotFound:
            continue  # deleted (GC of a destroyed database): its boundaries went with it
        except CorruptionError as e:
            context.log.error(f"{db}: latest manifest does not decode: {e}")
        now = read_boundaries(s, db)
        advanced = []
        kept = dict(before)
        for ns, value in now.items():
            last = before.get(ns)
            if value is None:
                if last is not None:
                    missing.append(f"{db}: gc/{ns}.boundary disappeared (last seen {last})")
                continue
            if last is not None and value < last:
                backwards.append(f"{db}: gc/{ns}.boundary moved back from {last} to {value}")
                continue
            if last is None or value > last:
                advanced.append(ns)
            kept[ns] = value
        cursor[db] = kept
        if advanced:
            metadata: dict[str, Any] = {
                f"{ns}_boundary": dg.MetadataValue.int(v) for ns, v in kept.items()
            }
            metadata["advanced"] = dg.MetadataValue.text(", ".join(advanced))
            events.append(
                dg.AssetObservation(
                    asset_key=garbage_collection.key, partition=db, metadata=metadata
                )
            )
    if backwards:
        raise CorruptionError("gc boundaries", "; ".join(backwards + missing))
    if missing:
        raise BoundaryMissing("; ".join(missing))
    new_cursor = json.dumps(cursor, sort_keys=True)
    if not events and new_cursor == context.cursor:
        return dg.SkipReason("no boundary moved")
    return dg.SensorResult(asset_events=events, cursor=new_cursor)


def evaluate_lag(
    context: dg.SensorEvaluationContext,
    store: ObjectStoreResource,
    managed: ManagedDatabasesResource,
) -> dg.SensorResult | dg.SkipReason:
    s = store.open()
    seen = _cursor(context)
    cursor: dict[str, dict[str, int]] = {}
    runs: list[dg.RunRequest] = []
    events: list[dg.AssetObservation] = []
    for db in context.instance.get_dynamic_partitions(DATABASES):
        try:
            stored, h = inspect_database(s, db)
        except DatabaseNotFound:
            continue
        except CorruptionError as e:
            context.log.error(f"{db}: latest manifest does not decode: {e}")
            continue
        if h.destroyed or not h.initialized:
            continue
        figures = {
            "manifest_id": stored.id,
            "l0_ssts": h.l0_ssts,
            "wal_backlog": h.wal_backlog,
            "manifest_lag": h.manifest_lag,
        }
        cursor[db] = figures
        if seen.get(db) != figures:
            events.append(
                dg.AssetObservation(
                    asset_key=compaction.key,
                    partition=db,
                    metadata={k: dg.MetadataValue.int(v) for k, v in figures.items()},
                )
            )
        reasons = [
            f"{name} {value} > {limit}"
            for name, value, limit in (
                ("l0_ssts", h.l0_ssts, managed.l0_max_ssts),
                ("wal_backlog", h.wal_backlog, managed.wal_backlog_max),
                ("manifest_lag", h.manifest_lag, managed.manifest_lag_max),
            )
            if value > limit
        ]
        if reasons:
            context.log.info(f"{db}: compaction requested: {'; '.join(reasons)}")
            runs.append(
                dg.RunRequest(
                    run_key=f"compaction:{db}:manifest-{stored.id}",
                    partition_key=db,
                    tags={"slatedb/reason": "; ".join(reasons), DATABASE_TAG: db},
                )
            )
    new_cursor = json.dumps(cursor, sort_keys=True)
    if not runs and not events and new_cursor == context.cursor:
        return dg.SkipReason("no database changed")
    return dg.SensorResult(run_requests=runs, asset_events=events, cursor=new_cursor)


def tag_alert(context: dg.RunFailureSensorContext) -> str | None:
    """Tag the failed run with the alert-worthy error class found in it; returns that class."""
    errors = [context.failure_event.event_specific_data]
    errors.extend(e.event_specific_data for e in context.get_step_failure_events())
    kind = None
    for data in errors:
        kind = alert_in(getattr(data, "error", None))
        if kind is not None:
            break
    if kind is None:
        return None
    run = context.dagster_run
    tags = {ALERT_TAG: kind}
    partition = run.tags.get("dagster/partition")
    if partition:
        tags[DATABASE_TAG] = partition
    context.instance.add_run_tags(run.run_id, tags)
    context.log.error(
        f"SLATEDB ALERT {kind} in run {run.run_id} ({run.job_name}, database {partition})"
    )
    return kind
