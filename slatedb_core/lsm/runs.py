"""Arrow runs: the batched half of a memtable (see :mod:`slatedb_core.lsm.memtable`).

A write batch (``Db.put_arrow``, a large ``WriteBatch``, a replayed WAL SST) enters the memtable
as one :class:`Run`: its rows sorted by key once and deduplicated (the last row of a key wins),
vectorised with NumPy, instead of one dict entry per row. Point reads binary-search a run's keys;
scans and the L0 flush merge runs with vectorised kernels. A memtable keeps few runs: the newest is
merged with the one before it while that one holds no more rows (a binary counter, so O(log n)
runs and each row merged O(log n) times, see :func:`add_run`).

Keys are searched in their order-preserving fixed-width NumPy form (:func:`sortable_keys`). Runs of
one memtable may encode keys differently (a uniform width, or zero padding plus a length suffix for
variable widths); comparing two runs re-encodes both in one common form first.

``live`` marks the rows no newer write of the same memtable has replaced. Only the memtable's one
writer changes it, and only the writer (merges, exact size accounting) and a frozen memtable (whose
masks no longer change) may read it: a reader's snapshot of a memtable does not contain the
replacing write, so it must not drop rows by a mask that might already know about it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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

Entry = tuple[int, bytes | None]
Positions = npt.NDArray[np.intp]
Mask = npt.NDArray[np.bool_]

# Per-entry bytes beyond key and value that ``size_bytes`` counts (the flushed SST's share).
ENTRY_OVERHEAD = 16
# What a run really holds per row beyond key and value bytes: offsets (8), seq (8), kind (1),
# live flag (1), the sort key copy of a merge and its prefix (~24).
RUN_RESIDENT_OVERHEAD = 48


@dataclass(eq=False)
class Run:
    """A sorted, key-unique ENTRY_SCHEMA batch with NumPy views for point lookups.

    ``batch`` and the arrays are never changed; ``live`` and ``live_rows``/``live_bytes`` are the
    writer's (see module docstring). Tombstones have kind KIND_TOMBSTONE and a null value.
    """

    batch: pa.RecordBatch
    skeys: npt.NDArray[np.bytes_]
    width: int  # key width when ``uniform``; else the widest key (padded form, +2 length bytes)
    uniform: bool
    prefix: npt.NDArray[np.uint64] | None  # first 8 bytes of ``skeys`` as big-endian u64
    seqs: npt.NDArray[np.uint64]
    tomb: Mask
    voffs: npt.NDArray[np.int64]
    vdata: npt.NDArray[np.uint8]
    sizes: npt.NDArray[np.int64]  # key + value bytes of each row
    live: Mask
    live_rows: int
    live_bytes: int  # sum of sizes of live rows (without ENTRY_OVERHEAD)

    @property
    def rows(self) -> int:
        n: int = self.batch.num_rows
        return n

    def find(self, key: bytes) -> int:
        """The row of ``key``, or -1."""
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
        if self.tomb[i]:
            return (seq, None)
        o = self.voffs
        return (seq, self.vdata[o[i] : o[i + 1]].tobytes())

    def get(self, key: bytes) -> Entry | None:
        i = self.find(key)
        return None if i < 0 else self.entry(i)

    def kill(self, rows: Positions) -> int:
        """Mark ``rows`` replaced (writer only); returns the key + value bytes of those that
        were live."""
        rows = rows[self.live[rows]]
        if len(rows) == 0:
            return 0
        self.live[rows] = False
        freed = int(self.sizes[rows].sum())
        self.live_rows -= len(rows)
        self.live_bytes -= freed
        return freed

    def live_batch(self) -> pa.RecordBatch:
        if self.live_rows == self.rows:
            return self.batch
        return self.batch.filter(pa.array(self.live))


def normalised(batch: pa.RecordBatch) -> pa.RecordBatch:
    """ENTRY_SCHEMA with kinds 0/1 only and a null value for every tombstone (``kind`` decides,
    whatever ``value`` says), as the memtable has always stored entries."""
    batch = conform(batch)
    kinds = batch.column(2)
    is_tomb = pc.equal(kinds, KIND_TOMBSTONE)
    values = batch.column(3)
    if pc.any(is_tomb).as_py():
        values = pc.if_else(is_tomb, pa.scalar(None, pa.binary()), values)
        kinds = pc.cast(is_tomb, pa.uint8())
    elif values.null_count or pc.any(pc.not_equal(kinds, KIND_VALUE)).as_py():
        kinds = pa.array(np.zeros(batch.num_rows, dtype=np.uint8))
        values = pc.fill_null(values, b"")
    else:
        return batch
    return pa.RecordBatch.from_arrays(
        [batch.column(0), batch.column(1), kinds, values], schema=ENTRY_SCHEMA
    )


def _prefix(skeys: npt.NDArray[np.bytes_], width: int) -> npt.NDArray[np.uint64]:
    raw = skeys.view(np.uint8).reshape(len(skeys), width)
    return np.ascontiguousarray(raw[:, :8]).view(">u8").ravel().astype(np.uint64)


def _last_of_key_order(
    skeys: npt.NDArray[np.bytes_], prefix: npt.NDArray[np.uint64] | None
) -> Positions:
    """Row indices that sort ``skeys`` with one row per key: the last row of each repeated key.

    Sorting by the 8-byte prefix as a u64 is several times faster than sorting the strings and is
    the whole answer when no two prefixes are equal (random or hashed keys); otherwise the strings
    are sorted whole. Both sorts are stable, so the last row of a key comes last among its equals.
    """
    n = len(skeys)
    if prefix is not None:
        order: Positions = np.argsort(prefix, kind="stable")
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
    klens = np.diff(binary_buffers(batch.column(0))[0])
    uniform = bool(klens.min() == klens.max()) and int(klens[0]) > 0
    width = int(klens.max())
    itemsize = skeys.dtype.itemsize
    prefix = _prefix(skeys, itemsize) if itemsize >= 8 else None
    order = _last_of_key_order(skeys, prefix)
    if len(order) != n or bool(np.any(order[1:] < order[:-1])):
        batch = batch.take(pa.array(order))
        resorted = skeys[order] if uniform else sortable_keys([batch.column(0)])
        assert resorted is not None
        skeys = resorted
        if prefix is not None:
            prefix = prefix[order]
    return _make(batch, skeys, width, uniform, prefix)


def _make(
    batch: pa.RecordBatch,
    skeys: npt.NDArray[np.bytes_],
    width: int,
    uniform: bool,
    prefix: npt.NDArray[np.uint64] | None,
) -> Run:
    n = batch.num_rows
    koffs, _ = binary_buffers(batch.column(0))
    voffs, vdata = binary_buffers(batch.column(3))
    sizes = np.diff(koffs) + np.diff(voffs)
    tomb = batch.column(2).to_numpy(zero_copy_only=False) == KIND_TOMBSTONE
    seqs = batch.column(1).to_numpy(zero_copy_only=False)
    return Run(
        batch=batch,
        skeys=skeys,
        width=width,
        uniform=uniform,
        prefix=prefix,
        seqs=seqs,
        tomb=tomb,
        voffs=voffs,
        vdata=vdata,
        sizes=sizes,
        live=np.ones(n, dtype=np.bool_),
        live_rows=n,
        live_bytes=int(sizes.sum()),
    )


def _common_keys(a: Run, b: Run) -> tuple[npt.NDArray[np.bytes_], npt.NDArray[np.bytes_]] | None:
    """Both runs' sort keys in one encoding (each still sorted), or None if too wide."""
    if a.uniform == b.uniform and a.width == b.width:
        return a.skeys, b.skeys  # one encoding already
    both = sortable_keys([a.batch.column(0), b.batch.column(0)])
    if both is None:
        return None
    return both[: a.rows], both[a.rows :]


