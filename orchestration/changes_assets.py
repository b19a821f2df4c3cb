"""The change-feed assets: ``changes_to_delta`` keeps a Delta table in step with a database's
changes, incrementally and exactly once (:mod:`orchestration.changes_delta`), and its check
``changes_consumer_retained`` flags the feed's consumer falling behind the retention
(docs/changes.md, "Retention"; issue 43, item 4). One partition per database, as the
maintenance assets; ``changes_table_to_delta`` does the same for a sharded table's combined
feed, one partition per table."""

import time
import warnings
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import dagster as dg
from pydantic import Field

from orchestration.alerts import surface_alerts
from orchestration.changes_delta import (
    ChangesApplied,
    apply_changes,
    apply_table_changes,
    committed_cursor,
)
from orchestration.delta import export_uri
from orchestration.markdown import markdown_literal
from orchestration.metadata import (
    DEFAULT_OWNERS,
    EXPORT,
    SUMMARY,
    duration,
    integer,
    live_database,
    millis,
    skipped,
    tags,
    text,
    unchanged,
)
from orchestration.partitions import databases_partitions, tables_partitions
from orchestration.resources import ObjectStoreResource
from slatedb_core import Table
from slatedb_core.durations import parse_duration
from slatedb_core.errors import (
    ChangesCollected,
    DatabaseNotFound,
    InvalidArgument,
    MergeOperatorFailed,
)
from slatedb_core.feed import ChangeFeed, ChangesOptions
from slatedb_core.health import inspect_database

# partitioned asset checks are "preview" in Dagster 1.13 (as in orchestration.checks)
warnings.filterwarnings(
    "ignore", message="Specifying a partitions_def on an AssetCheckSpec", category=dg.PreviewWarning
)

CHANGES_RESOURCE = "changes_delta"
"""The resource key of :class:`ChangesToDeltaResource`."""


class ChangesToDeltaResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """Where ``changes_to_delta`` writes, the consumer it reads as, and when its check warns."""

    root: str = Field(
        default="delta-changes",
        description="Delta tables of the change feeds: <root>/<database> (a directory or an URI "
        "deltalake accepts; credentials from the environment, never in it)",
    )
    consumer: str = Field(
        default="delta-changes",
        description="The registered change-feed consumer (its checkpoint keeps what the Delta "
        "table has not received)",
    )
    consumer_lifetime: str | None = Field(
        default="7d",
        description="How long the consumer's checkpoint outlives its last pass (None: until "
        "released); a pass later than this finds its changes collected",
    )
    table_root: str = Field(
        default="delta-table-changes",
        description="Delta tables of the sharded tables' change feeds: <table_root>/<table> "
        "(kept apart from root, so a table and a database of one name never share one)",
    )
    batch_rows: int = Field(default=65536, description="Rows per change batch read")
    max_rows: int = Field(
        default=1_000_000, description="Changes one pass applies at most (the next pass goes on)"
    )
    wal_behind_max: int = Field(
        default=64,
        description="The check warns when the consumer's checkpoint keeps more than this many "
        "WAL SSTs behind the latest replay point",
    )
    expiry_warn: str = Field(
        default="1d",
        description="The check warns when the consumer's checkpoint expires within this",
    )

    def changes_options(self) -> ChangesOptions:
        """The feed's options (the consumer is set by the pass)."""
        lifetime = (
            None if self.consumer_lifetime is None else parse_duration(self.consumer_lifetime)
        )
        return ChangesOptions(
            batch_rows=self.batch_rows, consumer=self.consumer, consumer_lifetime=lifetime
        )

    def uri(self, db: str) -> str:
        """The Delta table of ``db``."""
        return export_uri(self.root, db)

    def table_uri(self, table: str) -> str:
        """The Delta table of the sharded table ``table``'s changes."""
        return export_uri(self.table_root, table)


