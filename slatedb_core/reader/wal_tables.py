"""The WAL a reader replays: contiguous WAL SSTs fetched ahead, held in bounded immutable
in-memory tables and purged once their data reaches L0 (used by :mod:`slatedb_core.reader.refresh`)."""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import cast

import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core.lsm.entries import empty_batch
from slatedb_core.lsm.memtable import Entry, ImmutableMemtable, Memtable
from slatedb_core.lsm.row_model import Version, has_merges
from slatedb_core.lsm.version_table import VersionTable
from slatedb_core.wal import WalLog

log = logging.getLogger(__name__)

WAL_FETCH_AHEAD = 8
"""WAL SSTs fetched and decoded ahead of the one being replayed: GETs overlap, and SST decoding
runs in Arrow without the GIL, so replaying a large WAL is bounded by applying it."""


# ---- replayed WAL --------------------------------------------------------------------------
_TIER_RATIO = 2
"""The newest replayed table is merged into the one before it while ``_TIER_RATIO`` times its size
reaches that one's: higher means fewer tables (cheaper gets) and more copying."""
NO_MEMTABLE = Memtable()
NO_MEMTABLE.freeze()
"""The active memtable of every state a reader publishes: empty and frozen (writes raise), since
a reader keeps everything it replays in immutable tables."""


@dataclass(frozen=True, slots=True)
class _Frozen:
    table: ImmutableMemtable | VersionTable
    first_wal_id: int
    last_wal_id: int


