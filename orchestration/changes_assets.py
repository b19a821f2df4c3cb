"""The change-feed assets: ``changes_to_delta`` keeps a Delta table in step with a database's
changes, incrementally and exactly once (:mod:`orchestration.changes_delta`), and its check
``changes_consumer_retained`` flags the feed's consumer falling behind the retention
(docs/changes.md, "Retention"; issue 43, item 4). One partition per database, as the
maintenance assets; ``changes_table_to_delta`` does the same for a sharded table's combined
feed, one partition per table, and its check ``changes_table_retained`` the same per shard
(docs/changes.md, "Tables"). The two passes and the two checks share their set-up: the pass
(:func:`_pass`), the committed cursor (:func:`_committed`), the probe of the changes after it
(:func:`_collected`) and the judgement of one consumer hold (:func:`_hold_faults`)."""

import contextlib
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any, TypeVar

import dagster as dg
from pydantic import Field

from orchestration.alerts import surface_alerts
from orchestration.changes_delta import (
    TABLE_KEY,
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
from slatedb_core import ChangeFeed, ChangesOptions, ConsumerHold, ObjectStore, Table
from slatedb_core.durations import parse_duration
from slatedb_core.errors import (
    ChangesCollected,
    DatabaseNotFound,
    InvalidArgument,
    MergeOperatorFailed,
)
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


_Source = TypeVar("_Source")


def _pass(
    context: dg.AssetExecutionContext,
    store: ObjectStoreResource,
    open_source: Callable[[ObjectStore], dg.AssetObservation | AbstractContextManager[_Source]],
    apply: Callable[[_Source], ChangesApplied],
) -> Iterator[dg.MaterializeResult | dg.AssetObservation]:  # type: ignore[type-arg]
    """One pass of either asset over its partition: ``open_source`` opens the database or
    table in the store (or says why the pass is skipped), ``apply`` applies its changes; a
    feed that cannot go on (collected, refused, a failing merge operator) fails the run."""
    name = context.partition_key
    s = store.open()
    started = time.monotonic()
    with surface_alerts(name):
        source = open_source(s)
        if isinstance(source, dg.AssetObservation):
            yield source
            return
        try:
            with source as opened:
                applied = apply(opened)
        except (ChangesCollected, InvalidArgument, MergeOperatorFailed) as e:
            raise dg.Failure(description=markdown_literal(f"{name}: {e}")) from e
    yield from _recorded(context, name, applied, time.monotonic() - started)


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

    def open_db(s: ObjectStore) -> dg.AssetObservation | AbstractContextManager[ObjectStore]:
        found = live_database(context, s, db)
        return found if isinstance(found, dg.AssetObservation) else contextlib.nullcontext(s)

    yield from _pass(
        context,
        store,
        open_db,
        lambda s: apply_changes(
            s,
            db,
            changes_delta.uri(db),
            consumer=changes_delta.consumer,
            options=changes_delta.changes_options(),
            wal_url=store.wal_url,
            merge_operator=store.merge_operator,
            max_rows=changes_delta.max_rows,
        ),
    )


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
        "applies the rows before it. Read as a consumer registered in each live shard "
        "(changes_table_retained checks its holds)."
    ),
)
def changes_table_to_delta(
    context: dg.AssetExecutionContext,
    store: ObjectStoreResource,
    changes_delta: ChangesToDeltaResource,
) -> Any:
    path = context.partition_key

    def open_table(s: ObjectStore) -> dg.AssetObservation | AbstractContextManager[Table]:
        table = _open_table(s, store, path)
        # as a pass over a missing database: skipped, not failed
        return table if isinstance(table, Table) else skipped(context, table)

    yield from _pass(
        context,
        store,
        open_table,
        lambda table: apply_table_changes(
            table,
            changes_delta.table_uri(path),
            consumer=changes_delta.consumer,
            options=changes_delta.changes_options(),
            merge_operator=store.merge_operator,
            max_rows=changes_delta.max_rows,
        ),
    )


def _open_table(s: ObjectStore, store: ObjectStoreResource, path: str) -> Table | str:
    """The table at ``path``, or why there is none (its pass is skipped, its check warns)."""
    try:
        return Table.open(path, s, store.table_options())
    except DatabaseNotFound as e:
        return f"no table at this path ({e})"


def _committed(changes_delta: ChangesToDeltaResource, name: str, *, table: bool) -> str | None:
    """The cursor the Delta table of the database (or, with ``table``, of the sharded table)
    ``name`` last committed for the resource's consumer (None: no pass committed yet)."""
    if table:
        uri, key = changes_delta.table_uri(name), TABLE_KEY
        return committed_cursor(uri, name, changes_delta.consumer, source_key=key).cursor
    return committed_cursor(changes_delta.uri(name), name, changes_delta.consumer).cursor


