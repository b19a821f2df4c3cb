"""Time-to-live of a write: how a put's or merge's ``ttl=`` becomes its row's ``expire_ts``
(SlateDB RFC 0003, SlateDB's ``Ttl`` and ``PutOptions``/``MergeOptions``).

SlateDB's three policies, spelled for Python:

* ``ttl=None``: the database's default, ``DbOptions.default_ttl`` (SlateDB's ``Ttl::Default``);
  no expiry when that is None too;
* ``ttl=NO_EXPIRY``: the row never expires, whatever the default (``Ttl::NoExpiry``);
* ``ttl=<int ms>`` or a ``timedelta``: the row expires that long after the write
  (``Ttl::ExpireAfterMillis``): ``expire_ts = now + ttl`` in ms since the epoch, ``now`` being
  the writer's clock at the write (:func:`~slatedb_core.lsm.row_model.now_ms`). As in SlateDB, a
  sum past what an i64 holds means no expiry.

A delete never carries an expiry. SlateDB 0.17 reads a row whose ``expire_ts`` has passed as it
was written; its memtable flush and its compactions turn it into a tombstone (a value) or drop it
(a merge operand): :mod:`slatedb_core.writer.l0_flush` does the same at our flush.
"""

from __future__ import annotations

import enum
from datetime import timedelta
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core.errors import InvalidArgument
from slatedb_core.lsm.row_model import KIND_TOMBSTONE

MAX_TTL_MS: Final = 2**63 - 1
"""The longest TTL (SlateDB takes a u64 and treats one past i64 as no expiry; we refuse it)."""


class NoExpiry(enum.Enum):
    """The type of :data:`NO_EXPIRY`."""

    NO_EXPIRY = "no_expiry"

    def __repr__(self) -> str:
        return "NO_EXPIRY"


NO_EXPIRY: Final = NoExpiry.NO_EXPIRY
"""``ttl=NO_EXPIRY``: the row never expires, even in a database with a ``default_ttl``."""

Ttl = int | timedelta | NoExpiry | None
"""What ``ttl=`` accepts: None (the database default), NO_EXPIRY, ms or a timedelta."""


def check_ttl(name: str, ttl: object) -> int | NoExpiry | None:
    """``ttl`` as None, NO_EXPIRY or a number of ms in ``0..MAX_TTL_MS``; else InvalidArgument."""
    if ttl is None or ttl is NO_EXPIRY:
        return ttl
    if isinstance(ttl, timedelta):
        if ttl < timedelta(0):
            raise InvalidArgument(f"{name} must not be negative, got {ttl}")
        return check_ttl(name, ttl // timedelta(milliseconds=1))
    if isinstance(ttl, bool) or not isinstance(ttl, int):
        raise InvalidArgument(
            f"{name} must be milliseconds (int), a timedelta, NO_EXPIRY or None, "
            f"got {type(ttl).__name__}"
        )
    if not 0 <= ttl <= MAX_TTL_MS:
        raise InvalidArgument(f"{name} must be in 0..{MAX_TTL_MS} ms, got {ttl}")
    return int(ttl)


def expire_ts(ttl: int | NoExpiry | None, default_ttl: int | None, now: int) -> int | None:
    """The ``expire_ts`` of a row written at ``now`` with a checked ``ttl`` (SlateDB's
    ``expire_ts_from``): None when it never expires."""
    if ttl is NO_EXPIRY:
        return None
    ms = default_ttl if ttl is None else ttl
    if ms is None:
        return None
    at = now + ms
    return None if at > MAX_TTL_MS else at


def is_plain(ttl: object, default_ttl: int | None) -> bool:
    """Whether a put with ``ttl`` stores no timestamp at all (the fast path): no TTL given and
    no default, or NO_EXPIRY."""
    return ttl is NO_EXPIRY or (ttl is None and default_ttl is None)


__all__ = [
    "MAX_TTL_MS",
    "NO_EXPIRY",
    "NoExpiry",
    "Ttl",
    "check_ttl",
    "expire_ts",
    "is_plain",
    "timestamp_columns",
]


def timestamp_columns(
    data: pa.Table | pa.RecordBatch,
    kinds: pa.Array,
    ttl_column: str | None,
    ttl: int | NoExpiry | None,
    default_ttl: int | None,
    now: int,
) -> tuple[pa.Array, pa.Array]:
    """``expire_ts`` and ``create_ts`` of ``put_arrow``'s rows written at ``now``: each row's
    TTL is its ``ttl_column`` value (ms, an integer column; null: ``ttl``), else ``ttl``. Deletes
    (``kinds`` 1) never expire; every row is created at ``now``, as SlateDB stamps each row.
    Checked before anything is written: a column that is missing, not integers, or outside
    ``0..MAX_TTL_MS`` is InvalidArgument."""
    n = len(kinds)
    fixed = expire_ts(ttl, default_ttl, now)
    if ttl_column is None:
        expire = pa.nulls(n, pa.int64()) if fixed is None else pa.array(np.full(n, fixed, np.int64))
    else:
        idx = data.schema.get_field_index(ttl_column)
        if idx < 0:
            raise InvalidArgument(f"no column {ttl_column!r} in {data.schema.names}")
        col = data.column(idx)
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        if not pa.types.is_integer(col.type):
            raise InvalidArgument(
                f"ttl column {ttl_column!r} must hold integers (ms), got {col.type}"
            )
        mm = pc.min_max(col)
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        if lo is not None and (lo < 0 or hi > MAX_TTL_MS):
            raise InvalidArgument(
                f"ttl column {ttl_column!r} must be in 0..{MAX_TTL_MS} ms, got {lo}..{hi}"
            )
        ms = col.cast(pa.int64())
        # now + ttl past what an i64 holds means no expiry (SlateDB's checked add)
        room = pa.scalar(MAX_TTL_MS - now, pa.int64())
        at = pc.if_else(pc.greater(ms, room), pa.scalar(None, pa.int64()), pc.add(ms, now))
        fill = pa.scalar(fixed, pa.int64())
        expire = pc.if_else(pc.is_null(ms), fill, at)
    expire = pc.if_else(pc.equal(kinds, KIND_TOMBSTONE), pa.scalar(None, pa.int64()), expire)
    return expire, pa.array(np.full(n, now, np.int64))
