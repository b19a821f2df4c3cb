"""Sensors: keep the partitions in step with the store, watch the fleet, and make fencing and
corruption failures stand out.

``fleet_sensor`` (see :mod:`orchestration.fleet_sensor`) is the one that reads every database each
tick: checks of the current state, runs for live databases that need them (never a storm), the
fleet view. Cursors are JSON, so an operator can read (and, after fixing a store by hand, reset)
them in the UI. Sensors read only metadata (manifests, boundary files, listings), never SST data.
"""

import json
from typing import Any

import dagster as dg

from orchestration import fleet_memory
from orchestration.alerts import ALERT_TAG, DATABASE_TAG, alert_in
from orchestration.fleet_report import fleet_report_job
from orchestration.fleet_sensor import evaluate_fleet, scan_fleet, scanner_for
from orchestration.jobs import checkpoint_job, compaction_job
from orchestration.missing import ACKNOWLEDGE_JOB, keep_missing
from orchestration.partitions import (
    DATABASES,
    TABLES,
    databases_partitions,
    tables_partitions,
)
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from slatedb_core import SlateDBError, Table
from slatedb_core.errors import DatabaseNotFound

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
) -> tuple[list[str], list[str], list[str]]:
    """(tables that exist, the database paths of their shards and of their retired shards, which
    stay managed until the GC has deleted them, tables that exist but could not be read now: a
    damaged shard map, a store that did not answer). Only a table that is not there
    (:class:`~slatedb_core.errors.DatabaseNotFound`) is neither."""
    tables: list[str] = []
    shards: list[str] = []
    unreadable: list[str] = []
    for path in managed.tables:
        try:
            with Table.open(path, store.open()) as table:
                current = table.shard_map
        except SlateDBError as e:
            if log is not None:
                log.warning(f"table {path!r} not opened: {type(e).__name__}: {e}")
            if not isinstance(e, DatabaseNotFound):
                unreadable.append(path)
            continue
        tables.append(path)
        shards.extend(sh.db_path for sh in current.shards)
        shards.extend(current.retired)
    return tables, shards, unreadable


def discovery_requests(
    instance: dg.DagsterInstance,
    store: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    log: Any = None,
) -> list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest]:
    """Partition changes that make the database and table partitions match the store."""
    tables, shards, unreadable = table_shards(store, managed, log)
    wanted = {
        DATABASES: set(managed.database_paths(store.open(), shards)),
        TABLES: set(tables) | set(unreadable),  # a table read again next tick stays meanwhile
    }
    requests: list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest] = []
    for name, definition in ((DATABASES, databases_partitions), (TABLES, tables_partitions)):
        existing = set(instance.get_dynamic_partitions(name))
        added = sorted(wanted[name] - existing)
        removed = sorted(existing - wanted[name])
        if name == DATABASES and removed:
            # a table not read this tick has shards not known now: only gone ones may go
            removed = _not_kept(instance, store, managed, removed, log, bool(unreadable))
        if added:
            requests.append(definition.build_add_request(added))
        if removed:
            requests.append(definition.build_delete_request(removed))
    return requests


def _not_kept(
    instance: dg.DagsterInstance,
    store: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    removed: list[str],
    log: Any = None,
    only_gone: bool = False,
) -> list[str]:
    """The database partitions the store no longer lists that may go: destroyed ones (a
    tombstone) and those never seen with a manifest. One deleted outside destroy stays, missing
    with an ERROR check, until acknowledged (:mod:`orchestration.missing`); so does one the
    store did not answer for. ``only_gone``: a managed table could not be read, so a database
    still in the store may be its shard: it stays too."""
    memory = fleet_memory.latest(instance)
    statuses = scan_fleet(scanner_for(store, managed.fleet_scan_concurrency), removed)
    out = []
    for db in removed:
        state = statuses[db].state
        if keep_missing(state, memory.dbs.get(db)):
            if log is not None:
                log.warning(
                    f"database {db!r} is {state}: its partition is kept until it is restored "
                    f"or acknowledged ({ACKNOWLEDGE_JOB})"
                )
            continue
        if only_gone and state not in ("missing", "destroyed"):
            if log is not None:
                log.warning(
                    f"database {db!r} is {state} but no longer listed while a managed table "
                    "could not be read: its partition is kept"
                )
            continue
        out.append(db)
    return out


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
        name="fleet_sensor",
        minimum_interval_seconds=WATCH_INTERVAL_S,
        default_status=status,
        jobs=[compaction_job, checkpoint_job, fleet_report_job],
        description=(
            "Every tick, for every database: evaluates the checks of its current state (L0, WAL "
            "backlog, manifest lag: WARN; a manifest that does not decode, missing SSTs, a GC "
            "boundary that moved back: ERROR), requests compaction for live databases over "
            "l0_max_ssts / wal_backlog_max (run key = the L0 SST ids; held back after a failure "
            "with an alert until those SSTs change), re-takes a managed retention checkpoint that "
            "pins a manifest past manifest_lag_max, and refreshes slatedb_fleet. A tick without "
            "runs says why: the highest figures against their thresholds."
        ),
    )
    def fleet_sensor(
        context: dg.SensorEvaluationContext,
        store: ObjectStoreResource,
        managed: ManagedDatabasesResource,
    ) -> dg.SensorResult | dg.SkipReason:
        return evaluate_fleet(context, store, managed)

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
        fleet_sensor,
        slatedb_alert_sensor,
    ]


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