class WalTables:
    """The replayed WAL: whole WAL SSTs in id order, in immutable tables of at most about
    ``max_bytes`` each.

    Changed only under the reader's refresh lock, and never in place: a table, once made, is never
    written again, because published states share it and reads take no lock. Each :meth:`add`
    builds a new table from whole WAL SSTs, so a state published after it shows all of them and
    a state published before shows none of them; a write batch (always inside one WAL SST) is
    seen whole or not at all, by every read of a state, however long it takes.

    Tables are size-tiered so that their number stays small without copying much: after an add,
    the newest table is merged (:meth:`ImmutableMemtable.overlaid`, into a new table) with the one
    before it while it is at least half that one's size and both fit in ``max_bytes``. Small
    polls thus give O(log n) tables below ``max_bytes``, each entry copied O(log n) times; a
    replay of a large WAL (groups of ``max_bytes``) merges nothing. A WAL SST is never split
    across tables, so a table exceeds ``max_bytes`` only when one WAL SST alone does.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.last_wal_id = 0  # every WAL id <= this is in a table or in the manifest's SSTs
        self.tables: list[_Frozen] = []  # oldest first; private: states get tuples of tables
        self.seq_by_wal: dict[int, int] = {}  # max seq of each replayed WAL SST with entries
        # Every seq <= this is in the manifest's SSTs (its last_l0_seq): a WAL SST past the replay
        # point can still hold such rows (a flush moves the replay point in a later commit), and
        # replaying them on top of the SSTs would hide newer values written there.
        self.floor_seq = 0

    def add(self, ssts: Sequence[tuple[int, pa.RecordBatch]]) -> None:
        """Apply the next WAL SSTs (consecutive ids) as one new table, built before anything can
        see it. Several SSTs in one batch are still applied in id order (later rows win)."""
        if not ssts:
            return
        if ssts[0][0] != self.last_wal_id + 1:
            raise AssertionError(f"WAL {ssts[0][0]} replayed after {self.last_wal_id}")
        live = [(i, _above(b, self.floor_seq)) for i, b in ssts if b.num_rows]
        live = [(i, b) for i, b in live if b.num_rows]
        if live:
            batches = [b for _, b in live]
            rows = batches[0] if len(batches) == 1 else pa.concat_batches(batches)
            table: ImmutableMemtable | VersionTable
            if has_merges(rows):  # operand chains: every version a read folds (RFC 0006)
                table = VersionTable(rows)
            else:
                fresh = Memtable()
                fresh.put_batch(rows)
                fresh.last_wal_id = live[-1][0]
                table = fresh.freeze()
            self.tables.append(_Frozen(table, live[0][0], live[-1][0]))
            for wal_id, b in live:
                self.seq_by_wal[wal_id] = int(pc.max(b.column(1)).as_py())
            self._merge_newest()
        self.last_wal_id = ssts[-1][0]

    def _merge_newest(self) -> None:
        tables = self.tables
        while len(tables) >= 2:
            older, newer = tables[-2], tables[-1]
            if isinstance(older.table, VersionTable) or isinstance(newer.table, VersionTable):
                return  # a table of operand chains stays as it is
            a, b = older.table.size_bytes, newer.table.size_bytes
            if a + b > self.max_bytes or _TIER_RATIO * b < a:
                return
            merged = older.table.overlaid(newer.table)
            tables[-2:] = [_Frozen(merged, older.first_wal_id, newer.last_wal_id)]

    def purge(self, replay_after: int, floor_seq: int = 0) -> None:
        """Forget WAL SSTs ``<= replay_after`` and rows with seq ``<= floor_seq``: a manifest now
        has them in its SSTs. Tables that lose rows are replaced by new ones; the old ones stay
        readable for states published before."""
        self._raise_floor(floor_seq)
        if replay_after >= self.last_wal_id:
            self.tables = []
            self.seq_by_wal = {}
            self.last_wal_id = replay_after
            return
        dropped = [s for w, s in self.seq_by_wal.items() if w <= replay_after]
        threshold = max(dropped) if dropped else None
        kept: list[_Frozen] = []
        for f in self.tables:
            if f.last_wal_id <= replay_after:
                continue
            if f.first_wal_id <= replay_after and threshold is not None:
                # seqs grow with WAL ids: rows above the dropped SSTs' seqs are from later SSTs
                rest = _newer_than(f.table, threshold)
                if rest.is_empty():
                    continue
                f = _Frozen(rest.freeze(), replay_after + 1, f.last_wal_id)
            kept.append(f)
        self.tables = kept
        self.seq_by_wal = {w: s for w, s in self.seq_by_wal.items() if w > replay_after}

    def _raise_floor(self, floor_seq: int) -> None:
        if floor_seq <= self.floor_seq:
            return
        self.floor_seq = floor_seq
        kept: list[_Frozen] = []
        for f in self.tables:
            low = f.table.min_seq  # a bound: it counts rows a later row of the key replaced
            if low is not None and low <= floor_seq and _min_seq(f.table.batch) <= floor_seq:
                rest = _newer_than(f.table, floor_seq)
                if rest.is_empty():
                    continue
                f = _Frozen(rest.freeze(), f.first_wal_id, f.last_wal_id)
            kept.append(f)
        self.tables = kept

    def imms(self) -> tuple[ImmutableMemtable, ...]:
        """The tables, newest first, for a state to publish. A :class:`VersionTable` answers
        every read an :class:`ImmutableMemtable` of a state does (a reader's states are never
        flushed), hence the cast."""
        return cast(tuple[ImmutableMemtable, ...], tuple(f.table for f in reversed(self.tables)))

    def get(self, key: bytes) -> Entry | Version | None:
        """``(seq, value)`` of ``key`` in the newest table holding it (tests, introspection)."""
        for f in reversed(self.tables):
            found = f.table.get(key)
            if found is not None:
                return found
        return None

    def count(self) -> int:
        return len(self.tables)

    def size_bytes(self) -> int:
        return sum(f.table.size_bytes for f in self.tables)


def _above(batch: pa.RecordBatch, seq: int) -> pa.RecordBatch:
    if seq == 0 or batch.num_rows == 0 or _min_seq(batch) > seq:
        return batch
    return batch.filter(pc.greater(batch.column(1), pa.scalar(seq, pa.uint64())))


def _min_seq(batch: pa.RecordBatch) -> int:
    low = pc.min(batch.column(1)).as_py()
    return 0 if low is None else int(low)


def _newer_than(table: ImmutableMemtable | VersionTable, seq: int) -> Memtable | VersionTable:
    if isinstance(table, VersionTable):
        return table.newer_than(seq)
    batch = table.batch
    out = Memtable()
    out.put_batch(batch.filter(pc.greater(batch.column(1), pa.scalar(seq, pa.uint64()))))
    return out


def _load_wal(wal: WalLog, wal_id: int) -> pa.RecordBatch:
    """One WAL SST as a single batch, so that applying it is one atomic step for readers."""
    batches = wal.read(wal_id).entries.to_batches()
    if not batches:
        return empty_batch()
    return batches[0] if len(batches) == 1 else pa.concat_batches(batches)


def fetch_wal(wal: WalLog, ids: Sequence[int]) -> Iterator[tuple[int, pa.RecordBatch]]:
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
