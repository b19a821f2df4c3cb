"""What a rewrite may drop: SlateDB 0.17's retention of versions, TTLs and merge operands.

A compaction reads every version of every key (newest first per key) and writes only those some
reader may still need. SlateDB's compactor decides that in two steps, and so does
:func:`retain`, with the same inputs (``compactor_executor.rs``, ``load_iterators``):

1. **Merge operands** (RFC 0006, ``MergeOperatorIterator`` in compaction mode): an operand whose
   seq is above the snapshot barrier (``retention_min_seq``) is kept as it is (a snapshot may read
   the key below it); from the first operand at or below the barrier on, the operands of the key
   that share its ``expire_ts`` are folded, oldest first, onto the first value or tombstone that
   shares it too (the *base*), in batches of :data:`MERGE_BATCH_SIZE` as SlateDB's
   ``merge_batch`` calls go. The result is a value when a base was found (a tombstone base folds
   onto nothing) and still an operand otherwise, with the newest seq, the latest ``create_ts`` and
   the common ``expire_ts``. Without an operator, any operand is an error
   (:class:`MergeOperatorMissing`, SlateDB's ``MergeOperatorRequiredIterator``): nothing is
   written.
2. **Retention** (``RetentionIterator``, no time window in compaction): walking the key's versions
   newest first, an expired value (``expire_ts <= now``, the compaction clock: the manifest's
   ``last_l0_clock_tick``) becomes a tombstone without ``expire_ts`` (an older version with a
   longer TTL must not come back), an expired operand is skipped; each version is kept, and the
   walk stops after the first version that is neither an operand nor above ``retention_min_seq``
   (the newest version a live snapshot may read). When the output is the last run
   (``drop_tombstones``), tombstones at the old end of what is kept are dropped.

The common case costs what newest-wins did: a batch without timestamps, operands or repeated keys
is filtered with one NumPy mask; keys with several versions are handled with masks too; only keys
holding an operand take a per-key Python step.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core.errors import InvalidArgument, MergeOperatorMissing
from slatedb_core.lsm.merge_operator import MergeOperator, fold
from slatedb_core.lsm.row_model import (
    KIND_MERGE,
    KIND_TOMBSTONE,
    KIND_VALUE,
    ROW_SCHEMA,
    Version,
    has_timestamps,
    widen,
)
from slatedb_core.manifest.model import Manifest

__all__ = [
    "MERGE_BATCH_SIZE",
    "Retention",
    "compaction_retention",
    "retain",
    "retain_key",
    "retain_ordered",
    "retain_stream",
    "snapshot_min_seq",
]

MERGE_BATCH_SIZE = 100
"""Operands SlateDB folds per ``merge_batch`` call before folding the partial results."""

_Bools = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Retention:
    """What one compaction keeps. Picklable (with a picklable operator): a distributed
    compaction's driver computes it once and ships it to every task."""

    now_ms: int
    """The compaction clock (SlateDB's ``compaction_clock_tick``): a row whose ``expire_ts`` is at
    or before it has expired."""
    retention_min_seq: int | None = None
    """The lowest seq a live snapshot reads (the manifest's ``recent_snapshot_min_seq``); None
    when no snapshot is live: only the newest version of a key is kept."""
    drop_tombstones: bool = False
    """The output is the last (oldest) sorted run: tombstones hide nothing below it."""
    merge_operator: MergeOperator | None = None

    def __post_init__(self) -> None:
        if type(self.now_ms) is not int:
            raise InvalidArgument(f"Retention.now_ms must be an int, got {self.now_ms!r}")
        m = self.retention_min_seq
        if m is not None and (type(m) is not int or m < 0):
            raise InvalidArgument(f"Retention.retention_min_seq must be an int >= 0, got {m!r}")
        if type(self.drop_tombstones) is not bool:
            raise InvalidArgument("Retention.drop_tombstones must be a bool")
        if self.merge_operator is not None and not callable(self.merge_operator):
            raise InvalidArgument("Retention.merge_operator must be callable or None")