def _collected(
    probe: Iterator[Any], enough: Callable[[Any], bool], max_rows: int
) -> ChangesCollected | None:
    """What an unregistered read after the committed cursor (``probe``: it moves no consumer
    hold) meets: ChangesCollected when the changes the next pass needs are gone, else None.
    Read until ``enough`` of the batches it yielded so far (true for the batch given), its end,
    or ``max_rows`` rows (what one pass reads at most: the next pass probes the rest)."""
    rows = 0
    try:
        for batch in probe:
            rows += batch.rows.num_rows
            if enough(batch) or rows >= max_rows:
                break
    except ChangesCollected as e:
        return e
    finally:
        probe.close()  # type: ignore[attr-defined]
    return None


def _hold_faults(
    hold: ConsumerHold | None, has_cursor: bool, changes_delta: ChangesToDeltaResource, now_s: float
) -> list[str]:
    """What is wrong with a consumer's hold on one database (a database's own, or a shard's
    under the table's consumer name), each a phrase after "consumer <name>"; empty: nothing.
    ``has_cursor``: the Delta table recorded a cursor (a consumer without one holds nothing
    yet)."""
    if hold is None:  # released, or its checkpoint expired and was removed
        if not has_cursor:
            return []
        return [
            "is not registered: nothing keeps its changes from the GC (its next pass "
            "registers it again)"
        ]
    if hold.expired or hold.wal_behind is None:
        return ["has an expired checkpoint: the GC may collect its changes before its next pass"]
    faults = []
    if hold.wal_behind > changes_delta.wal_behind_max:
        faults.append(f"keeps {hold.wal_behind} WAL SSTs (over {changes_delta.wal_behind_max})")
    left = _expires_in(hold, now_s)
    if left is not None and left < parse_duration(changes_delta.expiry_warn).total_seconds():
        faults.append(f"its checkpoint expires in {timedelta(seconds=int(left))}")
    return faults


def _expires_in(hold: ConsumerHold, now_s: float) -> float | None:
    """Seconds until ``hold``'s checkpoint expires (None: never)."""
    expire = hold.checkpoint.expire_time_s
    return None if expire is None else expire - now_s


def _check(
    passed: bool, description: str, severity: dg.AssetCheckSeverity, **metadata: Any
) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        passed=passed,
        severity=severity,
        description=markdown_literal(description),
        metadata=metadata,
    )


WARN, ERROR = dg.AssetCheckSeverity.WARN, dg.AssetCheckSeverity.ERROR


def _partition(context: dg.AssetCheckExecutionContext, what: str) -> str:
    if not context.has_partition_key:
        raise dg.Failure(description=f"This check is per {what}: launch it for one partition.")
    return str(context.partition_key)


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
    db = _partition(context, "database")
    consumer = changes_delta.consumer
    s = store.open()
    try:
        inspect_database(s, db)
    except DatabaseNotFound:
        return _check(False, f"{db}: no database at this path", WARN, database=db)
    cursor = _committed(changes_delta, db, table=False)
    feed = ChangeFeed(
        db,
        s,
        ChangesOptions(batch_rows=1, bootstrap=False),
        wal_url=store.wal_url,
        merge_operator=store.merge_operator,
    )
    if cursor is not None:
        gone = _collected(feed.changes(cursor), lambda _: True, changes_delta.max_rows)
        if gone is not None:
            return _check(
                False,
                f"{db}: consumer {consumer}: {gone}; rebuild the Delta table from a snapshot",
                ERROR,
                database=db,
                cursor=cursor,
            )
    hold = {h.name: h for h in feed.consumers()}.get(consumer)
    now_s = time.time()
    faults = _hold_faults(hold, cursor is not None, changes_delta, now_s)
    if hold is None:
        why = "; ".join(faults) or "not started yet"
        return _check(not faults, f"{db}: consumer {consumer} {why}", WARN, database=db)
    if hold.wal_behind is None or hold.expired:
        return _check(False, f"{db}: consumer {consumer} {faults[0]}", WARN, database=db)
    left = _expires_in(hold, now_s)
    meta = {
        "database": db,
        "wal_behind": dg.MetadataValue.int(hold.wal_behind),
        "wal_behind_max": dg.MetadataValue.int(changes_delta.wal_behind_max),
        "expires_in_s": dg.MetadataValue.int(int(left)) if left is not None else "never",
        "cursor": cursor or "none",
    }
    if faults:
        return _check(False, f"{db}: consumer {consumer} " + "; ".join(faults), WARN, **meta)
    return _check(True, f"{db}: consumer {consumer} keeps {hold.wal_behind} WAL SSTs", WARN, **meta)


