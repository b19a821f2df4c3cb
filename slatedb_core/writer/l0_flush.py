"""What a memtable flush to L0 commits (SlateDB RFC 0001 "Writes", SlateDB RFC 0004 "Writers"), as
pure manifest changes; :meth:`~slatedb_core.writer.engine.WriterEngine._flush_one` runs the steps:

1. wait until the frozen memtable's last WAL generation is durable (contiguously);
2. upload its L0 SST (:func:`write_l0_sst`: encoded and written a slice of rows at a time;
   kept for a retry of the flush, which must not name the rows twice);
3. commit :func:`l0_flush_change`: inside each attempt, the SST is checked against the GC
   boundary and re-homed if it fell behind (:class:`~slatedb_core.writer.gc_safety.NewSsts`); then the
   L0 view goes in front, ``last_l0_seq`` is raised, the writer checkpoint moved, and the replay
   point moved only as far as the *previous* flushes; a later commit (the next flush, or
   :func:`replay_point_change`) moves it past this flush's WAL SSTs. The lag costs a little
   replay at the next open and keeps the WAL as a second copy of the newest L0 SST. An explicit
   ``Db.flush_memtable`` asks for the replay point at once, so its flushes move it past their
   own WAL SSTs in the same commit (``confirmed_wal_id``): one manifest update per flush, as
   SlateDB's memtable flush makes (issue 42, goal 2).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc
from ulid import ULID

from slatedb_core.checkpoints import writer_checkpoint
from slatedb_core.compactor.output_ssts import SstParts, release_freed_arrow_memory
from slatedb_core.lsm.memtable import ImmutableMemtable
from slatedb_core.lsm.row_model import (
    KIND_MERGE,
    KIND_TOMBSTONE,
    ROW_SCHEMA,
    expired_mask,
    has_timestamps,
)
from slatedb_core.manifest.model import CompactedSst, Manifest, SstView
from slatedb_core.manifest.store import IdChange
from slatedb_core.sst import SstOptions, encode_sst
from slatedb_core.sst.create import write_new_sst, write_new_sst_streamed
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.gc_safety import NewSsts

# Measured RSS of a dict memtable entry beyond its key and value bytes (dict slot, tuple, int and
# bytes headers, WAL buffer copy): ~320 bytes against the 16 that size_bytes counts toward the SST size.
RESIDENT_OVERHEAD_PER_ENTRY = 320


def resident_bytes(imm: ImmutableMemtable) -> int:
    """What a frozen memtable really holds in memory, for backpressure (not for SST sizing)."""
    return int(imm.size_bytes + imm.entry_count * RESIDENT_OVERHEAD_PER_ENTRY)


def l0_rows(imm: ImmutableMemtable) -> pa.RecordBatch:
    """Step 2's rows: what SlateDB's memtable flush writes for the frozen memtable ``imm``
    (its ``flush.rs``): the rows of :meth:`ImmutableMemtable.l0_batch` (one per key, or the
    versions a flush keeps apart, see :mod:`slatedb_core.lsm.memtable_fold`) through SlateDB's
    retention at the table's last clock tick (``RetentionIterator``, SlateDB RFC 0003): a value
    whose ``expire_ts`` is at or before it becomes a tombstone (its ``expire_ts`` cleared, its
    ``create_ts`` kept), an expired merge operand is dropped. The tick is the newest
    write's (``last_tick``: the newest ``create_ts`` the memtable holds, or the tick of the
    writer's newest write when it was frozen, :meth:`~slatedb_core.lsm.memtable.Memtable.freeze`);
    a memtable without timestamps is flushed as it is, in ENTRY_SCHEMA (the fast path)."""
    return _retained(imm.l0_batch(), imm.last_tick)


def _retained(batch: pa.RecordBatch, tick: int | None) -> pa.RecordBatch:
    """``batch`` (rows of a frozen memtable, or a slice of them) through the retention of
    :func:`l0_rows` at clock ``tick``: row by row, so a slice at a time gives the same rows."""
    if tick is None or not has_timestamps(batch):
        return batch
    expired = expired_mask(batch, tick)
    if not bool(expired.any()):
        return batch
    merge = batch.column(2).to_numpy(zero_copy_only=False) == KIND_MERGE
    tomb = pa.array(expired & ~merge)
    cols = batch.columns
    rows = pa.RecordBatch.from_arrays(
        [
            cols[0],
            cols[1],
            pc.if_else(tomb, pa.scalar(KIND_TOMBSTONE, pa.uint8()), cols[2]),
            pc.if_else(tomb, pa.scalar(None, pa.binary()), cols[3]),
            pc.if_else(tomb, pa.scalar(None, pa.int64()), cols[4]),
            cols[5],
        ],
        schema=ROW_SCHEMA,
    )
    drop = expired & merge
    return rows.filter(pa.array(~drop)) if bool(drop.any()) else rows


L0_SLICE_BYTES = 8 << 20
"""About the bytes of rows a flush gathers, encodes and writes at a time (:func:`write_l0_sst`)."""


def write_l0_sst(
    store: ObjectStore, db_path: str, imm: ImmutableMemtable, options: SstOptions
) -> CompactedSst:
    """Step 2: create the L0 SST of :func:`l0_rows` under a fresh ULID, its bytes those
    :func:`~slatedb_core.sst.encode_sst` makes of them, encoded a slice of rows at a time
    (:meth:`ImmutableMemtable.l0_slices`) and handed to :meth:`ObjectStore.create_streamed`
    in parts as they are encoded (issue 42, goal 3).

    The create is the one :func:`~slatedb_core.sst.create.create_sst` makes, create-if-absent
    with "already exists holding these bytes" counted as ours: on a local disk the parts are
    written to a staged file as they come, synced and linked into place only if absent; on S3
    and in memory they are joined into one conditional PUT (only its parts, never the rows'
    sorted copy, the encoded rows and their joined copy at once)."""
    rows = max(1024, imm.entry_count * L0_SLICE_BYTES // max(1, imm.size_bytes))
    tick = imm.last_tick
    slices = (_retained(s, tick) for s in imm.l0_slices(rows))
    first = next((s for s in slices if s.num_rows), None)
    if first is None:  # nothing survives: the one-shot encoder writes the empty SST
        data, info = encode_sst(l0_rows(imm), options)
        return write_new_sst(store, db_path, data, info)
    parts = SstParts(options, first, False, ((s, False) for s in slices), L0_SLICE_BYTES)
    del first
    sst = write_new_sst_streamed(store, db_path, parts, ULID())
    del parts
    release_freed_arrow_memory()  # the flush's slices, freed a moment ago (see there)
    return sst


def flush_clock_tick(imm: ImmutableMemtable) -> int:
    """The clock tick a flush of ``imm`` commits as ``last_l0_clock_tick`` (the clock SlateDB's
    compactions expire TTL rows at, RFC 0003): SlateDB's is its memtable's last tick, the tick
    of its newest write (``flush.rs``). Ours is ``last_tick`` too: every write path of the
    writer reads the clock once per write, as SlateDB's does, and the freeze keeps the newest
    tick. The freeze time, later than the newest write, expired rows SlateDB keeps (issue 38
    review, tests/review/test_issue38_compaction_clock.py): it is only the fallback of a table
    that holds no tick at all."""
    return imm.last_tick if imm.last_tick is not None else imm.frozen_at_ms


def l0_flush_change(
    new: NewSsts,
    *,
    epoch: int,
    confirmed_wal_id: int,
    last_wal_id: Callable[[], int],
    max_parallel_writes: int,
    max_seq: int,
    clock_tick: int = 0,
) -> IdChange:
    """Step 3: add the one SST of ``new`` as the newest L0 view. ``confirmed_wal_id``: the
    highest WAL id whose rows are in an earlier flush's committed L0 SST; ``last_wal_id`` gives
    the WAL id of the writer's contiguous durable prefix when the change is applied.
    ``clock_tick``: the clock when the memtable stopped taking writes, raised into
    ``last_l0_clock_tick``: the clock compactions expire TTL rows at (SlateDB RFC 0003; SlateDB
    records its last write's tick, which is at or before ours)."""

    def change(m: Manifest, next_id: int) -> Manifest | None:
        if new.committed_in(m) or 0 < max_seq <= m.last_l0_seq:
            # committed by an earlier attempt of this flush, whose SST may since have been
            # compacted away: last_l0_seq covers every seq of it (flushes commit in seq order)
            return None
        (sst,) = new.secure()
        view = SstView(view_id=sst.id, sst_id=sst.id)
        m = dataclasses.replace(
            m,
            ssts=(*m.ssts, sst),
            l0=(view, *m.l0),
            replay_after_wal_id=max(m.replay_after_wal_id, confirmed_wal_id),
            # only the contiguous prefix: ids past it may be holes a next writer must fence
            next_wal_sst_id=max(m.next_wal_sst_id, last_wal_id() + 1),
            # our fence is complete: the next writer need only cover our own window
            max_parallel_writes=max_parallel_writes,
            last_l0_seq=max(m.last_l0_seq, max_seq),
            last_l0_clock_tick=max(m.last_l0_clock_tick, clock_tick),
        )
        return writer_checkpoint(m, next_id, epoch)

    return change


def replay_point_change(confirmed_wal_id: int, epoch: int) -> IdChange:
    """Move the replay point up to ``confirmed_wal_id`` (the WAL ids of committed flushes)."""

    def change(m: Manifest, next_id: int) -> Manifest | None:
        if m.replay_after_wal_id >= confirmed_wal_id:
            return None
        m = dataclasses.replace(m, replay_after_wal_id=confirmed_wal_id)
        return writer_checkpoint(m, next_id, epoch)

    return change