def overlap(older: Run, newer: Run) -> tuple[Positions, Positions]:
    """Rows of ``older`` and ``newer`` holding the same keys (pairwise), found vectorised."""
    same = older.uniform == newer.uniform and older.width == newer.width
    if same and older.prefix is not None and newer.prefix is not None:
        # candidates by the u64 prefix (fast), confirmed on the whole keys
        pos = np.searchsorted(older.prefix, newer.prefix)
        cand = np.flatnonzero(older.prefix[np.minimum(pos, older.rows - 1)] == newer.prefix)
        if len(cand) == 0:
            return _EMPTY, _EMPTY
        sub = newer.skeys[cand]
        fpos = np.searchsorted(older.skeys, sub)
        eq = older.skeys[np.minimum(fpos, older.rows - 1)] == sub
        return fpos[eq], cand[eq]
    common = _common_keys(older, newer)
    if common is None:  # pragma: no cover - runs are only built from keys that encode
        raise AssertionError("memtable runs with keys too wide to compare")
    ok, nk = common
    pos = np.searchsorted(ok, nk)
    eq = ok[np.minimum(pos, older.rows - 1)] == nk
    return pos[eq], np.flatnonzero(eq)


_EMPTY: Positions = np.zeros(0, dtype=np.intp)


def merge_live(older: Run, newer: Run) -> Run:
    """One run of the live rows of both (writer only; their live rows share no key)."""
    parts = [r.live_batch() for r in (older, newer) if r.live_rows]
    batch = parts[0] if len(parts) == 1 else pa.concat_batches(parts)
    run = build_run(batch)
    assert run is not None  # both inputs encoded
    return run


