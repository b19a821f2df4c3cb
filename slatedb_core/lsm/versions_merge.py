"""An all-versions k-way merge: what a compaction reads, every version of every key.

The sources (SSTs, sorted runs) are given newest first; each is key-sorted and may hold several
versions of a key, newest first (SlateDB keeps them while a snapshot may read them:
docs/format.md, "SSTs and WAL SSTs"). The output is key-sorted with every version of a key
newest first (by seq), and each output batch holds *all* the versions of its keys, so that
:func:`slatedb_core.lsm.retention.retain` can decide per key. Nothing is dropped here.

It works in rounds like :func:`slatedb_core.lsm.iterators.merge_sorted` (the read side's
newest-wins merge): every source buffers a few batches, and a round sorts, in one vectorised
stable sort, the rows below ``bound``. With repeated keys a source's next batch may continue its
last buffered key, so ``bound`` is exclusive: the smallest last buffered key over the sources
that are not exhausted; every row below it is buffered in every source. A source holding only
rows at ``bound`` is read further until it moves past it. Rows keep ``ROW_SCHEMA`` (timestamps)
when any source batch of the round has it (:func:`~slatedb_core.lsm.row_model.concat_rows`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core.lsm.entries import conform, sortable_keys
from slatedb_core.lsm.iterators import key_reader, search_sorted
from slatedb_core.lsm.retention import Retention, retain, retain_ordered
from slatedb_core.lsm.row_model import ENTRY_SCHEMA, ROW_SCHEMA, concat_rows

__all__ = ["merge_versions"]

_MIN_BUFFERED_ROWS = 8192
_SMALL_BATCH_ROWS = 2048
_MIN_PASSTHROUGH_ROWS = 1024


def _rows_of(b: pa.RecordBatch) -> pa.RecordBatch:
    if b.schema.equals(ENTRY_SCHEMA) or b.schema.equals(ROW_SCHEMA):
        return b
    return conform(b)


def _first_key(b: pa.RecordBatch) -> bytes:
    return key_reader(b.column(0))(0)


def _last_key(b: pa.RecordBatch) -> bytes:
    return key_reader(b.column(0))(b.num_rows - 1)


class _Source:
    """One input stream with a look-ahead buffer of non-empty batches, in key order."""

    __slots__ = ("buf", "it", "rows")

    def __init__(self, batches: Iterable[pa.RecordBatch]) -> None:
        self.it: Iterator[pa.RecordBatch] | None = iter(batches)
        self.buf: deque[pa.RecordBatch] = deque()
        self.rows = 0

    @property
    def exhausted(self) -> bool:
        return self.it is None

    def fill(self, want: int) -> None:
        """Pull batches until ``want`` rows are buffered or the stream ends."""
        fresh: list[pa.RecordBatch] = []
        before = self.rows
        while self.it is not None and self.rows < want:
            b = next(self.it, None)
            if b is None:
                self.it = None
            elif b.num_rows:
                fresh.append(_rows_of(b))
                self.rows += b.num_rows
        if len(fresh) > 2 and self.rows - before < _SMALL_BATCH_ROWS * len(fresh):
            fresh = [concat_rows(fresh)]  # many tiny batches: glue them once
        self.buf.extend(fresh)

    def first_key(self) -> bytes:
        return _first_key(self.buf[0])

    def last_key(self) -> bytes:
        return _last_key(self.buf[-1])

    def count(self, bound: bytes, side: Literal["left", "right"]) -> int:
        total = 0
        for b in self.buf:
            keys = b.column(0)
            i = search_sorted(keys, bound, side)
            total += i
            if i < len(keys):
                break
        return total

    def take(self, rows: int, out: list[pa.RecordBatch]) -> None:
        self.rows -= rows
        buf = self.buf
        while rows:
            b = buf[0]
            if b.num_rows <= rows:
                out.append(buf.popleft())
                rows -= b.num_rows
            else:
                out.append(b.slice(0, rows))
                buf[0] = b.slice(rows)
                rows = 0

    def drain(self) -> Iterator[pa.RecordBatch]:
        yield from self.buf
        self.buf.clear()
        self.rows = 0
        if self.it is not None:
            for b in self.it:
                if b.num_rows:
                    yield _rows_of(b)
            self.it = None


def _glued(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``batches`` of one key-sorted source with neighbours that share a boundary key glued
    together, so that no key continues into the next batch (a copy only where one does)."""
    pending: list[pa.RecordBatch] = []
    last: bytes | None = None
    for b in batches:
        if pending and _first_key(b) != last:
            yield pending[0] if len(pending) == 1 else concat_rows(pending)
            pending = []
        pending.append(b)
        last = _last_key(b)
    if pending:
        yield pending[0] if len(pending) == 1 else concat_rows(pending)