@dg.asset_check(
    asset=changes_table_to_delta,
    partitions_def=tables_partitions,
    description=(
        "changes_consumer_retained per shard of the table. ERROR: the changes after the Delta "
        "table's table cursor were collected on a shard (the consumer fell behind the "
        "retention there). WARN: the table's consumer holds no checkpoint on some live shard "
        "while the Delta table has a cursor, or one of its shard checkpoints expired, keeps "
        "more than wal_behind_max WAL SSTs or expires within expiry_warn. The metadata names "
        "the shards at fault."
    ),
)
def changes_table_retained(
    context: dg.AssetCheckExecutionContext,
    store: ObjectStoreResource,
    changes_delta: ChangesToDeltaResource,
) -> dg.AssetCheckResult:
    path = _partition(context, "table")
    consumer = changes_delta.consumer
    opened = _open_table(store.open(), store, path)
    if not isinstance(opened, Table):
        return _check(False, f"{path}: {opened}", WARN, table=path)
    with opened as table:
        cursor = _committed(changes_delta, path, table=True)
        live = {s.db_path for s in table.shards}
        if cursor is not None:
            seen: set[str] = set()

            def every_shard_reached(batch: Any) -> bool:
                seen.add(batch.db_path)
                return live <= seen

            # unregistered: it moves no hold (a registered read would move every shard's)
            probe = table.changes(cursor, ChangesOptions(batch_rows=changes_delta.batch_rows))
            gone = _collected(probe, every_shard_reached, changes_delta.max_rows)
            if gone is not None:
                at_fault = [gone.db_path] if gone.db_path != path else []
                return _check(
                    False,
                    f"{path}: consumer {consumer}: {gone}; rebuild the Delta table from a snapshot",
                    ERROR,
                    table=path,
                    cursor=cursor,
                    shards_at_fault=dg.MetadataValue.json(at_fault),
                )
        holds = table.changes_consumers(consumer)
    now_s = time.time()
    faults = {
        p: _hold_faults(h, cursor is not None, changes_delta, now_s) for p, h in holds.items()
    }
    at_fault = [p for p, f in faults.items() if f]
    behind = [h.wal_behind for h in holds.values() if h is not None and h.wal_behind is not None]
    lefts = [_expires_in(h, now_s) for h in holds.values() if h is not None]
    soonest = min((x for x in lefts if x is not None), default=None)
    meta = {
        "table": path,
        "shards": dg.MetadataValue.int(len(holds)),
        "shards_at_fault": dg.MetadataValue.json(at_fault),
        "wal_behind": dg.MetadataValue.int(max(behind, default=0)),
        "wal_behind_max": dg.MetadataValue.int(changes_delta.wal_behind_max),
        "expires_in_s": dg.MetadataValue.int(int(soonest)) if soonest is not None else "never",
        "cursor": cursor or "none",
    }
    if at_fault:
        why = "; ".join(f"on shard {p} " + ", ".join(faults[p]) for p in at_fault)
        return _check(False, f"{path}: consumer {consumer} {why}", WARN, **meta)
    if cursor is None and not any(holds.values()):
        return _check(True, f"{path}: consumer {consumer} not started yet", WARN, **meta)
    return _check(
        True,
        f"{path}: consumer {consumer} holds its {len(holds)} shards, keeping at most "
        f"{max(behind, default=0)} WAL SSTs on one",
        WARN,
        **meta,
    )


CHANGES_ASSETS = [changes_to_delta, changes_table_to_delta]
CHANGES_CHECKS = [changes_consumer_retained, changes_table_retained]

changes_to_delta_job = dg.define_asset_job(
    "changes_to_delta_job",
    selection=dg.AssetSelection.assets(changes_to_delta),  # with its check: after the pass
    executor_def=dg.in_process_executor,  # one step: no second process (orchestration.jobs)
    description="One changes_to_delta pass for one database partition, then its check.",
)
changes_table_to_delta_job = dg.define_asset_job(
    "changes_table_to_delta_job",
    selection=dg.AssetSelection.assets(changes_table_to_delta),  # with its check, as above
    executor_def=dg.in_process_executor,
    description="One changes_table_to_delta pass for one table partition, then its check.",
)
CHANGES_JOBS = [changes_to_delta_job, changes_table_to_delta_job]
