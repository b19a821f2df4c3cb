"""Arrow runs: the batched half of a memtable (see :mod:`slatedb_core.lsm.memtable`).

A write batch (``Db.put_arrow``, a large ``WriteBatch``, a replayed WAL SST) enters the memtable
as one :class:`Run`: its rows sorted by key once and deduplicated (the last row of a key wins),
vectorised with NumPy, instead of one dict entry per row. A run is an *index* over the batches it
came from: its sorted keys (fixed-width NumPy bytes), their seqs, tombstone flags and sizes, and
each key's row in the batches, which are kept as they came and copied once, in key order, when the
memtable is flushed (or a scan needs the run's rows). Point reads binary-search the keys; merging
runs merges only the index. A memtable keeps few runs: the newest ones are merged when
``MERGE_FAN_IN`` runs of about the same size pile up (size tiers, see :func:`add_run`), so there
are O(log n) runs and each row's index entry is merged O(log n) times.

Keys are searched in their order-preserving fixed-width NumPy form (:func:`sortable_keys`). Runs of
one memtable may encode keys differently (a uniform width, or zero padding plus a length suffix for
variable widths); comparing two runs re-encodes both in one common form first.

``live`` marks the rows no newer write of the same memtable has replaced. Only the memtable's one
writer changes it, and only the writer (merges, exact size accounting) and a frozen memtable (whose
masks no longer change) may read it: a reader's snapshot of a memtable does not contain the
replacing write, so it must not drop rows by a mask that might already know about it.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core.lsm.entries import (
    ENTRY_SCHEMA,
    KIND_TOMBSTONE,
    KIND_VALUE,
    binary_buffers,
    conform,
    empty_batch,
    sortable_keys,
)
from slatedb_core.lsm.memtable_fold import Entry
from slatedb_core.lsm.row_model import ROW_SCHEMA, Version, concat_rows, has_timestamps, widen

Positions = npt.NDArray[np.intp]
Mask = npt.NDArray[np.bool_]

# Per-entry bytes beyond key and value that ``size_bytes`` counts (the flushed SST's share).
ENTRY_OVERHEAD = 16
# What a run holds per row beyond the key and value bytes of its batches: the sorted key copy
# (~key bytes), its u64 prefix (8), row index (8), seq (8), sizes (8), flags (2), plus the WAL
# buffer's share of the batch (16).
RUN_RESIDENT_OVERHEAD = 70
MERGE_FAN_IN = 4


@dataclass(eq=False)
class Run:
    """Sorted, key-unique entries over ``chunks`` (normalised ENTRY_SCHEMA batches, as written;
    a chunk whose rows carry a TTL is in ROW_SCHEMA, and its entries are
    :class:`~slatedb_core.lsm.row_model.Version` tuples; runs never hold merge operands, which
    the memtable folds entry by entry).

    Position ``i`` (in key order) is row ``rowids[i]`` of the chunks laid end to end. Nothing of a
    run changes after it is built except ``live`` and the ``live_*`` counters, which are the
    writer's (see module docstring). Tombstones have kind KIND_TOMBSTONE and a null value.
    """

    chunks: tuple[pa.RecordBatch, ...]
    starts: list[int]  # first row id of each chunk, then the total
    skeys: npt.NDArray[np.bytes_]
    width: int  # key width when ``uniform``; else the widest key (padded form, +2 length bytes)
    uniform: bool
    prefix: npt.NDArray[np.uint64] | None  # first 8 bytes of ``skeys`` as big-endian u64
    rowids: Positions
    seqs: npt.NDArray[np.uint64]
    tomb: Mask
    sizes: npt.NDArray[np.int64]  # key + value bytes of each entry
    live: Mask
    live_rows: int
    live_bytes: int  # sum of sizes of live rows (without ENTRY_OVERHEAD)
    _values: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]] = field(default_factory=list)
    _sorted: pa.RecordBatch | None = None

    def __post_init__(self) -> None:
        self._values = [binary_buffers(c.column(3)) for c in self.chunks]

    @property
    def rows(self) -> int:
        return len(self.skeys)

    def find(self, key: bytes) -> int:
        """The position of ``key``, or -1."""
        if self.uniform:
            if len(key) != self.width:
                return -1
            enc = key
        else:
            if len(key) > self.width:
                return -1
            enc = key.ljust(self.width, b"\0") + len(key).to_bytes(2, "big")
        sk = self.skeys
        i = int(sk.searchsorted(enc))
        # NumPy drops trailing NULs of an ``S`` item; every encoded key has the same width, so
        # equal stripped forms mean equal keys.
        if i < len(sk) and sk[i] == enc.rstrip(b"\0"):
            return i
        return -1

    def entry(self, i: int) -> Entry:
        seq = int(self.seqs[i])
        row = int(self.rowids[i])
        c = bisect.bisect_right(self.starts, row) - 1 if len(self.chunks) > 1 else 0
        row -= self.starts[c]
        chunk = self.chunks[c]
        if chunk.num_columns > 4:  # ROW_SCHEMA: the entry carries its timestamps
            expire, create = chunk.column(4)[row].as_py(), chunk.column(5)[row].as_py()
            if expire is not None or create is not None:
                if self.tomb[i]:
                    return Version(seq, KIND_TOMBSTONE, None, expire, create)
                offs, data = self._values[c]
                value = data[offs[row] : offs[row + 1]].tobytes()
                return Version(seq, KIND_VALUE, value, expire, create)
        if self.tomb[i]:
            return (seq, None)
        offs, data = self._values[c]
        return (seq, data[offs[row] : offs[row + 1]].tobytes())

    def get(self, key: bytes) -> Entry | None:
        i = self.find(key)
        return None if i < 0 else self.entry(i)

    def kill(self, rows: Positions) -> int:
        """Mark positions ``rows`` replaced (writer only); returns the key + value bytes of those
        that were live."""
        rows = rows[self.live[rows]]
        if len(rows) == 0:
            return 0
        self.live[rows] = False
        freed = int(self.sizes[rows].sum())
        self.live_rows -= len(rows)
        self.live_bytes -= freed
        return freed

    def _take(self, rowids: Positions) -> pa.RecordBatch:
        if len(rowids) == 0:
            return empty_batch()
        if len(self.chunks) == 1:
            src = self.chunks[0]
            if len(rowids) == src.num_rows and bool(np.all(rowids[1:] > rowids[:-1])):
                return src  # written in key order with unique keys: no copy
            return src.take(pa.array(rowids))
        chunks = self.chunks
        if any(has_timestamps(c) for c in chunks):
            chunks = tuple(widen(c) for c in chunks)
        t = pa.Table.from_batches(chunks).take(pa.array(rowids)).combine_chunks()
        return t.to_batches()[0]

    @property
    def sorted_batch(self) -> pa.RecordBatch:
        """Every entry of the run in key order (replaced ones too: readers must not use
        ``live``); built once."""
        b = self._sorted
        if b is None:
            b = self._sorted = self._take(self.rowids)
        return b

    def live_batch(self) -> pa.RecordBatch:
        """The live entries in key order (for the writer, or a frozen memtable)."""
        if self.live_rows == self.rows:
            return self.sorted_batch
        if self._sorted is not None:
            return self._sorted.filter(pa.array(self.live))
        return self._take(self.rowids[self.live])


def normalised(batch: pa.RecordBatch) -> pa.RecordBatch:
    """ENTRY_SCHEMA with kinds 0/1 only and a null value for every tombstone (``kind`` decides,
    whatever ``value`` says), as the memtable has always stored entries. A ROW_SCHEMA batch (rows
    with timestamps) keeps its two timestamp columns."""
    if has_timestamps(batch):
        ts = [batch.column(4), batch.column(5)]
        head = normalised(pa.RecordBatch.from_arrays(batch.columns[:4], schema=ENTRY_SCHEMA))
        return pa.RecordBatch.from_arrays([*head.columns, *ts], schema=ROW_SCHEMA)
    batch = conform(batch)
    kinds = batch.column(2).to_numpy(zero_copy_only=False)
    values = batch.column(3)
    is_tomb = kinds == KIND_TOMBSTONE
    if bool(is_tomb.any()):
        mask = pa.array(is_tomb)
        values = pc.if_else(mask, pa.scalar(None, pa.binary()), values)
        new_kinds = pa.array(is_tomb.astype(np.uint8))
    elif values.null_count or bool((kinds != KIND_VALUE).any()):
        new_kinds = pa.array(np.zeros(batch.num_rows, dtype=np.uint8))
        values = pc.fill_null(values, b"")
    else:
        return batch
    return pa.RecordBatch.from_arrays(
        [batch.column(0), batch.column(1), new_kinds, values], schema=ENTRY_SCHEMA
    )


def _prefix(skeys: npt.NDArray[np.bytes_]) -> npt.NDArray[np.uint64] | None:
    width = skeys.dtype.itemsize
    if width < 8:
        return None
    raw = skeys.view(np.uint8).reshape(len(skeys), width)
    return np.ascontiguousarray(raw[:, :8]).view(">u8").ravel().astype(np.uint64)


def _last_of_key_order(
    skeys: npt.NDArray[np.bytes_], prefix: npt.NDArray[np.uint64] | None
) -> Positions:
    """Row indices that sort ``skeys`` with one row per key: the last row of each repeated key.

    Sorting by the 8-byte prefix as a u64 is several times faster than sorting the strings and is
    the whole answer when no two prefixes are equal (random or hashed keys), so that sort need not
    be stable; otherwise the strings are sorted whole, stably, so the last row of a key comes last
    among its equals.
    """
    n = len(skeys)
    if prefix is not None:
        order: Positions = np.argsort(prefix)
        p = prefix[order]
        if not bool(np.any(p[1:] == p[:-1])):
            return order
    order = np.argsort(skeys, kind="stable")
    s = skeys[order]
    last = np.empty(n, dtype=np.bool_)
    if n:
        last[-1] = True
        np.not_equal(s[1:], s[:-1], out=last[:-1])
        if not bool(last.all()):
            return order[last]
    return order


def build_run(batch: pa.RecordBatch) -> Run | None:
    """A run of ENTRY_SCHEMA rows given in write order (the last row of a key wins), or None when
    the keys are too wide for the NumPy form (the caller keeps such rows in its dict)."""
    batch = normalised(batch)
    n = batch.num_rows
    if n == 0:
        return None
    skeys = sortable_keys([batch.column(0)])
    if skeys is None:
        return None
    koffs, _ = binary_buffers(batch.column(0))
    klens = np.diff(koffs)
    uniform = bool(klens.min() == klens.max()) and int(klens[0]) > 0
    width = int(klens.max())
    prefix = _prefix(skeys)
    order = _last_of_key_order(skeys, prefix)
    voffs, _ = binary_buffers(batch.column(3))
    sizes = klens + np.diff(voffs)
    seqs = batch.column(1).to_numpy(zero_copy_only=False)
    tomb = batch.column(2).to_numpy(zero_copy_only=False) == KIND_TOMBSTONE
    sk = skeys[order]
    return Run(
        chunks=(batch,),
        starts=[0, n],
        skeys=sk,
        width=width,
        uniform=uniform,
        prefix=None if prefix is None else prefix[order],
        rowids=order,
        seqs=seqs[order],
        tomb=tomb[order],
        sizes=sizes[order],
        live=np.ones(len(order), dtype=np.bool_),
        live_rows=len(order),
        live_bytes=int(sizes[order].sum()),
    )


def _same_encoding(runs: Sequence[Run]) -> bool:
    r0 = runs[0]
    return all(r.uniform == r0.uniform and r.width == r0.width for r in runs)


def overlap(older: Run, newer: Run) -> tuple[Positions, Positions]:
    """Positions in ``older`` and ``newer`` holding the same keys (pairwise), found vectorised."""
    if not _same_encoding([older, newer]):
        # one common encoding of both (each run's sorted batch is in position order)
        common = sortable_keys([older.sorted_batch.column(0), newer.sorted_batch.column(0)])
        if common is None:  # pragma: no cover - runs are built only from keys that encode
            raise AssertionError("memtable runs with keys too wide to compare")
        ok, nk = common[: older.rows], common[older.rows :]
        pos = np.searchsorted(ok, nk)
        eq = ok[np.minimum(pos, older.rows - 1)] == nk
        return pos[eq], np.flatnonzero(eq)
    if older.prefix is not None and newer.prefix is not None:
        # candidates by the u64 prefix (fast), confirmed on the whole keys
        pos = np.searchsorted(older.prefix, newer.prefix)
        cand = np.flatnonzero(older.prefix[np.minimum(pos, older.rows - 1)] == newer.prefix)
        if len(cand) == 0:
            return _EMPTY, _EMPTY
        sub = newer.skeys[cand]
        fpos = np.searchsorted(older.skeys, sub)
        eq = older.skeys[np.minimum(fpos, older.rows - 1)] == sub
        return fpos[eq], cand[eq]
    pos = np.searchsorted(older.skeys, newer.skeys)
    eq = older.skeys[np.minimum(pos, older.rows - 1)] == newer.skeys
    return pos[eq], np.flatnonzero(eq)


_EMPTY: Positions = np.zeros(0, dtype=np.intp)


def merge_live(runs: Sequence[Run]) -> Run:
    """One run of the live entries of ``runs`` (writer only: their live entries share no key).

    Only the index is merged when the runs encode keys alike and at least half their rows are
    live; otherwise the live rows are copied into one new batch first (which also lets go of
    replaced values)."""
    total = sum(r.rows for r in runs)
    live = sum(r.live_rows for r in runs)
    if not _same_encoding(runs) or 2 * live < total:
        parts = [r.live_batch() for r in runs if r.live_rows]
        run = build_run(concat_rows(parts))
        assert run is not None  # the inputs encoded
        return run
    chunks: list[pa.RecordBatch] = []
    starts: list[int] = [0]
    rowids: list[Positions] = []
    for r in runs:
        base = starts[-1]
        chunks.extend(r.chunks)
        starts.extend(base + s for s in r.starts[1:])
        rowids.append(r.rowids[r.live] + base)

    def cat(name: str) -> npt.NDArray[Any]:
        return np.concatenate([getattr(r, name)[r.live] for r in runs])

    skeys = cat("skeys")
    prefix = None if runs[0].prefix is None else cat("prefix")
    if prefix is not None:
        order: Positions = np.argsort(prefix, kind="stable")
        p = prefix[order]
        if bool(np.any(p[1:] == p[:-1])):
            order = np.argsort(skeys, kind="stable")
    else:
        order = np.argsort(skeys, kind="stable")
    sizes = cat("sizes")[order]
    return Run(
        chunks=tuple(chunks),
        starts=starts,
        skeys=skeys[order],
        width=runs[0].width,
        uniform=runs[0].uniform,
        prefix=None if prefix is None else prefix[order],
        rowids=np.concatenate(rowids)[order],
        seqs=cat("seqs")[order],
        tomb=cat("tomb")[order],
        sizes=sizes,
        live=np.ones(len(order), dtype=np.bool_),
        live_rows=len(order),
        live_bytes=int(sizes.sum()),
    )


def newest_wins(older: Run, newer: Run) -> Run:
    """One run with every key of both, ``newer``'s entry where both have one (ignores ``live``:
    for runs that were never one writer's, e.g. a reader's replayed tables)."""
    old_rows, _ = overlap(older, newer)
    keep = np.ones(older.rows, dtype=np.bool_)
    keep[old_rows] = False
    a = older.sorted_batch
    if not bool(keep.all()):
        a = a.filter(pa.array(keep))
    batch = concat_rows([a, newer.sorted_batch]) if a.num_rows else newer.sorted_batch
    run = build_run(batch)
    assert run is not None
    return run


def _tier(rows: int) -> int:
    return max(0, rows.bit_length() - 1) // 2  # tiers of 4x: MERGE_FAN_IN runs of one tier merge


def add_run(runs: Sequence[Run], new: Run) -> tuple[tuple[Run, ...], int]:
    """``runs`` (oldest first) with ``new`` on top: entries it replaces are marked dead, then the
    newest runs merged while at least MERGE_FAN_IN of them are in the newest one's size tier or
    below (tiers of 4x). Runs left with no live entry are dropped from the result (newer ones hold
    all their keys). Returns the runs and the key + value bytes the replaced entries held."""
    freed = 0
    for r in runs:
        if r.live_rows:
            old_rows, _ = overlap(r, new)
            if len(old_rows):
                freed += r.kill(old_rows)
    out = [r for r in runs if r.live_rows]
    out.append(new)
    while len(out) >= 2:
        tier = _tier(out[-1].live_rows)
        k = 1
        while k < len(out) and _tier(out[-1 - k].live_rows) <= tier:
            k += 1
        if k < MERGE_FAN_IN:
            break
        merged = merge_live(out[-k:])
        out[-k:] = [merged]
    return tuple(out), freed


def runs_batch(runs: Sequence[Run]) -> pa.RecordBatch:
    """All live rows of ``runs``, sorted (only for runs whose ``live`` masks are final)."""
    live = [r for r in runs if r.live_rows]
    if not live:
        return empty_batch()
    if len(live) == 1:
        return live[0].live_batch()
    return merge_live(live).live_batch()


def kill_key(runs: Sequence[Run], key: bytes) -> Entry | None:
    """Mark ``key``'s live entry dead in whichever run holds it (a single put replaced it);
    returns that entry, for size accounting (at most one run holds a key live)."""
    for r in reversed(runs):
        i = r.find(key)
        if i >= 0 and r.live[i]:
            r.kill(np.array([i], dtype=np.intp))
            return r.entry(i)
    return None


__all__ = [
    "ENTRY_OVERHEAD",
    "MERGE_FAN_IN",
    "RUN_RESIDENT_OVERHEAD",
    "Entry",
    "Run",
    "add_run",
    "build_run",
    "kill_key",
    "newest_wins",
    "normalised",
    "runs_batch",
]
