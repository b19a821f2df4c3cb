"""Applying a database's change feed to a Delta table, exactly once: each pass reads the changes
after the cursor the Delta table's last commit recorded and merges them by key in one Delta
commit that records the new cursor (issue 43, item 4; docs/changes.md is the feed).

The cursor lives only in that commit's ``custom_metadata`` (``slatedb.changes.cursor``), so the
Delta version and the position in the feed are one atomic fact: a pass that dies before the
commit applied nothing and its rerun starts from the same cursor; one that dies after it left the
cursor with the rows, and its rerun starts after them. Nothing else (the materialization's
metadata, the consumer's checkpoint) is read back as the position.

The feed is read as a registered consumer (``ChangesOptions.consumer``, docs/changes.md
"Retention"): its checkpoint keeps the changes the Delta table has not received through GC, and
it moves forward when the next pass resumes from the committed cursor (or right after the
commit, :meth:`ChangeFeed.advance`). Each commit also carries a Delta application transaction
(``slatedb-changes:<consumer>``, its version one more than the last one's): a concurrent pass of
the same consumer fails its commit on the conflict instead of applying the same changes twice.

Merge by key: a key's last change in the pass decides (put: upsert, delete: delete). Merge
operands (SlateDB RFC 0006) are folded with the database's merge operator onto the key's value
before the pass, which is the Delta table's (it holds exactly the changes up to the cursor); with
no operator configured the pass fails (``InvalidArgument`` naming the setting) and commits
nothing.
A database without operands pays one ``any`` over the ``op`` column for this.

A sharded table's feed (``Table.changes``, :func:`apply_table_changes`) is applied the same
way: its cursor is a table cursor, recorded under the same key, and ``slatedb.table`` names the
table where ``slatedb.database`` names a database.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core import ObjectStore
from slatedb_core.errors import InvalidArgument, MergeOperatorFailed
from slatedb_core.feed import ChangeFeed, ChangesOptions
from slatedb_core.merge_operators import MergeOperator, resolve_merge_operator
from slatedb_core.table import Table

CURSOR_KEY = "slatedb.changes.cursor"
"""The commit metadata key of the cursor after the changes a commit applied."""
DATABASE_KEY = "slatedb.database"
"""The commit metadata key naming the database whose changes the table receives."""
CONSUMER_KEY = "slatedb.changes.consumer"
"""The commit metadata key naming the registered consumer the changes were read as."""
TABLE_KEY = "slatedb.table"
"""The commit metadata key naming the sharded table whose changes the table receives (its
cursor is then a table cursor, ``slatedb_core.table.changes.TableCursor``)."""
_KINDS = {DATABASE_KEY: "database", TABLE_KEY: "table"}

DELTA_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary(), nullable=False),
        pa.field("value", pa.binary()),
        pa.field("seq", pa.int64()),
        pa.field("create_ts", pa.int64()),
        pa.field("expire_ts", pa.int64()),
    ]
)
"""The Delta table's columns: a key's latest value, the seq that wrote it and its timestamps
(SlateDB RFC 0003; null where the row has none). Seqs stay below 2**63."""


@dataclass(frozen=True)
class Committed:
    """What the Delta table's newest commit of this feed recorded (None fields: no commit yet)."""

    cursor: str | None
    version: int | None
    txn_version: int
    table: Any = None
    """The ``DeltaTable`` at the version read (None: no table): the pass commits on top of it,
    so a commit made meanwhile (a concurrent pass) fails this one's (a conflict on the data it
    read, and on the consumer's application transaction) instead of applying changes twice."""


@dataclass(frozen=True)
class ChangesApplied:
    """What one pass applied: the changes read and what they became in Delta."""

    uri: str
    since: str | None
    cursor: str | None
    """The cursor the commit recorded (``since`` when nothing was committed)."""
    changes: int
    upserts: int
    deletes: int
    merge_operands: int
    snapshot_rows: int
    version: int | None
    """The Delta version committed, None when the pass committed nothing."""


def app_id(consumer: str) -> str:
    """The Delta application transaction id of ``consumer``'s commits."""
    return f"slatedb-changes:{consumer}"