def newest_wins(older: Run, newer: Run) -> Run:
    """One run with every key of both, ``newer``'s entry where both have one (ignores ``live``:
    for runs that were never one writer's, e.g. a reader's replayed tables)."""
    old_rows, _ = overlap(older, newer)
    keep = np.ones(older.rows, dtype=np.bool_)
    keep[old_rows] = False
    a = older.batch if bool(keep.all()) else older.batch.filter(pa.array(keep))
    batch = pa.concat_batches([a, newer.batch]) if a.num_rows else newer.batch
    run = build_run(batch)
    assert run is not None
    return run


def add_run(runs: Sequence[Run], new: Run) -> tuple[tuple[Run, ...], int]:
    """``runs`` (oldest first) with ``new`` on top: rows it replaces are marked dead, then the
    newest runs merged while the one below the newest holds no more live rows than it (a binary
    counter). Returns the runs and the key + value bytes the replaced rows held."""
    freed = 0
    for r in runs:
        if r.live_rows:
            old_rows, _ = overlap(r, new)
            if len(old_rows):
                freed += r.kill(old_rows)
    out = [r for r in runs if r.live_rows]
    out.append(new)
    while len(out) >= 2 and out[-2].live_rows <= out[-1].live_rows:
        top = out.pop()
        out[-1] = merge_live(out[-1], top)
    return tuple(out), freed


def runs_batch(runs: Sequence[Run]) -> pa.RecordBatch:
    """All live rows of ``runs``, sorted (only for runs whose ``live`` masks are final)."""
    parts = [r.live_batch() for r in runs if r.live_rows]
    if not parts:
        return empty_batch()
    if len(parts) == 1:
        return parts[0]
    run = build_run(pa.concat_batches(parts))  # distinct keys: one sort, no dedup
    assert run is not None
    return run.batch


def kill_key(runs: Sequence[Run], key: bytes) -> Entry | None:
    """Mark ``key``'s live row dead in whichever run holds it (a single put replaced it);
    returns that entry, for size accounting (at most one run holds a key live)."""
    for r in reversed(runs):
        i = r.find(key)
        if i >= 0 and r.live[i]:
            r.kill(np.array([i], dtype=np.intp))
            return r.entry(i)
    return None


__all__ = [
    "ENTRY_OVERHEAD",
    "RUN_RESIDENT_OVERHEAD",
    "Entry",
    "Run",
    "add_run",
    "build_run",
    "kill_key",
    "newest_wins",
    "runs_batch",
]
