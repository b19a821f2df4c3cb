"""The rows a compaction reads: every version in each source, with SlateDB's timestamps.

A compaction must see what SlateDB wrote, as written: every version of a key (a snapshot may
read an older one), merge operands, and each row's ``expire_ts`` / ``create_ts``, which decide
what the compaction keeps (:mod:`slatedb_core.lsm.retention`) and which the output SSTs carry on.
So SSTs are decoded "as written" (no clock: an expired row is still its value here; retention
applies the compaction clock) and a block whose rows carry timestamps comes as a ``ROW_SCHEMA``
batch. Blocks without timestamps (every block this engine writes without a TTL) come as they
always did: ``ENTRY_SCHEMA``, neighbouring whole blocks of one read as one zero-copy slice.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa

from slatedb_core.compactor.scheduler import CompactionPlan
from slatedb_core.errors import CorruptionError
from slatedb_core.keys import KeyRange
from slatedb_core.lsm.dbstate import SstHandle, resolve_sst_path
from slatedb_core.lsm.row_model import ROW_SCHEMA
from slatedb_core.manifest.model import Manifest, SstView
from slatedb_core.sst.block import Block, rows_in
from slatedb_core.sst.reader import SstReader
from slatedb_core.store.objectstore import ObjectStore

__all__ = ["plan_sources", "source_views", "sst_rows", "view_handle"]

_NO_TS = np.iinfo(np.int64).min


def source_views(plan: CompactionPlan) -> list[SstView]:
    if plan.kind == "l0":
        return list(plan.source_views)
    return [v for r in plan.source_runs for v in r.views]


def view_handle(store: ObjectStore, db_path: str, manifest: Manifest, view: SstView) -> SstHandle:
    """A handle of ``view`` of ``manifest`` without a block cache (a compaction reads each block
    once); CorruptionError for a view of an SST the manifest does not list."""
    sst = manifest.sst(view.sst_id)
    if sst is None:
        raise CorruptionError(f"manifest of {db_path}", f"view of unknown SST {view.sst_id}")
    return SstHandle(store, resolve_sst_path(db_path, manifest, sst), sst, view, None)


def plan_sources(
    store: ObjectStore,
    db_path: str,
    manifest: Manifest,
    plan: CompactionPlan,
    rng: KeyRange,
    readahead: int,
) -> list[Iterable[pa.RecordBatch]]:
    """One stream per source of ``plan`` (an L0 view or a sorted run), newest first, each
    clipped to its views' visible ranges and ``rng``; an SST is opened when first pulled."""
    if plan.kind == "l0":
        return [
            _lazy(view_handle(store, db_path, manifest, v), rng, readahead)
            for v in plan.source_views
        ]
    return [_run(store, db_path, manifest, r.views, rng, readahead) for r in plan.source_runs]


def _lazy(h: SstHandle, rng: KeyRange, readahead: int) -> Iterator[pa.RecordBatch]:
    clip = h.range.intersect(rng)
    if not clip.is_empty():
        yield from sst_rows(h.reader(), clip.start, clip.end, readahead)


def _run(
    store: ObjectStore,
    db_path: str,
    manifest: Manifest,
    views: tuple[SstView, ...],
    rng: KeyRange,
    readahead: int,
) -> Iterator[pa.RecordBatch]:
    for v in views:
        h = view_handle(store, db_path, manifest, v)
        if rng.end is not None and h.range.start is not None and h.range.start >= rng.end:
            return
        yield from _lazy(h, rng, readahead)


def _stamped(block: Block) -> bool:
    return block.has_expire or bool((block.create != _NO_TS).any())


def sst_rows(
    reader: SstReader, start: bytes | None, end: bytes | None, readahead: int | None
) -> Iterator[pa.RecordBatch]:
    """Every row of ``reader``'s SST with ``start <= key < end``, timestamps included where
    a block has any (see the module doc). ``reader`` must decode as written (no ``now_ms``)."""
    n = reader.block_count
    if n == 0 or (start is not None and end is not None and start >= end):
        return
    keys = reader.index_keys
    b0 = 0 if start is None else max(0, bisect.bisect_left(keys, start) - 1)
    b1 = n if end is None else bisect.bisect_left(keys, end)
    run: list[Block] = []  # whole, timestamp-less neighbouring blocks of one decoded group
    for b, block in reader.blocks(b0, b1, readahead):
        lo, hi = rows_in(block, b, b0, b1, start, end)
        if hi <= lo:
            continue
        stamped = _stamped(block)
        if not stamped and lo == 0 and hi == block.n:
            if run and (block.group is not run[-1].group or block.at != run[-1].at + run[-1].n):
                yield _joined(run)
                run = []
            run.append(block)
            continue
        if run:
            yield _joined(run)
            run = []
        batch = block.batch if lo == 0 and hi == block.n else block.batch.slice(lo, hi - lo)
        if stamped:
            expire, create = block.timestamps(lo, hi)
            batch = pa.RecordBatch.from_arrays([*batch.columns, expire, create], schema=ROW_SCHEMA)
        yield batch
    if run:
        yield _joined(run)


def _joined(run: list[Block]) -> pa.RecordBatch:
    first = run[0]
    if len(run) == 1:
        return first.batch
    rows = run[-1].at + run[-1].n - first.at
    return first.group.slice(first.at, rows)
