"""The row model: everything SlateDB stores per row, as every read and rewrite carries it.

A SlateDB row (row codec v2, docs/format.md "SSTs and WAL SSTs") is a key, a seq, a kind (a value,
a tombstone or a merge operand, SlateDB RFC 0006), the value bytes, and two optional timestamps:
``expire_ts`` (SlateDB RFC 0003: the row reads as a tombstone from that clock tick on) and
``create_ts``. In Arrow the rows are one of two schemas:

* ``ENTRY_SCHEMA`` (key, seq, kind, value): no row of the batch carries a timestamp. This is the
  fast path every TTL-less database stays on; nothing here costs it a column.
* ``ROW_SCHEMA``: the same four columns plus ``expire_ts`` and ``create_ts`` (int64 ms, null where
  a row has none).

Whoever receives a ``ROW_SCHEMA`` batch carries the two columns through (``filter``, ``take`` and
``slice`` do; concatenation goes through :func:`concat_rows`, which widens a mix). Outside Arrow,
one version of a key is a :class:`Version`; a memtable entry is the plain ``(seq, value)`` pair
(value ``None`` for a tombstone) unless the row has a timestamp or is a merge operand, when it is a
``Version`` (a 5-tuple), so ``len(entry) == 2`` tells the hot path it has nothing to resolve.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core.sst.format import (
    ENTRY_SCHEMA,
    KIND_MERGE,
    KIND_TOMBSTONE,
    KIND_VALUE,
    ROW_SCHEMA,
)

__all__ = [
    "ENTRY_SCHEMA",
    "KIND_MERGE",
    "KIND_TOMBSTONE",
    "KIND_VALUE",
    "ROW_SCHEMA",
    "TIMESTAMP_COLUMNS",
    "Version",
    "concat_rows",
    "expired_mask",
    "has_merges",
    "has_timestamps",
    "is_expired",
    "narrow",
    "now_ms",
    "version_at",
    "widen",
]

TIMESTAMP_COLUMNS = ("expire_ts", "create_ts")


class Version(NamedTuple):
    """One version of a key outside Arrow: a memtable entry with a timestamp or an operand, or
    what a point lookup found. ``value`` is None for a tombstone."""

    seq: int
    kind: int
    value: bytes | None
    expire_ts: int | None
    create_ts: int | None


def now_ms() -> int:
    """SlateDB's default clock (RFC 0003): wall-clock milliseconds since the Unix epoch. A TTL of
    ``t`` ms written at ``now`` stores ``expire_ts = now + t``."""
    return time.time_ns() // 1_000_000


def has_timestamps(batch: pa.RecordBatch | pa.Table) -> bool:
    """Whether ``batch`` is in ``ROW_SCHEMA`` (it may still hold only null timestamps)."""
    return bool(batch.schema.get_field_index("expire_ts") >= 0)


def has_merges(batch: pa.RecordBatch | pa.Table) -> bool:
    """Whether any row of ``batch`` is a merge operand (one vectorised pass over ``kind``)."""
    if batch.num_rows == 0:
        return False
    kinds = batch.column(2)
    return bool(pc.any(pc.equal(kinds, KIND_MERGE)).as_py())


def widen(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` in ``ROW_SCHEMA``: null timestamps added to an ``ENTRY_SCHEMA`` batch."""
    if has_timestamps(batch):
        return batch
    nulls = pa.nulls(batch.num_rows, pa.int64())
    return pa.RecordBatch.from_arrays([*batch.columns[:4], nulls, nulls], schema=ROW_SCHEMA)


def narrow(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` back in ``ENTRY_SCHEMA`` when no row has a timestamp (the fast path again)."""
    if not has_timestamps(batch):
        return batch
    n = batch.num_rows
    if batch.column(4).null_count == n and batch.column(5).null_count == n:
        return pa.RecordBatch.from_arrays(batch.columns[:4], schema=ENTRY_SCHEMA)
    return batch


def concat_rows(batches: Sequence[pa.RecordBatch]) -> pa.RecordBatch:
    """One batch of ``batches`` in order; ``ROW_SCHEMA`` when any of them is (the others widened),
    ``ENTRY_SCHEMA`` otherwise."""
    if not batches:
        return _empty(ENTRY_SCHEMA)
    if len(batches) == 1:
        return batches[0]
    if any(has_timestamps(b) for b in batches):
        return pa.concat_batches([widen(b) for b in batches])
    return pa.concat_batches(list(batches))


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)


def is_expired(expire_ts: int | None, now: int) -> bool:
    """SlateDB's test: a row expires at its ``expire_ts`` (``expire_ts <= now`` is expired)."""
    return expire_ts is not None and expire_ts <= now


def expired_mask(batch: pa.RecordBatch, now: int) -> npt.NDArray[np.bool_]:
    """True for each row of ``batch`` expired at ``now`` (all False for an ``ENTRY_SCHEMA``
    batch, without touching its columns)."""
    n = batch.num_rows
    if not has_timestamps(batch) or batch.column(4).null_count == n:
        return np.zeros(n, dtype=np.bool_)
    expire = batch.column(4)
    mask = pc.fill_null(pc.less_equal(expire, pa.scalar(now, pa.int64())), False)
    out: npt.NDArray[np.bool_] = mask.to_numpy(zero_copy_only=False)
    return out


def version_at(batch: pa.RecordBatch, i: int) -> Version:
    """Row ``i`` of ``batch`` as a :class:`Version` (a tombstone's value is None)."""
    kind = int(batch.column(2)[i].as_py())
    value = None if kind == KIND_TOMBSTONE else (batch.column(3)[i].as_py() or b"")
    if has_timestamps(batch):
        expire, create = batch.column(4)[i].as_py(), batch.column(5)[i].as_py()
    else:
        expire = create = None
    return Version(int(batch.column(1)[i].as_py()), kind, value, expire, create)
