"""The rows of a change feed: one Arrow row per committed change, in commit (seq) order.

``CHANGE_SCHEMA``:

* ``key`` (binary), ``value`` (binary; null for a delete),
* ``op``: ``"put"``, ``"delete"`` or ``"merge"`` (a merge operand, delivered as written: SlateDB
  RFC 0019 leaves folding to the consumer, who knows the operator; RFC 0006),
* ``seq`` (uint64): the commit order. SlateDB commits a write batch as one seq, so its rows
  share it (a batch of changes never ends inside one seq); our writer gives each row its own,
* ``create_ts`` and ``expire_ts`` (int64 ms, null where the row has none): the timestamps
  SlateDB stores per row (RFC 0003). A row whose ``expire_ts`` has passed is still delivered
  (SlateDB applies a TTL only when compaction rewrites rows; its expiry is no event, RFC 0019),
* ``wal_id`` (uint64): the WAL SST the change came from; null in a snapshot row,
* ``snapshot`` (bool): the row is part of the snapshot that bootstraps a feed whose WAL was
  collected (docs/changes.md): the newest value of a live key at the snapshot's seq, in key
  order, its ``seq`` the version's own; every row after the snapshot has ``snapshot`` false.

Converting WAL rows is a few vectorised kernels (no per-row Python).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core.feed.cursor import Cursor
from slatedb_core.lsm.row_model import KIND_MERGE, KIND_TOMBSTONE, KIND_VALUE, has_timestamps

CHANGE_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary(), nullable=False),
        pa.field("value", pa.binary()),
        pa.field("op", pa.string(), nullable=False),
        pa.field("seq", pa.uint64(), nullable=False),
        pa.field("create_ts", pa.int64()),
        pa.field("expire_ts", pa.int64()),
        pa.field("wal_id", pa.uint64()),
        pa.field("snapshot", pa.bool_(), nullable=False),
    ]
)
"""The columns of every change batch (see the module docstring)."""

OPS = ("put", "delete", "merge")
"""``op`` by SlateDB row kind: KIND_VALUE, KIND_TOMBSTONE, KIND_MERGE, in that order."""
assert (KIND_VALUE, KIND_TOMBSTONE, KIND_MERGE) == (0, 1, 2)


def change_rows(
    rows: pa.RecordBatch, *, wal_id: int | None = None, snapshot: bool = False
) -> pa.RecordBatch:
    """``rows`` (ENTRY_SCHEMA or ROW_SCHEMA, any order kept) as a ``CHANGE_SCHEMA`` batch: from
    WAL SST ``wal_id``, or snapshot rows when ``snapshot``."""
    n = rows.num_rows
    kind = rows.column(2)
    op = pc.take(pa.array(OPS, pa.string()), kind)
    value = rows.column(3)
    tomb = pc.equal(kind, pa.scalar(KIND_TOMBSTONE, pa.uint8()))
    if n and kind.null_count == 0 and pc.any(tomb).as_py():
        value = pc.if_else(tomb, pa.scalar(None, pa.binary()), value)
    if has_timestamps(rows):
        expire, create = rows.column(4), rows.column(5)
    else:
        expire = create = pa.nulls(n, pa.int64())
    where = (
        pa.nulls(n, pa.uint64())
        if wal_id is None
        else pa.array(np.full(n, wal_id, dtype=np.uint64), pa.uint64())
    )
    flag = pa.array(np.full(n, snapshot, dtype=np.bool_), pa.bool_())
    return pa.RecordBatch.from_arrays(
        [rows.column(0), value, op, rows.column(1), create, expire, where, flag],
        schema=CHANGE_SCHEMA,
    )


def empty_changes() -> pa.RecordBatch:
    """A change batch with no rows (what a batch that only moves the cursor carries)."""
    return pa.RecordBatch.from_arrays(
        [pa.array([], f.type) for f in CHANGE_SCHEMA], schema=CHANGE_SCHEMA
    )


def delivered_by(rows: pa.RecordBatch, end: Cursor) -> pa.Array:
    """Which of ``rows`` (``CHANGE_SCHEMA``) the cursor ``end`` has delivered: a WAL row
    ``(w, s)`` when ``w`` is below ``end.wal_id``, or is it and ``s`` is at or below
    ``end.seq``; an ingested row (no ``wal_id``, docs/changes.md "Ingested rows") when its seq
    is at or below ``end.seq`` (an ingest committed before a tail is at or below its
    ``last_l0_seq``, one after it above it, even one below a WAL row the tail covers: an ingest
    in flight when the tail was taken); a snapshot row always
    (it precedes the WAL). Vectorised."""
    wal, seq, snap = rows.column(6), rows.column(3), rows.column(7)
    at_or_below = pc.less_equal(seq, pa.scalar(end.seq, pa.uint64()))
    wal_rule = pc.or_(
        pc.less(wal, pa.scalar(end.wal_id, pa.uint64())),
        pc.and_(pc.equal(wal, pa.scalar(end.wal_id, pa.uint64())), at_or_below),
    )
    return pc.if_else(pc.is_null(wal), pc.or_(snap, at_or_below), wal_rule)


def delivered_rows(rows: pa.RecordBatch, end: Cursor) -> pa.RecordBatch:
    """The rows of a batch of a read up to ``end`` that ``end`` has delivered
    (:func:`delivered_by`), for every batch of the read, not only the one whose cursor crosses
    ``end``: an ingest in flight when ``end`` was taken (``tail()``) commits after it with seqs
    below a WAL row ``end`` covers, so its rows come before that row, in a batch whose cursor is
    still short of ``end``; the read after ``end`` delivers them (review43)."""
    if not rows.num_rows:
        return rows
    keep = delivered_by(rows, end)
    return rows if pc.all(keep).as_py() else rows.filter(keep)


__all__ = [
    "CHANGE_SCHEMA",
    "OPS",
    "change_rows",
    "delivered_by",
    "delivered_rows",
    "empty_changes",
]