@dg.asset(
    partitions_def=databases_partitions,
    group_name=EXPORT,
    kinds={"slatedb", "deltalake"},
    owners=list(DEFAULT_OWNERS),
    tags=tags("changes"),
    output_required=False,
    description=(
        "The database's changes merged by key into a Delta table (put: upsert, delete: delete, "
        "merge operands folded with the store's merge_operator), incrementally: each pass "
        "reads the change feed after the cursor the table's last Delta commit recorded and "
        "commits the rows and the new cursor together, so a rerun after any crash neither "
        "duplicates nor skips. Read as a registered consumer, whose checkpoint keeps its "
        "changes through GC (changes_consumer_retained checks it)."
    ),
)
def changes_to_delta(
    context: dg.AssetExecutionContext,
    store: ObjectStoreResource,
    changes_delta: ChangesToDeltaResource,
) -> Any:
    db = context.partition_key
    s = store.open()
    started = time.monotonic()
    with surface_alerts(db):
        found = live_database(context, s, db)
        if isinstance(found, dg.AssetObservation):
            yield found
            return
        try:
            applied = apply_changes(
                s,
                db,
                changes_delta.uri(db),
                consumer=changes_delta.consumer,
                options=changes_delta.changes_options(),
                wal_url=store.wal_url,
                merge_operator=store.merge_operator,
                max_rows=changes_delta.max_rows,
            )
        except (ChangesCollected, InvalidArgument, MergeOperatorFailed) as e:
            raise dg.Failure(description=markdown_literal(f"{db}: {e}")) from e
    yield from _recorded(context, db, applied, time.monotonic() - started)


def _recorded(
    context: dg.AssetExecutionContext, name: str, applied: ChangesApplied, seconds: float
) -> Iterator[dg.MaterializeResult | dg.AssetObservation]:  # type: ignore[type-arg]
    """A pass's record: a materialization with its figures when it committed, else an
    observation (:func:`orchestration.metadata.unchanged`)."""
    metadata: dict[str, dg.MetadataValue] = {
        "cursor": text(applied.cursor or "none"),
        "since": text(applied.since or "none"),
        "changes": integer(applied.changes),
        "upserts": integer(applied.upserts),
        "deletes": integer(applied.deletes),
        "merge_operands": integer(applied.merge_operands),
        "snapshot_rows": integer(applied.snapshot_rows),
        "delta_version": integer(applied.version, "nothing committed"),
        "table_uri": dg.MetadataValue.path(applied.uri),
        "duration_ms": millis(seconds),
    }
    if applied.version is None:
        metadata[SUMMARY] = text(f"no new changes after {applied.since}, {duration(seconds)}")
        yield unchanged(context, metadata)
        return
    summary = (
        f"applied {applied.changes} changes ({applied.upserts} upserts, {applied.deletes} "
        f"deletes) as Delta version {applied.version}, cursor {applied.cursor}, "
        f"{duration(seconds)}"
    )
    metadata[SUMMARY] = text(summary)
    context.log.info(f"{name}: {summary}")
    yield dg.MaterializeResult(metadata=metadata)


@dg.asset(
    partitions_def=tables_partitions,
    group_name=EXPORT,
    kinds={"slatedb", "deltalake"},
    owners=list(DEFAULT_OWNERS),
    tags=tags("changes"),
    output_required=False,
    description=(
        "The sharded table's changes (every shard's, in order per key through splits, merges "
        "and overwrites: Table.changes) merged by key into a Delta table, incrementally and "
        "exactly once as changes_to_delta: the table cursor lives in the Delta commit that "
        "applies the rows before it. Read as a consumer registered in each live shard."
    ),
)
def changes_table_to_delta(
    context: dg.AssetExecutionContext,
    store: ObjectStoreResource,
    changes_delta: ChangesToDeltaResource,
) -> Any:
    path = context.partition_key
    s = store.open()
    started = time.monotonic()
    with surface_alerts(path):
        try:
            opened = Table.open(path, s, store.table_options())
        except DatabaseNotFound as e:  # as a pass over a missing database: skipped, not failed
            yield skipped(context, f"no table at this path ({e})")
            return
        try:
            with opened as table:
                applied = apply_table_changes(
                    table,
                    changes_delta.table_uri(path),
                    consumer=changes_delta.consumer,
                    options=changes_delta.changes_options(),
                    merge_operator=store.merge_operator,
                    max_rows=changes_delta.max_rows,
                )
        except (ChangesCollected, InvalidArgument, MergeOperatorFailed) as e:
            raise dg.Failure(description=markdown_literal(f"{path}: {e}")) from e
    yield from _recorded(context, path, applied, time.monotonic() - started)


def _check(
    passed: bool, description: str, severity: dg.AssetCheckSeverity, **metadata: Any
) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        passed=passed,
        severity=severity,
        description=markdown_literal(description),
        metadata=metadata,
    )