def snapshot_min_seq(m: Manifest) -> int | None:
    """The seq below which no live SlateDB snapshot reads, or None when none may be live.

    SlateDB's writer records ``recent_snapshot_min_seq`` at each L0 flush (``last_l0_seq`` when no
    snapshot is open). Our writer keeps no snapshots and leaves the field as it was, so the field
    counts only while a SlateDB writer holds the database (``our_writer_epoch`` is not the
    writer epoch); a value at ``last_l0_seq`` retains nothing that newest-wins would drop.
    """
    if m.our_writer_epoch != m.writer_epoch and m.recent_snapshot_min_seq < m.last_l0_seq:
        return m.recent_snapshot_min_seq
    return None


def compaction_retention(
    m: Manifest, *, drop_tombstones: bool, merge_operator: MergeOperator | None = None
) -> Retention:
    """The policy SlateDB's compactor would use for a compaction planned on ``m``: its clock is
    the manifest's ``last_l0_clock_tick``, its snapshot barrier :func:`snapshot_min_seq`."""
    return Retention(
        now_ms=m.last_l0_clock_tick,
        retention_min_seq=snapshot_min_seq(m),
        drop_tombstones=drop_tombstones,
        merge_operator=merge_operator,
    )


# ---- one key, row by row (keys holding operands; the reference for the vectorised path) --------


def _merge_operands(key: bytes, versions: list[Version], p: Retention) -> list[Version]:
    """SlateDB's ``MergeOperatorIterator`` (compaction mode) over one key's versions."""
    op = p.merge_operator
    barrier = p.retention_min_seq
    out: list[Version] = []
    i, n = 0, len(versions)
    while i < n:
        first = versions[i]
        if first.kind != KIND_MERGE or (barrier is not None and first.seq > barrier):
            out.append(first)
            i += 1
            continue
        if op is None:
            raise MergeOperatorMissing(key, " (compaction)")
        expire = first.expire_ts
        create: int | None = None
        results: list[bytes] = []
        batch: list[bytes] = []
        base: Version | None = None
        while i < n:
            v = versions[i]
            if v.expire_ts != expire:
                break
            i += 1
            if v.create_ts is not None:
                create = v.create_ts if create is None else max(create, v.create_ts)
            if v.kind != KIND_MERGE:
                base = v
                break
            batch.append(v.value or b"")
            if len(batch) >= MERGE_BATCH_SIZE:
                results.append(fold(op, key, None, batch[::-1]))
                batch = []
        if batch:
            results.append(fold(op, key, None, batch[::-1]))
        base_value = None if base is None or base.kind == KIND_TOMBSTONE else (base.value or b"")
        value = fold(op, key, base_value, results[::-1])
        kind = KIND_MERGE if base is None else KIND_VALUE
        out.append(Version(first.seq, kind, value, expire, create))
    return out


def retain_key(key: bytes, versions: list[Version], p: Retention) -> list[Version]:
    """What SlateDB's compaction writes of one key, from all its versions newest first."""
    if p.merge_operator is None:
        for v in versions:
            if v.kind == KIND_MERGE:
                raise MergeOperatorMissing(key, " (compaction)")
    else:
        versions = _merge_operands(key, versions, p)
    kept: list[Version] = []
    min_seq = p.retention_min_seq
    for v in versions:
        is_merge = v.kind == KIND_MERGE
        if v.expire_ts is not None and v.expire_ts <= p.now_ms:
            if is_merge:
                continue  # older operands may still be live: skipped, no tombstone
            v = Version(v.seq, KIND_TOMBSTONE, None, None, v.create_ts)
        kept.append(v)
        if not (is_merge or (min_seq is not None and v.seq > min_seq)):
            break
    if p.drop_tombstones:
        while kept and kept[-1].kind == KIND_TOMBSTONE:
            kept.pop()
    return kept


# ---- a batch, vectorised -------------------------------------------------------------------


