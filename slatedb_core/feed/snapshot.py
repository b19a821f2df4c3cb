"""The snapshot that bootstraps a change feed: the newest version of every live key in one
manifest's SSTs, in key order, each with the ``expire_ts`` its SST row carries
(docs/changes.md, "Reading").

The rows are what a read of that manifest returns (:meth:`~slatedb_core.lsm.dbstate.DbState.scan`:
L0 views newest first, then the sorted runs, older versions dropped, merge operands folded,
tombstones dropped), built from the same parts (:func:`~slatedb_core.sst.block.flagged_pieces`,
:func:`~slatedb_core.lsm.iterators.newest_versions`,
:func:`~slatedb_core.lsm.iterators.merge_sorted`), which carry no timestamps. A TTL row's
``expire_ts`` (SlateDB RFC 0003; docs/format.md, "SSTs and WAL SSTs") is taken on the way: each
SST block is looked at as it is decoded, and one whose rows carry an ``expire_ts`` (the decoder
flags it) leaves them, by key and seq, for the output row of the same key and seq. A database
without TTL rows pays one flag test per block; ``create_ts`` stays null, as before.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core.keys import KeyRange
from slatedb_core.lsm.dbstate import SstHandle, resolve_sst_path
from slatedb_core.lsm.iterators import merge_sorted, newest_versions
from slatedb_core.lsm.merge_operator import MergeOperator
from slatedb_core.lsm.row_model import ROW_SCHEMA
from slatedb_core.manifest.model import Manifest, SstView
from slatedb_core.sst.block import Block, flagged_pieces, rows_in
from slatedb_core.sst.reader import SstScan
from slatedb_core.store.objectstore import ObjectStore

_NO_TS = np.iinfo(np.int64).min
_SIDE = pa.schema([("key", pa.binary()), ("seq", pa.uint64()), ("expire_ts", pa.int64())])


class _Expiries:
    """The ``(key, seq, expire_ts)`` of the TTL rows the scans decoded and no output row has
    taken yet."""

    def __init__(self) -> None:
        self.pending: list[pa.RecordBatch] = []

    def add(self, block: Block, lo: int, hi: int) -> None:
        expire = block.expire[lo:hi]
        has = expire != _NO_TS
        if not has.any():
            return
        rows = pa.RecordBatch.from_arrays(
            [
                block.batch.column(0).slice(lo, hi - lo),
                block.batch.column(1).slice(lo, hi - lo),
                pa.array(expire, pa.int64()),
            ],
            schema=_SIDE,
        )
        self.pending.append(rows.filter(pa.array(has)))

    def fill(self, rows: pa.RecordBatch) -> pa.RecordBatch:
        """``rows`` (ENTRY_SCHEMA, key order) as ROW_SCHEMA: each row's ``expire_ts`` where a
        TTL row of the same key and seq was decoded, else null; ``create_ts`` null. What is
        left of the TTL rows at or below the last key of ``rows`` is dropped (no later output
        row has such a key)."""
        n = rows.num_rows
        nulls = pa.nulls(n, pa.int64())
        if not self.pending or n == 0:
            return _with(rows, nulls)
        side = pa.Table.from_batches(self.pending, schema=_SIDE)
        last = rows.column(0)[n - 1]
        rest = side.filter(pc.greater(side.column("key"), last))
        self.pending = rest.combine_chunks().to_batches() if rest.num_rows else []
        mine = pa.table({"key": rows.column(0), "seq": rows.column(1), "i": pa.array(np.arange(n))})
        hit = mine.join(side, ["key", "seq"], join_type="inner")
        if hit.num_rows == 0:
            return _with(rows, nulls)
        at = hit.column("i").to_numpy()
        out = np.full(n, _NO_TS, dtype=np.int64)
        out[at] = hit.column("expire_ts").to_numpy()
        return _with(rows, pa.array(out, pa.int64(), mask=out == _NO_TS))


def _with(rows: pa.RecordBatch, expire: pa.Array) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [*rows.columns[:4], expire, pa.nulls(rows.num_rows, pa.int64())], schema=ROW_SCHEMA
    )


def _scan(h: SstHandle, start: bytes | None, seen: _Expiries) -> Iterable[pa.RecordBatch]:
    """The rows of view ``h`` from ``start`` (what :meth:`SstHandle.scan` yields, as an
    :class:`SstScan`), telling ``seen`` each block's TTL rows as it is decoded."""
    clip = h.range.intersect(KeyRange(start, None))
    if clip.is_empty():
        return ()
    reader = h.reader()
    n = reader.block_count
    lo_key, hi_key = clip.start, clip.end
    if n == 0 or (lo_key is not None and hi_key is not None and lo_key >= hi_key):
        return ()
    keys = reader.index_keys
    b0 = 0 if lo_key is None else max(0, bisect.bisect_left(keys, lo_key) - 1)
    b1 = n if hi_key is None else bisect.bisect_left(keys, hi_key)

    def blocks() -> Iterator[tuple[int, Block]]:
        for b, block in reader.blocks(b0, b1):
            if block.has_expire:
                lo, hi = rows_in(block, b, b0, b1, lo_key, hi_key)
                if hi > lo:
                    seen.add(block, lo, hi)
            yield b, block

    merges = reader.stats is None or reader.stats.num_merges > 0
    pieces = flagged_pieces(reader.name, blocks(), b0, b1, lo_key, hi_key, True)
    return SstScan(pieces, may_hold_merges=merges)


def _run(
    handles: Sequence[SstHandle], start: bytes | None, seen: _Expiries
) -> Iterator[pa.RecordBatch]:
    for h in handles:
        yield from _scan(h, start, seen)


def snapshot_rows(
    store: ObjectStore,
    db_path: str,
    manifest: Manifest,
    after_key: bytes | None,
    batch_rows: int,
    merge_operator: MergeOperator | None,
) -> Iterator[pa.RecordBatch]:
    """ROW_SCHEMA batches of the newest version of every live key of ``manifest`` after
    ``after_key`` (None: from the first), in key order (see the module docstring)."""
    start = None if after_key is None else after_key + b"\x00"
    seen = _Expiries()

    def handle(view: SstView) -> SstHandle:
        sst = manifest.sst(view.sst_id)
        if sst is None:
            raise KeyError(view.sst_id)
        return SstHandle(store, resolve_sst_path(db_path, manifest, sst), sst, view, None)

    sources: list[Iterable[pa.RecordBatch]] = [
        newest_versions(_scan(handle(v), start, seen), keep_operands=True) for v in manifest.l0
    ]
    sources += [
        newest_versions(_run([handle(v) for v in r.views], start, seen), keep_operands=True)
        for r in manifest.compacted
    ]
    merged = merge_sorted(
        sources, drop_tombstones=True, batch_size=batch_rows, merge_operator=merge_operator
    )
    for rows in merged:
        if rows.num_rows:
            yield seen.fill(rows)


__all__ = ["snapshot_rows"]