def committed_cursor(
    uri: str, db: str, consumer: str, *, source_key: str = DATABASE_KEY
) -> Committed:
    """The cursor the Delta table at ``uri`` last recorded for ``db`` (its newest commit that
    carries one); ``InvalidArgument`` when that commit names another database or consumer, or
    when the table has rows and no commit recorded a cursor. ``source_key``: the commit
    metadata key naming the source (``TABLE_KEY`` for a sharded table's feed)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(uri)
    except TableNotFoundError:
        return Committed(None, None, 0)
    txn = table.transaction_version(app_id(consumer)) or 0
    for commit in _newest_first(table):
        cursor = commit.get(CURSOR_KEY)
        if cursor is None:
            continue  # another writer's commit (OPTIMIZE, VACUUM): not ours
        if commit.get(source_key) != db or commit.get(CONSUMER_KEY) != consumer:
            kind = "table" if commit.get(TABLE_KEY) is not None else "database"
            source = commit.get(TABLE_KEY, commit.get(DATABASE_KEY))
            raise InvalidArgument(
                f"the Delta table {uri} receives the changes of {kind} "
                f"{source!r} (consumer {commit.get(CONSUMER_KEY)!r}), "
                f"not {_KINDS[source_key]} {db!r} (consumer {consumer!r})"
            )
        return Committed(str(cursor), int(commit["version"]), txn, table)
    if table.to_pyarrow_dataset().count_rows():
        # rows no commit of a feed recorded: merging the changes from the start into them
        # would keep every key deleted before that start
        raise InvalidArgument(
            f"the Delta table {uri} has rows but no cursor in its log (another writer's table, "
            "or log cleanup removed the commits that recorded it): give the feed a new table"
        )
    return Committed(None, table.version(), txn, table)


def _newest_first(table: Any) -> Iterator[dict[str, Any]]:
    """The commits of ``table``'s log, newest first, read in growing pages (a pass usually
    finds its cursor in the newest commit)."""
    seen = 0
    for limit in (16, 1024, None):
        page = table.history(limit)
        yield from page[seen:]
        if limit is None or len(page) < limit:
            return
        seen = len(page)


def net_changes(
    changes: pa.Table,
    merge_operator: MergeOperator | None,
    existing: Callable[[list[bytes]], dict[bytes, bytes]],
) -> tuple[pa.Table, pa.Array]:
    """``changes`` (CHANGE_SCHEMA rows in commit order) reduced to each key's effect: the rows
    to upsert (``DELTA_SCHEMA``) and the keys to delete. ``existing(keys)``: the values of
    ``keys`` before these changes (read only for keys whose first change here is an operand)."""
    n = changes.num_rows
    if n == 0:
        return DELTA_SCHEMA.empty_table(), pa.array([], pa.binary())
    op = changes.column("op")
    operands = pc.equal(op, "merge")
    if pc.any(operands).as_py():
        if merge_operator is None:
            raise InvalidArgument(
                f"{pc.sum(operands).as_py()} merge operands among the changes and no merge "
                "operator is configured (set the store resource's merge_operator)"
            )
        folded = pc.unique(pc.filter(changes.column("key"), operands))
        plain = changes.filter(pc.invert(pc.is_in(changes.column("key"), folded)))
        upserts, deletes = _last_per_key(plain)
        f_up, f_del = _fold(
            changes.filter(pc.is_in(changes.column("key"), folded)), merge_operator, existing
        )
        return pa.concat_tables([upserts, f_up]), pa.concat_arrays([deletes, f_del])
    return _last_per_key(changes)


def _last_per_key(changes: pa.Table) -> tuple[pa.Table, pa.Array]:
    """Each key's last row (no operands among them), vectorised: upserts and deleted keys."""
    if changes.num_rows == 0:
        return DELTA_SCHEMA.empty_table(), pa.array([], pa.binary())
    order = pa.array(np.arange(changes.num_rows, dtype=np.int64))
    last = (
        pa.table({"key": changes.column("key"), "i": order})
        .group_by("key", use_threads=False)
        .aggregate([("i", "max")])
        .column("i_max")
    )
    rows = changes.take(last)
    deleted = pc.equal(rows.column("op"), "delete")
    return _delta_rows(rows.filter(pc.invert(deleted))), rows.filter(deleted).column(
        "key"
    ).combine_chunks()