def _first_of_keys(keys: pa.Array) -> _Bools:
    n = len(keys)
    first = np.ones(n, dtype=np.bool_)
    if n > 1:
        first[1:] = pc.not_equal(keys.slice(1), keys.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    return first


def retain(batch: pa.RecordBatch, p: Retention, first: _Bools | None = None) -> pa.RecordBatch:
    """The rows of ``batch`` a compaction with policy ``p`` writes.

    ``batch``: key-sorted, every version of each of its keys (none continues in another batch),
    newest first; ``ENTRY_SCHEMA`` or ``ROW_SCHEMA`` (kept as it is). ``first`` (optional): True
    at the first row of each key, when the caller already knows it.
    """
    n = batch.num_rows
    if n == 0:
        return batch
    kinds: npt.NDArray[np.uint8] = batch.column(2).to_numpy(zero_copy_only=False)
    wide = has_timestamps(batch) and batch.column(4).null_count < n
    merges = bool((kinds == KIND_MERGE).any())
    if first is None:
        first = _first_of_keys(batch.column(0))
    distinct = bool(first.all())
    if not wide and not merges and (distinct or p.retention_min_seq is None):
        # newest-wins (today's fast path): the first row of each key, tombstones dropped when
        # the output is the last run
        keep = first if not distinct else None
        if p.drop_tombstones:
            values = kinds == KIND_VALUE
            keep = values if keep is None else keep & values
        if keep is None or bool(keep.all()):
            return batch
        return batch.filter(pa.array(keep))
    return _retain_general(batch, p, kinds, first, wide, merges)


def _retain_general(
    batch: pa.RecordBatch,
    p: Retention,
    kinds: npt.NDArray[np.uint8],
    first: _Bools,
    wide: bool,
    merges: bool,
) -> pa.RecordBatch:
    n = batch.num_rows
    group = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    in_merge_group = np.zeros(n, dtype=np.bool_)
    if merges:
        if p.merge_operator is None:
            at = int(np.flatnonzero(kinds == KIND_MERGE)[0])
            raise MergeOperatorMissing(batch.column(0)[at].as_py(), " (compaction)")
        merge_groups = np.unique(group[kinds == KIND_MERGE])
        in_merge_group = np.isin(group, merge_groups)
    # expiry: an expired value reads as a tombstone from now on
    if wide:
        expire = batch.column(4)
        expired = pc.fill_null(
            pc.less_equal(expire, pa.scalar(p.now_ms, pa.int64())), False
        ).to_numpy(zero_copy_only=False)
        expired_value = expired & (kinds != KIND_MERGE)  # a tombstone only loses its expire_ts
    else:
        expired_value = np.zeros(n, dtype=np.bool_)
    tomb = (kinds == KIND_TOMBSTONE) | expired_value
    # versions kept: those up to and including the first at or below the snapshot barrier
    keep = first.copy()
    if p.retention_min_seq is not None and n > 1:
        seqs = batch.column(1).to_numpy(zero_copy_only=False)
        above = seqs > np.uint64(p.retention_min_seq)
        keep[1:] |= above[:-1] & ~first[1:]
    if p.drop_tombstones:
        # tombstones at the old end of each key's kept versions go: a kept row survives when a
        # kept live row follows it (or is it) within its key
        live = (keep & ~tomb).astype(np.int64)
        after = np.cumsum(live[::-1])[::-1]  # live rows from i to the end of the batch
        next_start = np.append(starts[1:], n)
        tail = np.append(after, 0)[next_start][group]
        keep &= (after - tail) > 0
    keep &= ~in_merge_group
    out = batch.filter(pa.array(keep)) if not bool(keep.all()) else batch
    if wide and bool(expired_value[keep].any()):
        out = _as_tombstones(out, expired_value[keep])
    if not merges:
        return out
    return _with_merged_keys(batch, out, keep, starts, group, in_merge_group, p)


def _as_tombstones(batch: pa.RecordBatch, mask: _Bools) -> pa.RecordBatch:
    """``batch`` with the rows of ``mask`` turned into tombstones without expire_ts (SlateDB
    writes an expired value as a tombstone that keeps its create_ts)."""
    m = pa.array(mask)
    cols = list(batch.columns)
    cols[2] = pc.if_else(m, pa.scalar(KIND_TOMBSTONE, pa.uint8()), cols[2])
    cols[3] = pc.if_else(m, pa.scalar(None, pa.binary()), cols[3])
    cols[4] = pc.if_else(m, pa.scalar(None, pa.int64()), cols[4])
    return pa.RecordBatch.from_arrays(cols, schema=batch.schema)


def _with_merged_keys(
    batch: pa.RecordBatch,
    out: pa.RecordBatch,
    keep: _Bools,
    starts: npt.NDArray[np.intp],
    group: npt.NDArray[np.intp],
    in_merge_group: _Bools,
    p: Retention,
) -> pa.RecordBatch:
    """``out`` (the other keys' kept rows) with the keys holding operands, retained one by one
    (:func:`retain_key`), in key order."""
    wide = has_timestamps(batch)
    keys = batch.column(0)
    seq_col = batch.column(1).to_pylist()
    kind_col = batch.column(2).to_pylist()
    rows_of_groups = np.flatnonzero(in_merge_group)
    values = batch.column(3).take(pa.array(rows_of_groups)).to_pylist()
    if wide:
        expires = batch.column(4).take(pa.array(rows_of_groups)).to_pylist()
        creates = batch.column(5).take(pa.array(rows_of_groups)).to_pylist()
    new: dict[str, list[object]] = {c: [] for c in ROW_SCHEMA.names}
    order: list[int] = []
    j = 0
    for g in np.unique(group[rows_of_groups]).tolist():
        lo = int(starts[g])
        hi = int(starts[g + 1]) if g + 1 < len(starts) else batch.num_rows
        key = keys[lo].as_py()
        versions = []
        for i in range(lo, hi):
            k = kind_col[i]
            v = values[j]
            versions.append(
                Version(
                    seq_col[i],
                    k,
                    None if k == KIND_TOMBSTONE else (v or b""),
                    expires[j] if wide else None,
                    creates[j] if wide else None,
                )
            )
            j += 1
        for r, v in enumerate(retain_key(key, versions, p)):
            new["key"].append(key)
            new["seq"].append(v.seq)
            new["kind"].append(v.kind)
            new["value"].append(v.value)
            new["expire_ts"].append(v.expire_ts)
            new["create_ts"].append(v.create_ts)
            order.append(lo + r)  # a key's output never has more rows than its input
    merged = pa.RecordBatch.from_pydict(new, schema=ROW_SCHEMA)
    if not wide and merged.column(4).null_count == merged.num_rows:
        if merged.column(5).null_count == merged.num_rows:
            merged = pa.RecordBatch.from_arrays(merged.columns[:4], schema=batch.schema)
    if merged.schema != out.schema:
        out, merged = widen(out), widen(merged)
    combined = pa.concat_batches([out, merged])
    positions = np.concatenate([np.flatnonzero(keep), np.asarray(order, dtype=np.int64)])
    return combined.take(pa.array(np.argsort(positions, kind="stable")))


def retain_ordered(
    combined: pa.RecordBatch,
    order: npt.NDArray[np.intp],
    first: _Bools,
    p: Retention,
) -> pa.RecordBatch:
    """:func:`retain` of ``combined.take(order)`` (``first``: the first row of each key in that
    order), with one take of the kept rows when newest-wins applies (the merge's common case:
    no copy of rows it would drop)."""
    n = combined.num_rows
    kinds: npt.NDArray[np.uint8] = combined.column(2).to_numpy(zero_copy_only=False)
    wide = has_timestamps(combined) and combined.column(4).null_count < n
    identity = bool(np.all(order[1:] > order[:-1]))
    if not wide and not bool((kinds == KIND_MERGE).any()):
        if p.retention_min_seq is None or bool(first.all()):
            keep = first if not p.drop_tombstones else first & (kinds[order] == KIND_VALUE)
            if identity and bool(keep.all()):
                return combined
            return combined.take(pa.array(order[keep]))
    return retain(combined if identity else combined.take(pa.array(order)), p, first)


def retain_stream(batches: Iterable[pa.RecordBatch], p: Retention) -> Iterator[pa.RecordBatch]:
    """:func:`retain` over a stream whose batches each hold every version of their keys (what
    :func:`slatedb_core.lsm.versions_merge.merge_versions` yields); empty results are skipped."""
    for b in batches:
        out = retain(b, p)
        if out.num_rows:
            yield out