def merge_versions(
    sources: Sequence[Iterable[pa.RecordBatch]], policy: Retention | None = None
) -> Iterator[pa.RecordBatch]:
    """Merge key-sorted streams given NEWEST FIRST into one key-sorted stream holding every
    version of each key, newest first; each output batch holds all versions of its keys.

    With ``policy``, each batch is what :func:`~slatedb_core.lsm.retention.retain` keeps of it
    (a round's sort and retention then copy the kept rows once)."""
    for b in _merge_versions(sources, policy):
        if policy is not None and not b.num_rows:
            continue
        yield b


def _merge_versions(
    sources: Sequence[Iterable[pa.RecordBatch]], policy: Retention | None
) -> Iterator[pa.RecordBatch]:
    def kept(b: pa.RecordBatch) -> pa.RecordBatch:
        return b if policy is None else retain(b, policy)

    live: list[_Source] = []
    for src in sources:
        s = _Source(src)
        s.fill(_MIN_BUFFERED_ROWS)
        if s.rows:
            live.append(s)
    while live:
        if len(live) == 1:
            yield from map(kept, _glued(live[0].drain()))
            return
        firsts = [s.first_key() for s in live]
        lowest = min(range(len(live)), key=firsts.__getitem__)
        low = live[lowest]
        limit = min(f for i, f in enumerate(firsts) if i != lowest)
        if not low.exhausted:
            limit = min(limit, low.last_key())
        ahead = low.count(limit, "left") if firsts[lowest] < limit else 0
        if ahead >= _MIN_PASSTHROUGH_ROWS or (ahead and ahead == low.rows):
            pieces: list[pa.RecordBatch] = []
            low.take(ahead, pieces)
            yield from map(kept, _glued(pieces))
        else:
            bounds = [s.last_key() for s in live if not s.exhausted]
            bound = min(bounds) if bounds else None
            pieces = []
            for s in live:  # in source order: the stable sort keeps newer sources first
                s.take(s.rows if bound is None else s.count(bound, "left"), pieces)
            if pieces:
                yield _sort_round(pieces, policy)
            else:  # every row buffered is at or above bound: read past it
                for s in live:
                    if not s.exhausted and s.last_key() == bound:
                        s.fill(s.rows + _MIN_BUFFERED_ROWS)
        for s in live:
            if s.rows < _MIN_BUFFERED_ROWS:
                s.fill(_MIN_BUFFERED_ROWS)
        live = [s for s in live if s.rows]


def _sort_round(pieces: list[pa.RecordBatch], policy: Retention | None) -> pa.RecordBatch:
    """The round's rows sorted by key, the versions of a key newest first (then retained)."""
    combined = concat_rows(pieces)
    n = combined.num_rows
    keys = combined.column(0)
    skeys = sortable_keys([p.column(0) for p in pieces])
    if skeys is not None:
        order = np.argsort(skeys, kind="stable")
        sk = skeys[order]
        same = sk[1:] == sk[:-1]
    else:
        order = pc.sort_indices(keys).to_numpy()
        sorted_keys = pc.take(keys, pa.array(order))
        same = pc.equal(sorted_keys.slice(1), sorted_keys.slice(0, n - 1)).to_numpy(
            zero_copy_only=False
        )
    if bool(same.any()):
        # sources are newest first, so a key's versions are already newest first unless two
        # sources interleave in seq (never in a well-formed tree, but cheap to get right)
        seqs = combined.column(1).to_numpy(zero_copy_only=False)[order]
        if bool(np.any(seqs[1:][same] > seqs[:-1][same])):
            arrow_order = pc.sort_indices(
                pa.Table.from_batches([combined.select([0, 1])]),
                sort_keys=[("key", "ascending"), ("seq", "descending")],
            )
            order = arrow_order.to_numpy()
    if policy is not None:
        first = np.ones(n, dtype=np.bool_)
        first[1:] = ~same
        return retain_ordered(combined, order, first, policy)
    if bool(np.all(order[1:] > order[:-1])):
        return combined
    return combined.take(pa.array(order))