def _fold(
    changes: pa.Table,
    op: MergeOperator,
    existing: Callable[[list[bytes]], dict[bytes, bytes]],
) -> tuple[pa.Table, pa.Array]:
    """The keys with operands, folded in commit order (a per-row loop, only over them)."""
    rows = changes.to_pylist()
    first: dict[bytes, str] = {}
    for r in rows:
        first.setdefault(r["key"], r["op"])
    base = existing([k for k, o in first.items() if o == "merge"])
    state: dict[bytes, dict[str, object] | None] = {}
    for r in rows:
        key = r["key"]
        if r["op"] == "put":
            state[key] = r
        elif r["op"] == "delete":
            state[key] = None
        else:
            before = state[key] if key in state else {"value": base.get(key)}
            prior = None if before is None else before["value"]
            assert prior is None or isinstance(prior, bytes)
            try:
                value = op(key, prior, r["value"])
            except Exception as e:  # the application's code (RFC 0006): name the key
                raise MergeOperatorFailed(key, e) from e
            state[key] = {**r, "value": bytes(value)}
    puts = [r for r in state.values() if r is not None]
    gone = [k for k, r in state.items() if r is None]
    table = pa.Table.from_pylist(
        [{f.name: r[f.name] for f in DELTA_SCHEMA} for r in puts], schema=DELTA_SCHEMA
    )
    return table, pa.array(gone, pa.binary())


def _delta_rows(rows: pa.Table) -> pa.Table:
    return pa.table(
        [
            rows.column("key"),
            rows.column("value"),
            pc.cast(rows.column("seq"), pa.int64()),
            rows.column("create_ts"),
            rows.column("expire_ts"),
        ],
        schema=DELTA_SCHEMA,
    )


def _read_changes(it: Iterator[Any], max_rows: int) -> tuple[pa.Table, str | None]:
    """The batches of ``it`` (a database's or a table's feed: ``rows`` in ``CHANGE_SCHEMA``
    and a ``cursor``), whole, until ``max_rows`` or its end, and the encoded cursor after them
    (None: no batch)."""
    from slatedb_core.feed import CHANGE_SCHEMA

    batches: list[pa.RecordBatch] = []
    cursor: str | None = None
    n = 0
    try:
        for b in it:
            batches.append(b.rows)
            cursor = b.cursor.encode()
            n += b.rows.num_rows
            if n >= max_rows:
                break
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
    return pa.Table.from_batches(batches, schema=CHANGE_SCHEMA), cursor


def apply_changes(
    store: ObjectStore,
    db: str,
    uri: str,
    *,
    consumer: str,
    options: ChangesOptions | None = None,
    wal_url: str | None = None,
    merge_operator: str | MergeOperator | None = None,
    max_rows: int = 1_000_000,
    before_commit: Callable[[], None] | None = None,
    after_commit: Callable[[ChangesApplied], None] | None = None,
) -> ChangesApplied:
    """Apply the changes of ``db`` after the cursor the Delta table at ``uri`` recorded, in one
    Delta commit recording the new cursor (see the module docstring). ``options``: the feed's
    (its ``consumer`` is set to ``consumer``); ``after_commit``: called once the commit is
    durable, before the consumer's checkpoint is moved (a test's crash point); ``before_commit``:
    called just before the commit (a test's point for a concurrent pass)."""
    import dataclasses

    opts = dataclasses.replace(options or ChangesOptions(), consumer=consumer)
    op = resolve_merge_operator(merge_operator)
    feed = ChangeFeed(db, store, opts, wal_url=wal_url, merge_operator=op)
    return _apply(
        db,
        uri,
        DATABASE_KEY,
        consumer,
        lambda since: feed.changes(since),
        op,
        max_rows,
        before_commit,
        after_commit,
        # the GC may collect what the commit made unneeded, sooner
        advance=feed.advance,
    )


def apply_table_changes(
    table: Table,
    uri: str,
    *,
    consumer: str,
    options: ChangesOptions | None = None,
    merge_operator: str | MergeOperator | None = None,
    max_rows: int = 1_000_000,
    before_commit: Callable[[], None] | None = None,
    after_commit: Callable[[ChangesApplied], None] | None = None,
) -> ChangesApplied:
    """:func:`apply_changes` for the sharded table ``table`` (open): its combined feed
    (``Table.changes``, docs/changes.md "Tables"), the cursor a ``TableCursor`` recorded in
    the Delta commit with ``TABLE_KEY`` naming the table. The consumer is registered in each
    live shard; its checkpoints move to the committed cursor once the Delta commit is made
    (``Table.changes_advance``), as the database pass's do."""
    import dataclasses

    opts = dataclasses.replace(options or ChangesOptions(), consumer=consumer)
    op = resolve_merge_operator(merge_operator)
    return _apply(
        table.path,
        uri,
        TABLE_KEY,
        consumer,
        lambda since: table.changes(since, opts),
        op,
        max_rows,
        before_commit,
        after_commit,
        advance=lambda cursor: table.changes_advance(cursor, opts),
    )