@dg.asset_check(
    asset=changes_to_delta,
    partitions_def=databases_partitions,
    description=(
        "ERROR: the changes after the Delta table's cursor were collected (the consumer fell "
        "behind the retention: its checkpoint expired or the GC passed it). WARN: the "
        "consumer's checkpoint keeps more than wal_behind_max WAL SSTs, expires within "
        "expiry_warn, expired, or is gone while the table has a cursor."
    ),
)
def changes_consumer_retained(
    context: dg.AssetCheckExecutionContext,
    store: ObjectStoreResource,
    changes_delta: ChangesToDeltaResource,
) -> dg.AssetCheckResult:
    warn, error = dg.AssetCheckSeverity.WARN, dg.AssetCheckSeverity.ERROR
    if not context.has_partition_key:
        raise dg.Failure(description="This check is per database: launch it for one partition.")
    db = str(context.partition_key)
    consumer = changes_delta.consumer
    s = store.open()
    try:
        inspect_database(s, db)
    except DatabaseNotFound:
        return _check(False, f"{db}: no database at this path", warn, database=db)
    done = committed_cursor(changes_delta.uri(db), db, consumer)
    feed = ChangeFeed(
        db,
        s,
        ChangesOptions(batch_rows=1, bootstrap=False),
        wal_url=store.wal_url,
        merge_operator=store.merge_operator,
    )
    if done.cursor is not None:
        probe = feed.changes(done.cursor)  # unregistered: moves nothing
        try:
            next(probe, None)
        except ChangesCollected as e:
            return _check(
                False,
                f"{db}: consumer {consumer}: {e}; rebuild the Delta table from a snapshot",
                error,
                database=db,
                cursor=done.cursor,
            )
        finally:
            probe.close()  # type: ignore[attr-defined]
    holds = {h.name: h for h in feed.consumers()}
    hold = holds.get(consumer)
    if hold is None:  # released, or its checkpoint expired and was removed
        return _check(
            done.cursor is None,
            f"{db}: consumer {consumer} "
            + (
                "not started yet"
                if done.cursor is None
                else "is not registered: nothing keeps its changes from the GC (its next "
                "pass registers it again)"
            ),
            warn,
            database=db,
        )
    if hold.expired or hold.wal_behind is None:
        return _check(
            False,
            f"{db}: consumer {consumer}'s checkpoint expired; the GC may collect its changes "
            "before its next pass",
            warn,
            database=db,
        )
    left = (
        None
        if hold.checkpoint.expire_time_s is None
        else hold.checkpoint.expire_time_s - time.time()
    )
    soon = left is not None and left < parse_duration(changes_delta.expiry_warn).total_seconds()
    behind = hold.wal_behind > changes_delta.wal_behind_max
    meta = {
        "database": db,
        "wal_behind": dg.MetadataValue.int(hold.wal_behind),
        "wal_behind_max": dg.MetadataValue.int(changes_delta.wal_behind_max),
        "expires_in_s": dg.MetadataValue.int(int(left)) if left is not None else "never",
        "cursor": done.cursor or "none",
    }
    parts = []
    if behind:
        parts.append(f"keeps {hold.wal_behind} WAL SSTs (over {changes_delta.wal_behind_max})")
    if soon:
        parts.append(f"its checkpoint expires in {timedelta(seconds=int(left or 0))}")
    if parts:
        return _check(False, f"{db}: consumer {consumer} " + "; ".join(parts), warn, **meta)
    return _check(True, f"{db}: consumer {consumer} keeps {hold.wal_behind} WAL SSTs", warn, **meta)


CHANGES_ASSETS = [changes_to_delta, changes_table_to_delta]
CHANGES_CHECKS = [changes_consumer_retained]

changes_to_delta_job = dg.define_asset_job(
    "changes_to_delta_job",
    selection=dg.AssetSelection.assets(changes_to_delta),  # with its check: after the pass
    executor_def=dg.in_process_executor,  # one step: no second process (orchestration.jobs)
    description="One changes_to_delta pass for one database partition, then its check.",
)
changes_table_to_delta_job = dg.define_asset_job(
    "changes_table_to_delta_job",
    selection=dg.AssetSelection.assets(changes_table_to_delta),
    executor_def=dg.in_process_executor,
    description="One changes_table_to_delta pass for one table partition.",
)
CHANGES_JOBS = [changes_to_delta_job, changes_table_to_delta_job]
