"""The WAL a reader replays: contiguous WAL SSTs fetched ahead, held in bounded in-memory tables
and purged once their data reaches L0 (used by :mod:`slatedb_core.reader`)."""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core.entries import empty_batch
from slatedb_core.memtable import ImmutableMemtable, Memtable
from slatedb_core.wal import WalLog

log = logging.getLogger(__name__)

T = TypeVar("T")

WAL_FETCH_AHEAD = 8
"""WAL SSTs fetched and decoded ahead of the one being replayed: GETs overlap, and SST decoding
runs in Arrow without the GIL, so replaying a large WAL is bounded by applying it."""
_RELOAD_ATTEMPTS = 5  # WAL vanishing between manifest read and WAL read means the manifest moved
_scan_tokens = itertools.count(1)


# ---- replayed WAL --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Frozen:
    table: ImmutableMemtable
    first_wal_id: int
    last_wal_id: int


class _WalTables:
    """The replayed WAL: whole WAL SSTs in id order, in tables of about ``max_bytes`` each.

    Changed only under the reader's refresh lock. The active table is shared with the published
    DbState and only grows (the Memtable one-writer contract), so new WAL SSTs are visible as soon
    as they are applied; each ``put_batch`` holds whole WAL SSTs, so their write batches are seen
    whole. A WAL SST is never split across tables, so a table exceeds ``max_bytes`` only when one
    WAL SST alone does.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.last_wal_id = 0  # every WAL id <= this is in a table or in the manifest's SSTs
        self.frozen: list[_Frozen] = []  # oldest first
        self.active = Memtable()
        self.active_first = 1
        self.seq_by_wal: dict[int, int] = {}  # max seq of each replayed WAL SST with entries
        # Every seq <= this is in the manifest's SSTs (its last_l0_seq): a WAL SST past the replay
        # point can still hold such rows (a flush moves the replay point in a later commit), and
        # replaying them on top of the SSTs would hide newer values written there.
        self.floor_seq = 0
        self.active_min_seq: int | None = None  # lowest seq in the active table

    def add(self, ssts: Sequence[tuple[int, pa.RecordBatch]]) -> bool:
        """Apply the next WAL SSTs (consecutive ids) in one ``put_batch``; True when the active
        table was frozen first (publish a new state).

        One batch for several SSTs is still applied in id order (later rows win) and seen whole;
        it is much cheaper than one call per SST, since a batch going into an empty table is
        adopted as it is instead of merged entry by entry.
        """
        if not ssts:
            return False
        if ssts[0][0] != self.last_wal_id + 1:
            raise AssertionError(f"WAL {ssts[0][0]} replayed after {self.last_wal_id}")
        live = [(i, _above(b, self.floor_seq)) for i, b in ssts if b.num_rows]
        live = [(i, b) for i, b in live if b.num_rows]
        rotated = False
        if live:
            incoming = sum(b.nbytes for _, b in live)
            active = self.active
            if not active.is_empty() and active.size_bytes + incoming > self.max_bytes:
                self._rotate()
                rotated = True
            if self.active.is_empty():
                self.active_first = live[0][0]
            batches = [b for _, b in live]
            self.active.put_batch(batches[0] if len(batches) == 1 else pa.concat_batches(batches))
            for wal_id, b in live:
                self.seq_by_wal[wal_id] = int(pc.max(b.column(1)).as_py())
                low = _min_seq(b)
                if self.active_min_seq is None or low < self.active_min_seq:
                    self.active_min_seq = low
        self.last_wal_id = ssts[-1][0]
        self.active.last_wal_id = self.last_wal_id
        return rotated

    def settle(self) -> bool:
        """After a replay round: freeze the active table once it holds a quarter of the bound.

        A frozen table sorts its entries once and keeps them; the active one sorts a copy on every
        scan. Freezing only big tables keeps their number within about 4x the minimum.
        """
        if self.active.size_bytes * 4 < self.max_bytes:
            return False
        self._rotate()
        return True

    def _rotate(self) -> None:
        imm = self.active.freeze()
        self.frozen.append(_Frozen(imm, self.active_first, self.last_wal_id))
        self.active = Memtable()
        self.active_min_seq = None
        self.active_first = self.last_wal_id + 1

    def purge(self, replay_after: int, floor_seq: int = 0) -> None:
        """Forget WAL SSTs ``<= replay_after`` and rows with seq ``<= floor_seq``: a manifest now
        has them in its SSTs."""
        self._raise_floor(floor_seq)
        if replay_after >= self.last_wal_id:
            self.frozen = []
            self.active = Memtable()
            self.active_min_seq = None
            self.active_first = replay_after + 1
            self.seq_by_wal = {}
            self.last_wal_id = replay_after
            return
        dropped = [s for w, s in self.seq_by_wal.items() if w <= replay_after]
        threshold = max(dropped) if dropped else None
        kept: list[_Frozen] = []
        for f in self.frozen:
            if f.last_wal_id <= replay_after:
                continue
            if f.first_wal_id <= replay_after and threshold is not None:
                rest = _newer_than(f.table.batch, threshold)
                if rest.is_empty():
                    continue
                f = _Frozen(rest.freeze(), replay_after + 1, f.last_wal_id)
            kept.append(f)
        self.frozen = kept
        if self.active_first <= replay_after:
            if threshold is not None and not self.active.is_empty():
                # Freezing keeps the old table readable for states published before this one.
                self.active = _newer_than(self.active.freeze().batch, threshold)
            self.active_first = replay_after + 1
        self.seq_by_wal = {w: s for w, s in self.seq_by_wal.items() if w > replay_after}

    def _raise_floor(self, floor_seq: int) -> None:
        if floor_seq <= self.floor_seq:
            return
        self.floor_seq = floor_seq
        kept: list[_Frozen] = []
        for f in self.frozen:
            if _min_seq(f.table.batch) <= floor_seq:
                rest = _newer_than(f.table.batch, floor_seq)
                if rest.is_empty():
                    continue
                f = _Frozen(rest.freeze(), f.first_wal_id, f.last_wal_id)
            kept.append(f)
        self.frozen = kept
        low = self.active_min_seq
        if not self.active.is_empty() and low is not None and low <= floor_seq:
            # A new table: states published before this one keep reading the old one.
            self.active = _newer_than(self.active.freeze().batch, floor_seq)
            self.active_min_seq = None if self.active.is_empty() else floor_seq + 1

    def imms(self) -> tuple[ImmutableMemtable, ...]:
        return tuple(f.table for f in reversed(self.frozen))

    def count(self) -> int:
        return len(self.frozen) + (0 if self.active.is_empty() else 1)

    def size_bytes(self) -> int:
        return sum(f.table.size_bytes for f in self.frozen) + self.active.size_bytes


def _above(batch: pa.RecordBatch, seq: int) -> pa.RecordBatch:
    if seq == 0 or batch.num_rows == 0 or _min_seq(batch) > seq:
        return batch
    return batch.filter(pc.greater(batch.column(1), pa.scalar(seq, pa.uint64())))


def _min_seq(batch: pa.RecordBatch) -> int:
    low = pc.min(batch.column(1)).as_py()
    return 0 if low is None else int(low)


def _newer_than(batch: pa.RecordBatch, seq: int) -> Memtable:
    out = Memtable()
    out.put_batch(batch.filter(pc.greater(batch.column(1), pa.scalar(seq, pa.uint64()))))
    return out


def _load_wal(wal: WalLog, wal_id: int) -> pa.RecordBatch:
    """One WAL SST as a single batch, so that applying it is one atomic step for readers."""
    batches = wal.read(wal_id).entries.to_batches()
    if not batches:
        return empty_batch()
    return batches[0] if len(batches) == 1 else pa.concat_batches(batches)


def _fetch_wal(wal: WalLog, ids: Sequence[int]) -> Iterator[tuple[int, pa.RecordBatch]]:
    """``(id, entries)`` in id order; a missing SST raises ObjectNotFound at its position."""
    if len(ids) <= 1:
        for wal_id in ids:
            yield wal_id, _load_wal(wal, wal_id)
        return
    pool = ThreadPoolExecutor(max_workers=min(WAL_FETCH_AHEAD, len(ids)))
    try:
        todo = iter(ids)
        pending: deque[tuple[int, Future[pa.RecordBatch]]] = deque(
            (i, pool.submit(_load_wal, wal, i)) for i in itertools.islice(todo, WAL_FETCH_AHEAD)
        )
        while pending:
            wal_id, fut = pending.popleft()
            batch = fut.result()
            nxt = next(todo, None)
            if nxt is not None:
                pending.append((nxt, pool.submit(_load_wal, wal, nxt)))
            yield wal_id, batch
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _contiguous(ids: Sequence[int], after: int) -> list[int]:
    """The unbroken run ``after+1, after+2, ...`` at the start of the sorted ``ids``."""
    out: list[int] = []
    expect = after + 1
    for i in ids:
        if i != expect:
            break
        out.append(i)
        expect += 1
    return out