def _apply(
    source: str,
    uri: str,
    source_key: str,
    consumer: str,
    read: Callable[[str | None], Iterator[Any]],
    op: MergeOperator | None,
    max_rows: int,
    before_commit: Callable[[], None] | None,
    after_commit: Callable[[ChangesApplied], None] | None,
    *,
    advance: Callable[[str], object] | None,
) -> ChangesApplied:
    """One pass of :func:`apply_changes` / :func:`apply_table_changes`: ``read(since)`` is the
    source's feed after the cursor the Delta table recorded."""
    from deltalake import CommitProperties, Transaction, write_deltalake

    done = committed_cursor(uri, source, consumer, source_key=source_key)
    changes, cursor = _read_changes(read(done.cursor), max_rows)
    if cursor is None or cursor == done.cursor:
        return ChangesApplied(uri, done.cursor, done.cursor, 0, 0, 0, 0, 0, None)

    def existing(keys: list[bytes]) -> dict[bytes, bytes]:
        if not keys or done.version is None:
            return {}
        found = done.table.to_pyarrow_dataset().to_table(
            columns=["key", "value"], filter=pc.field("key").isin(keys)
        )
        return dict(
            zip(found.column("key").to_pylist(), found.column("value").to_pylist(), strict=True)
        )

    upserts, deletes = net_changes(changes, op, existing)
    metadata = {CURSOR_KEY: cursor, source_key: source, CONSUMER_KEY: consumer}
    props = CommitProperties(
        custom_metadata=metadata,
        app_transactions=[Transaction(app_id(consumer), done.txn_version + 1)],
    )
    if before_commit is not None:
        before_commit()
    if done.version is None:  # the first commit creates the table (deletes have no target)
        write_deltalake(uri, upserts, mode="error", commit_properties=props)
    elif upserts.num_rows == 0 and len(deletes) == 0:
        # the cursor moved past changes without rows (a writer's fencing WAL SSTs): an empty
        # append still commits it (a merge of no rows commits nothing)
        write_deltalake(done.table, upserts, mode="append", commit_properties=props)
    else:
        source_rows = upserts.append_column(
            "_delete", pa.array(np.zeros(upserts.num_rows, dtype=np.bool_))
        )
        gone = pa.table(
            {f.name: pa.nulls(len(deletes), f.type) for f in DELTA_SCHEMA}, schema=DELTA_SCHEMA
        ).set_column(0, "key", deletes.cast(pa.binary()))
        gone = gone.append_column("_delete", pa.array(np.ones(len(deletes), dtype=np.bool_)))
        (
            done.table.merge(
                pa.concat_tables([source_rows, gone.cast(source_rows.schema)]),
                "t.key = s.key",
                source_alias="s",
                target_alias="t",
                commit_properties=props,
            )
            .when_matched_delete(predicate="s._delete")
            .when_matched_update_all(predicate="NOT s._delete", except_cols=["_delete"])
            .when_not_matched_insert_all(predicate="NOT s._delete", except_cols=["_delete"])
            .execute()
        )
    recorded = committed_cursor(uri, source, consumer, source_key=source_key)
    if recorded.cursor != cursor or recorded.version is None:
        # nothing moves past what the Delta table recorded (the consumer's checkpoint least of
        # all): the next pass resumes from the table's cursor, which must stay retained
        raise InvalidArgument(
            f"the Delta table {uri} recorded cursor {recorded.cursor}, not {cursor}: "
            "another writer committed to it meanwhile"
        )
    ops = changes.column("op")
    applied = ChangesApplied(
        uri=uri,
        since=done.cursor,
        cursor=cursor,
        changes=changes.num_rows,
        upserts=upserts.num_rows,
        deletes=len(deletes),
        merge_operands=pc.sum(pc.equal(ops, "merge")).as_py() or 0,
        snapshot_rows=pc.sum(changes.column("snapshot")).as_py() or 0,
        version=recorded.version,
    )
    if after_commit is not None:
        after_commit(applied)
    if advance is not None:
        advance(cursor)
    return applied


__all__ = [
    "CONSUMER_KEY",
    "CURSOR_KEY",
    "DATABASE_KEY",
    "DELTA_SCHEMA",
    "TABLE_KEY",
    "ChangesApplied",
    "Committed",
    "app_id",
    "apply_changes",
    "apply_table_changes",
    "committed_cursor",
    "net_changes",
]
