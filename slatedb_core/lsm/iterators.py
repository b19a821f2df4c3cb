"""Streaming, vectorised k-way merge of sorted ENTRY_SCHEMA batch streams.

A row-at-a-time heap merge costs microseconds per row in Python; this merge works in *rounds* so
that all per-row work happens inside NumPy/Arrow kernels. Each source keeps a small buffer of its
next batches. In a round, ``bound`` = the smallest "last buffered key" over the live sources: every
row with key <= bound is already buffered in every source (unbuffered rows of a source lie above its
last buffered key), so those rows can be merged now and never need revisiting. They are sorted with
one stable sort over the concatenation in source order (newest first), so the first row of each key
is the newest source's entry; the rest of each key is dropped, and tombstones too when asked. The
sort is of 8 bytes of each key (those after the prefix the round shares) as integers, rows whose
bytes tie compared whole; a round ends at about 64k rows, so that gathering its rows in key order
reads from the CPU's caches (issue 42, goal 4).

Two fast paths skip the sort: a lone live source is passed through (tombstones filtered), and when
one source's leading rows lie below every other source's first key they are emitted as they are,
which makes merging sources with disjoint key ranges (L0 SSTs of separate ranges, runs) nearly free.
Sources are only ever read a few batches ahead, so memory stays bounded whatever their size.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core.errors import InvalidArgument, UnsupportedFeature
from slatedb_core.lsm.entries import (
    ENTRY_SCHEMA,
    KIND_MERGE,
    KIND_TOMBSTONE,
    KIND_VALUE,
    arrow_first_of_runs,
    conform,
    first_of_runs,
    sortable_keys,
)
from slatedb_core.lsm.merge_operator import MergeOperator, resolve
from slatedb_core.lsm.row_model import Version, concat_rows
from slatedb_core.sst.reader import Flagged, SstScan

# Rows each source buffers before a round: a round's fixed cost (a dozen kernel calls) is then
# spread over enough rows even when a source yields tiny batches (e.g. one per 4 KiB SST block).
_MIN_BUFFERED_ROWS = 8192
# Batches averaging fewer rows than this are concatenated as they are buffered.
_SMALL_BATCH_ROWS = 2048
# A prefix shorter than this is merged in the next round rather than emitted on its own.
_MIN_PASSTHROUGH_ROWS = 1024
# Bytes of each key a merge round sorts by (after the prefix the round shares), as one integer.
_WINDOW_BYTES = 8
# Rows a merge round aims at: its gather of whole rows in a random order costs ~2.5x more per
# row once the round outgrows the CPU's caches (measured: 16 sources of 16 B keys + 100 B values,
# 64k-row rounds ~8 ns/row, 1M-row rounds ~20 ns/row).
_ROUND_ROWS = 65536
# An unordered merge (merge_sorted's ordered=False) hands its rounds' pieces on as they are,
# gluing (copying) only those under batch_size / this: a round of 16 sources' pieces glued into
# full batches copied every row once more (~10% of a Spark read's scan CPU).
_UNORDERED_SMALLEST = 8


def key_reader(keys: pa.Array) -> Callable[[int], bytes]:
    """``i -> keys[i]`` as bytes, read through memoryviews of the Arrow buffers.

    About 0.3 µs a key, several times cheaper than ``keys[i].as_py()`` or NumPy scalar indexing,
    which matters in bisection where this is the whole cost.
    """
    large = pa.types.is_large_binary(keys.type)
    if not (large or pa.types.is_binary(keys.type)):
        raise InvalidArgument(f"expected a binary array, got {keys.type}")
    _, offs_buf, data_buf = keys.buffers()
    if offs_buf is None:
        raise InvalidArgument("binary array without offsets")
    raw = memoryview(offs_buf)
    offs = raw[: len(raw) // 8 * 8].cast("q") if large else raw[: len(raw) // 4 * 4].cast("i")
    data = memoryview(data_buf) if data_buf is not None else memoryview(b"")
    base = keys.offset

    def read(i: int) -> bytes:
        j = base + i
        return bytes(data[offs[j] : offs[j + 1]])

    return read


def search_sorted(keys: pa.Array, needle: bytes, side: Literal["left", "right"] = "left") -> int:
    """Index at which ``needle`` would be inserted into sorted ``keys`` (NumPy ``searchsorted``).

    Measured on 64k 16-byte keys: ~7 µs (bisect over :func:`key_reader`), against ~8 µs bisecting
    over ``.as_py()`` and ~150 µs for a vectorised ``pc.less_equal`` + ``pc.sum``. Both ends are
    checked first because merge rounds and range filters mostly ask about the ends.
    """
    n = len(keys)
    if n == 0:
        return 0
    key_at = key_reader(keys)
    if side == "left":
        if needle <= key_at(0):
            return 0
        if key_at(n - 1) < needle:
            return n
        return bisect_left(range(n), needle, key=key_at)
    if side == "right":
        if needle < key_at(0):
            return 0
        if key_at(n - 1) <= needle:
            return n
        return bisect_right(range(n), needle, key=key_at)
    raise InvalidArgument(f"search_sorted: side must be 'left' or 'right', not {side!r}")


def _first_key(batch: pa.RecordBatch) -> bytes:
    return key_reader(batch.column(0))(0)


def _last_key(batch: pa.RecordBatch) -> bytes:
    return key_reader(batch.column(0))(batch.num_rows - 1)


class _Source:
    """One input stream with a look-ahead buffer of non-empty batches, in key order."""

    __slots__ = ("buf", "it", "rows")

    def __init__(self, batches: Iterable[pa.RecordBatch]) -> None:
        self.it: Iterator[pa.RecordBatch] | None = iter(batches)
        self.buf: deque[pa.RecordBatch] = deque()
        self.rows = 0

    def fill(self, want: int) -> None:
        """Pull batches until ``want`` rows are buffered or the stream ends."""
        it = self.it
        fresh: list[pa.RecordBatch] = []
        before = self.rows
        while it is not None and self.rows < want:
            b = next(it, None)
            if b is None:
                it = self.it = None
            elif b.num_rows:
                if not b.schema.equals(ENTRY_SCHEMA):
                    b = conform(b)
                fresh.append(b)
                self.rows += b.num_rows
        if len(fresh) > 2 and self.rows - before < _SMALL_BATCH_ROWS * len(fresh):
            # many tiny batches (one per SST block, say): glue them once, so that every later
            # step of the round deals with one array instead of hundreds
            fresh = [pa.concat_batches(fresh)]
        self.buf.extend(fresh)

    def first_key(self) -> bytes:
        return _first_key(self.buf[0])

    def last_key(self) -> bytes:
        return _last_key(self.buf[-1])

    def key_at(self, i: int) -> bytes:
        """The key of buffered row ``i`` (``0 <= i < rows``)."""
        for b in self.buf:
            if i < b.num_rows:
                return key_reader(b.column(0))(i)
            i -= b.num_rows
        raise InvalidArgument(f"row {i} is past the buffered rows")

    def count(self, bound: bytes, side: Literal["left", "right"]) -> int:
        """Buffered rows with key < bound (left) or <= bound (right)."""
        total = 0
        for b in self.buf:
            keys = b.column(0)
            i = search_sorted(keys, bound, side)
            total += i
            if i < len(keys):
                break
        return total

    def take(self, rows: int, out: list[pa.RecordBatch]) -> None:
        """Move the first ``rows`` buffered rows to ``out`` as zero-copy batches."""
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
        """Everything left, buffered then unread: for when no other source is live."""
        yield from self.buf
        self.buf.clear()
        self.rows = 0
        if self.it is not None:
            for b in self.it:
                if b.num_rows:
                    yield b if b.schema.equals(ENTRY_SCHEMA) else conform(b)
            self.it = None


def newest_versions(
    batches: Iterable[pa.RecordBatch], *, keep_operands: bool = False
) -> Iterator[pa.RecordBatch]:
    """A key-sorted ENTRY_SCHEMA stream with only the first (newest) row of each key.

    SlateDB keeps several versions of a key in one SST, newest first, while a snapshot of its may
    read them (docs/format.md, "SSTs and WAL SSTs"); the merge takes each source to hold a key
    once. One vectorised comparison of neighbouring keys per batch, skipped for the batches an
    :class:`SstScan` says hold distinct keys (every block of an SST we wrote); rows are dropped
    only where a key repeats, across batch boundaries too.

    ``keep_operands`` (reads, SlateDB RFC 0006): a key whose newest row is a merge operand keeps
    its older rows too, down to and including its first value or tombstone (the operand chain a
    read folds, :func:`merge_sorted`); such a chain is never cut between two output batches. A
    batch without operands costs one ``max`` over its kinds more."""
    if keep_operands and not (isinstance(batches, SstScan) and not batches.may_hold_merges):
        yield from _newest_with_chains(batches)
        return
    if isinstance(batches, SstScan):
        yield from _newest_flagged(batches.flagged())
        return
    last: bytes | None = None
    for b in batches:
        n = b.num_rows
        if n == 0:
            continue
        keys = b.column(0)
        first_repeats = last is not None and keys[0].as_py() == last
        last = keys[n - 1].as_py()
        b = _first_of_keys(b, first_repeats)
        if b.num_rows:
            yield b


def _newest_flagged(flagged: Iterator[Flagged]) -> Iterator[pa.RecordBatch]:
    """:func:`newest_versions` of an SST scan: a batch of distinct keys is compared only at its
    first key, with the previous batch's last."""
    last: bytes | None = None
    for b, distinct, first_key, last_key in flagged:
        first_repeats = first_key == last
        last = last_key
        if distinct:
            if first_repeats:
                b = b.slice(1)
        else:
            b = _first_of_keys(b, first_repeats)
        if b.num_rows:
            yield b


def _first_of_keys(b: pa.RecordBatch, first_repeats: bool) -> pa.RecordBatch:
    """The first row of each key of a non-empty key-sorted batch (without the first row when
    ``first_repeats``: its key ended the batch before)."""
    n = b.num_rows
    keys = b.column(0)
    repeats = pc.equal(keys.slice(1), keys.slice(0, n - 1))
    if first_repeats or pc.any(repeats).as_py():
        keep = np.empty(n, dtype=bool)
        keep[0] = not first_repeats
        keep[1:] = ~repeats.to_numpy(zero_copy_only=False)
        b = b.filter(pa.array(keep))
    return b


def _any_merge(b: pa.RecordBatch) -> bool:
    kinds = b.column(2).to_numpy(zero_copy_only=False)
    return bool(len(kinds)) and int(kinds.max()) >= KIND_MERGE


def _newest_with_chains(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """:func:`newest_versions` keeping operand chains. A chain still open at a batch's end (its
    key's rows so far all operands) is held back and emitted with the next batch, so that a
    merge round that reaches its key has all of its rows from this source."""
    flagged: Iterator[Flagged] | None = batches.flagged() if isinstance(batches, SstScan) else None
    it: Iterator[pa.RecordBatch] = iter(batches) if flagged is None else iter(())
    last: bytes | None = None  # the last key seen (of the held-back chain, when there is one)
    held: pa.RecordBatch | None = None
    while True:
        if flagged is not None:
            got = next(flagged, None)
            if got is None:
                break
            b, distinct, first_key, last_key = got
        else:
            nb = next(it, None)
            if nb is None:
                break
            b = nb
            if b.num_rows == 0:
                continue
            read = key_reader(b.column(0))
            first_key, last_key, distinct = read(0), read(b.num_rows - 1), False
        if b.num_rows == 0:
            continue
        first_repeats = first_key == last
        last = last_key
        if held is None and not _any_merge(b):  # today's path: nothing to keep
            if distinct:
                b = b.slice(1) if first_repeats else b
            else:
                b = _first_of_keys(b, first_repeats)
            if b.num_rows:
                yield b
            continue
        if held is not None:
            b = concat_rows([held, b]) if first_repeats else b
            if not first_repeats:  # the held chain's key ended with the previous batch
                yield held
            first_repeats = False
            held = None
        b, held = _chains(b, first_repeats)
        if b.num_rows:
            yield b
    if held is not None:
        yield held


def _chains(b: pa.RecordBatch, first_repeats: bool) -> tuple[pa.RecordBatch, pa.RecordBatch | None]:
    """The rows of key-sorted ``b`` a read needs: each key's first row, and while that row and
    the ones after it are operands, the next row too (the chain ends at a value or tombstone).
    ``first_repeats``: ``b``'s first key was closed in an earlier batch (all its rows go). Returns
    the rows to emit and the open chain at the end (held back), if any."""
    n = b.num_rows
    kinds = b.column(2).to_numpy(zero_copy_only=False)
    keys = b.column(0)
    start = np.empty(n, dtype=bool)
    start[0] = True
    if n > 1:
        start[1:] = pc.not_equal(keys.slice(1), keys.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    base = (kinds != KIND_MERGE).astype(np.int64)
    before = np.cumsum(base) - base  # bases before each row
    run_first = np.maximum.accumulate(np.where(start, np.arange(n), 0))
    keep = before == before[run_first]  # no base earlier in its key's rows
    if first_repeats:
        nxt = np.flatnonzero(start[1:])
        keep[: (int(nxt[0]) + 1 if len(nxt) else n)] = False
    held: pa.RecordBatch | None = None
    last_first = int(run_first[-1])
    if keep[-1] and kinds[-1] == KIND_MERGE and not (first_repeats and last_first == 0):
        held = b.slice(last_first)  # the last key's rows are all operands: open
        keep[last_first:] = False
    out = b if bool(keep.all()) else b.filter(pa.array(keep))
    return out, held


def merge_sorted(
    sources: Sequence[Iterable[pa.RecordBatch]],
    *,
    drop_tombstones: bool = True,
    batch_size: int = 65536,
    merge_operator: MergeOperator | None = None,
    ordered: bool = True,
) -> Iterator[pa.RecordBatch]:
    """Merge key-sorted ENTRY_SCHEMA streams given NEWEST FIRST into one key-unique stream.

    Each source holds a key once, except that a key whose newest row is a merge operand may be
    followed by its older rows (:func:`newest_versions` with ``keep_operands``). For a key in
    several sources the entry of the earliest source wins; tombstones still hide older entries
    when ``drop_tombstones`` removes them from the output. Output batches hold about
    ``batch_size`` rows.

    With ``drop_tombstones`` (a read), a key whose newest row is a merge operand reads as its
    operands folded onto its first older value or tombstone, over every source (SlateDB RFC 0006,
    :func:`~slatedb_core.lsm.merge_operator.resolve`); without ``merge_operator`` that raises
    :class:`~slatedb_core.errors.MergeOperatorMissing` naming the key, as SlateDB's scan does.
    Rounds without operands take the vectorised newest-wins path unchanged.

    ``ordered=False`` (a read that needs every live row once, in no particular order, such as a
    Spark partition; only with ``drop_tombstones``): the same rows, not in key order (the
    rounds' key ranges come in order, the rows of one round in any order). A round whose keys are all
    distinct and all values (no key in two sources: what a round's sort of key windows shows
    when no two windows tie) is returned as its sources' pieces, skipping the gather of its rows
    in key order; any other round (a key in several sources, tombstones, operands, windows that
    tie) is merged in key order as before.
    """
    if batch_size <= 0:
        raise InvalidArgument("merge_sorted: batch_size must be positive")
    if not ordered and not drop_tombstones:
        raise InvalidArgument("merge_sorted: ordered=False needs drop_tombstones")
    merged = _merge(sources, drop_tombstones, merge_operator, ordered)
    if not ordered:  # a round's pieces come as they are: glue only the small ones
        return _rechunk(merged, batch_size, max(1, batch_size // _UNORDERED_SMALLEST))
    return _rechunk(merged, batch_size)


def _merge(
    sources: Sequence[Iterable[pa.RecordBatch]],
    drop_tombstones: bool,
    op: MergeOperator | None = None,
    ordered: bool = True,
) -> Iterator[pa.RecordBatch]:
    live: list[_Source] = []
    capped = True  # rounds end at about _ROUND_ROWS (see below)
    for src in sources:
        s = _Source(src)
        s.fill(_MIN_BUFFERED_ROWS)
        if s.rows:
            live.append(s)
    while live:
        if len(live) == 1:
            for b in live[0].drain():
                yield _live_rows(b, op) if drop_tombstones else _refuse_merges(b)
            return
        firsts = [s.first_key() for s in live]
        lowest = min(range(len(live)), key=firsts.__getitem__)
        others = min(f for i, f in enumerate(firsts) if i != lowest)
        pieces: list[pa.RecordBatch] = []
        ahead = live[lowest].count(others, "left") if firsts[lowest] < others else 0
        if ahead >= _MIN_PASSTHROUGH_ROWS or (ahead and ahead == live[lowest].rows):
            live[lowest].take(ahead, pieces)
            for b in pieces:
                yield _live_rows(b, op) if drop_tombstones else _refuse_merges(b)
        else:
            bound = min(s.last_key() for s in live)
            lead = live[lowest]
            if capped and lead.rows * len(live) > _ROUND_ROWS:
                # a round's rows fit the CPU's caches, where its random gather is cheap: end it
                # at the lead source's share of _ROUND_ROWS (any bound at or above the lowest
                # first key takes a row; below every last key, none is left unbuffered). An
                # unordered round gathers nothing (larger rounds hand on larger pieces) until
                # one needs the ordered merge after all.
                bound = min(bound, lead.key_at(_ROUND_ROWS // len(live)))
            for s in live:  # in source order, so the stable sort keeps the newest entry first
                s.take(s.count(bound, "right"), pieces)
            capped = ordered or not _distinct_values(pieces)
            if not capped:
                yield from pieces  # each row the newest of its key, and live
            else:
                merged = _merge_pieces(pieces, drop_tombstones, op)
                yield merged if drop_tombstones else _refuse_merges(merged)
        for s in live:
            if s.rows < _MIN_BUFFERED_ROWS:
                s.fill(_MIN_BUFFERED_ROWS)
        live = [s for s in live if s.rows]


def _merge_pieces(
    pieces: list[pa.RecordBatch], drop_tombstones: bool, op: MergeOperator | None = None
) -> pa.RecordBatch:
    """Sort the round's rows by key (stable, so source order breaks ties) and keep the newest."""
    key_chunks = [p.column(0) for p in pieces]
    skeys = sortable_keys(key_chunks)
    if skeys is not None:
        got = _window_order(skeys, [p.num_rows for p in pieces])
        order, keep = got if got is not None else _full_sort(skeys)
    else:
        chunked = pa.chunked_array(key_chunks, pa.binary())
        arrow_order = pc.sort_indices(chunked)
        order = arrow_order.to_numpy()
        keep = arrow_first_of_runs(pc.take(chunked, arrow_order))
    if drop_tombstones:
        kinds = np.concatenate([p.column(2).to_numpy(zero_copy_only=False) for p in pieces])[order]
        values = kinds == KIND_VALUE
        if not values[keep].all() and (kinds[keep] == KIND_MERGE).any():
            # operand-headed keys: fold each over all of its rows (newest first), in this round
            rows_all = pa.concat_batches(pieces).take(pa.array(order))
            return _drop_dead(_resolve_chains(rows_all, keep, kinds, op))
        keep &= values
    rows = order[keep]
    if len(rows) == len(order) and bool(np.all(rows[1:] > rows[:-1])):
        return pa.concat_batches(pieces)  # the pieces were already in order with nothing to drop
    return _gather(pieces, rows, skeys)


def _distinct_values(pieces: list[pa.RecordBatch]) -> bool:
    """Whether the round's rows are all values (no tombstone, no operand) and no two hold one
    key: then every row is the newest of its key and lives (:func:`merge_sorted`'s
    ``ordered=False``). Keys of one width only; the check sorts :data:`_WINDOW_BYTES` bytes of
    each key (after the round's shared prefix) as integers and answers False where two
    windows tie (equal keys or not: the caller then merges the round in key order)."""
    for p in pieces:
        kinds = p.column(2).to_numpy(zero_copy_only=False)
        if len(kinds) and (int(kinds.min()) != KIND_VALUE or int(kinds.max()) != KIND_VALUE):
            return False
    skeys = sortable_keys([p.column(0) for p in pieces])
    if skeys is None or len(skeys) == 0:
        return False
    width = skeys.dtype.itemsize
    if sum(_data_bytes(p.column(0)) for p in pieces) != width * len(skeys):
        return False  # padded keys of several widths: their windows are not the raw bytes
    n = len(skeys)
    mat = skeys.view(np.uint8).reshape(n, width)
    lo, hi = _round_ends(mat, [p.num_rows for p in pieces])
    common = next((j for j, (x, y) in enumerate(zip(lo, hi, strict=True)) if x != y), width)
    # distinct windows are distinct keys (a window is bytes of its key); tied ones may not be
    # (stable: timsort merges the pieces' sorted runs, about twice as fast as a quicksort)
    ints = np.sort(
        _window_ints(skeys, mat, common, min(_WINDOW_BYTES, width - common)), kind="stable"
    )
    return not bool((ints[1:] == ints[:-1]).any())


def _round_ends(mat: npt.NDArray[np.uint8], sizes: list[int]) -> tuple[bytes, bytes]:
    """The smallest first key and the largest last key of a round's sorted pieces (``sizes``:
    their rows, in ``mat``'s rows): every key of the round lies between them."""
    ends = np.cumsum(sizes)
    starts = ends - np.asarray(sizes)
    nonempty = starts < ends
    lo = min(mat[i].tobytes() for i in starts[nonempty].tolist())
    hi = max(mat[i].tobytes() for i in (ends[nonempty] - 1).tolist())
    return lo, hi


def _full_sort(skeys: npt.NDArray[np.bytes_]) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
    """The stable order of ``skeys`` (whole keys) and the first row of each key in it."""
    order = np.argsort(skeys, kind="stable")
    return order, first_of_runs(skeys[order])


def _window_order(
    skeys: npt.NDArray[np.bytes_], sizes: list[int]
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]] | None:
    """:func:`_full_sort` of a round's keys (``sizes``: its pieces' rows, each piece sorted),
    sorting :data:`_WINDOW_BYTES` bytes of each key as an integer instead of the whole key.

    Every key of the round lies between the pieces' smallest first key and largest last key, so
    shares their common prefix; the window is the bytes after it (about half the cost of a stable
    sort of 16-byte strings). Rows whose windows tie are then compared whole: equal keys stay in
    source order (the sort is stable) and all but the first are dropped; keys that differ past
    the window and came out of order make this return None (the caller sorts whole keys)."""
    n = len(skeys)
    width = skeys.dtype.itemsize
    if n == 0 or width == 0:
        return None
    mat = skeys.view(np.uint8).reshape(n, width)
    lo, hi = _round_ends(mat, sizes)
    common = width
    for j, (x, y) in enumerate(zip(lo, hi, strict=True)):
        if x != y:
            common = j
            break
    span = min(_WINDOW_BYTES, width - common)
    ints = _window_ints(skeys, mat, common, span)
    order = np.argsort(ints, kind="stable")
    ranked = ints[order]
    first = np.ones(n, dtype=np.bool_)
    tie = np.flatnonzero(ranked[1:] == ranked[:-1])
    if len(tie):
        if common + span < width:  # the window does not cover the rest of the key
            a, b = skeys[order[tie]], skeys[order[tie + 1]]
            if bool((a > b).any()):
                return None
            tie = tie[a == b]
        first[tie + 1] = False
    return order, first


def _window_ints(
    skeys: npt.NDArray[np.bytes_], mat: npt.NDArray[np.uint8], at: int, span: int
) -> npt.NDArray[np.uint64]:
    """Bytes ``at`` to ``at + span`` (``span <= 8``) of each key as a big-endian integer (the
    bytes in its high end): from the keys' 8-byte words with shifts when the width is a multiple
    of 8 and the window is the full 8 bytes, else through a zero-padded copy."""
    n, width = mat.shape
    if span == 8 and width % 8 == 0:
        words = skeys.view(">u8").reshape(n, width // 8)
        q, r = divmod(at, 8)
        ints = words[:, q].astype(np.uint64)
        if r:
            ints <<= np.uint64(8 * r)
            ints |= words[:, q + 1].astype(np.uint64) >> np.uint64(64 - 8 * r)
        return ints
    window = np.zeros((n, 8), dtype=np.uint8)
    if span:
        window[:, :span] = mat[:, at : at + span]
    return window.view(">u8").reshape(n).astype(np.uint64)


def _gather(
    pieces: list[pa.RecordBatch],
    rows: npt.NDArray[np.intp],
    skeys: npt.NDArray[np.bytes_] | None,
) -> pa.RecordBatch:
    """The round's rows at ``rows`` (indices into the pieces' concatenation). Keys of one width
    come straight from ``skeys`` (their fixed-width form is then the raw key bytes), values of
    one width (no nulls) through a NumPy take of fixed-size items, seqs and kinds through NumPy;
    anything else through Arrow's take."""
    seqs = np.concatenate([p.column(1).to_numpy(zero_copy_only=False) for p in pieces])[rows]
    kinds = np.concatenate([p.column(2).to_numpy(zero_copy_only=False) for p in pieces])[rows]
    width = 0 if skeys is None else skeys.dtype.itemsize
    keys: pa.Array | None = None
    if skeys is not None and width and width * len(rows) < 2**31:
        if sum(_data_bytes(p.column(0)) for p in pieces) == width * len(skeys):
            keys = _take_items(skeys.view(f"V{width}"), rows)
    values = _fixed_take([p.column(3) for p in pieces], rows)
    if keys is None or values is None:
        combined = pa.concat_batches(pieces).take(pa.array(rows))
        keys = combined.column(0) if keys is None else keys
        values = combined.column(3) if values is None else values
    return pa.RecordBatch.from_arrays(
        [keys, pa.array(seqs, pa.uint64()), pa.array(kinds, pa.uint8()), values],
        schema=ENTRY_SCHEMA,
    )


def _pool_items(n: int, width: int) -> tuple[pa.Buffer, npt.NDArray[np.void]]:
    """A buffer for ``n`` items of ``width`` bytes from Arrow's pool (which keeps freed memory
    mapped: a fresh NumPy array of a round's size faults in page by page, as costly as the copy
    into it), and a writable view of it as ``n`` fixed-size items."""
    buf = pa.allocate_buffer(n * width)
    return buf, np.frombuffer(buf, dtype=f"V{width}", count=n)


def _fixed_binary(buf: pa.Buffer, n: int, width: int) -> pa.Array:
    """A binary array of ``n`` items of ``width`` bytes each, over ``buf``."""
    offsets = np.arange(0, width * n + 1, width, dtype=np.int32)
    return pa.BinaryArray.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), buf])


def _take_items(items: npt.NDArray[np.void], rows: npt.NDArray[np.intp]) -> pa.Array:
    """A binary array of the fixed-size ``items`` at ``rows``, copied into Arrow's pool."""
    width = items.dtype.itemsize
    buf, out = _pool_items(len(rows), width)
    np.take(items, rows, out=out, mode="clip")  # in range; "raise" would buffer the output
    return _fixed_binary(buf, len(rows), width)


def _fixed_take(chunks: list[pa.Array], rows: npt.NDArray[np.intp]) -> pa.Array | None:
    """``concat(chunks).take(rows)`` when every item of ``chunks`` (binary, no nulls) has one
    width: the items as NumPy fixed-size items, a random take of which copies them in one
    pass (Arrow's take of binary works item by item). None otherwise."""
    width = -1
    parts: list[npt.NDArray[np.void]] = []
    total = 0
    for c in chunks:
        n = len(c)
        if n == 0:
            continue
        if c.null_count:
            return None
        offs = np.frombuffer(c.buffers()[1], dtype=np.int32, count=n + 1, offset=c.offset * 4)
        w = int(offs[1] - offs[0])
        if w <= 0 or (width >= 0 and w != width) or int(offs[-1] - offs[0]) != w * n:
            return None
        if n > 1 and not bool((np.diff(offs) == w).all()):
            return None
        width = w
        data = np.frombuffer(c.buffers()[2], dtype=np.uint8)
        parts.append(data[int(offs[0]) : int(offs[-1])].view(f"V{w}"))
        total += n
    if width <= 0 or width * max(total, len(rows)) >= 2**31:
        return None
    if len(parts) == 1:
        return _take_items(parts[0], rows)
    scratch_buf, scratch = _pool_items(total, width)
    np.concatenate(parts, out=scratch)
    out = _take_items(scratch, rows)
    del scratch, scratch_buf
    return out


def _data_bytes(keys: pa.Array) -> int:
    """Bytes of the values of a binary array (its last offset minus its first)."""
    n = len(keys)
    if n == 0:
        return 0
    offs = np.frombuffer(keys.buffers()[1], dtype=np.int32, count=n + 1, offset=keys.offset * 4)
    return int(offs[-1] - offs[0])


def _resolve_chains(
    rows: pa.RecordBatch,
    first: npt.NDArray[np.bool_],
    kinds: npt.NDArray[np.uint8],
    op: MergeOperator | None,
) -> pa.RecordBatch:
    """Key-sorted ``rows`` (each key's rows newest first; ``first`` marks each key's first row,
    ``kinds`` their kinds) with one row per key: the first row, or for a key whose first row is
    a merge operand, the value its rows resolve to (a tombstone when they resolve to none)."""
    heads = np.flatnonzero(first)
    ends = np.append(heads[1:], len(kinds))
    folding = np.flatnonzero(kinds[heads] == KIND_MERGE)
    out = rows.take(pa.array(heads))
    if not len(folding):
        return out
    keys = out.column(0)
    seq_col = rows.column(1)
    vals = rows.column(3)
    new_values: list[bytes | None] = out.column(3).to_pylist()
    new_kinds = kinds[heads].copy()
    for j in folding.tolist():
        a, z = int(heads[j]), int(ends[j])
        key = keys[j].as_py()
        versions = (
            Version(int(seq_col[i].as_py()), int(kinds[i]), vals[i].as_py(), None, None)
            for i in range(a, z)
        )
        value = resolve(key, versions, op)
        new_values[j] = value
        new_kinds[j] = KIND_TOMBSTONE if value is None else KIND_VALUE
    cols = list(out.columns)
    cols[2] = pa.array(new_kinds, pa.uint8())
    cols[3] = pa.array(new_values, pa.binary())
    return pa.RecordBatch.from_arrays(cols, schema=out.schema)


def _live_rows(batch: pa.RecordBatch, op: MergeOperator | None) -> pa.RecordBatch:
    """A key-sorted batch of one source (which may hold operand chains, see
    :func:`newest_versions`) as a read returns it: operands resolved, tombstones dropped."""
    kinds = batch.column(2).to_numpy(zero_copy_only=False)
    values = kinds == KIND_VALUE
    if np.count_nonzero(values) == len(values):  # all values: the common case, one pass
        return batch
    if not bool((kinds == KIND_MERGE).any()):
        return batch.filter(pa.array(values))
    keys = batch.column(0)
    n = batch.num_rows
    first = np.ones(n, dtype=np.bool_)
    if n > 1:
        first[1:] = pc.not_equal(keys.slice(1), keys.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    return _drop_dead(_resolve_chains(batch, first, kinds, op))


def _drop_dead(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` without its tombstones (no operands left in it)."""
    kinds = batch.column(2).to_numpy(zero_copy_only=False)
    values = kinds == KIND_VALUE
    if np.count_nonzero(values) == len(values):
        return batch
    return batch.filter(pa.array(values))


def _drop_tombstones(batch: pa.RecordBatch) -> pa.RecordBatch:
    kinds = batch.column(2).to_numpy(zero_copy_only=False)
    values = kinds == KIND_VALUE
    if np.count_nonzero(values) == len(values):  # all values (cheaper than values.all())
        return batch
    _refuse_merges(batch)
    return batch.filter(pa.array(values))


def _refuse_merges(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` (newest rows only) unless one is a SlateDB merge operand: a rewrite that keeps
    rows as they are (a compaction of this module's merge) has no operand to fold them into, and
    stops there rather than keep an operand as if it were the value."""
    if batch.num_rows and pc.any(pc.equal(batch.column(2), KIND_MERGE)).as_py():
        key = batch.filter(pc.equal(batch.column(2), KIND_MERGE)).column(0)[0].as_py()
        raise UnsupportedFeature(
            "merge operands",
            f"key {key!r} holds a merge operand, and this rewrite has no merge "
            "operator to apply it with",
        )
    return batch


def _rechunk(
    batches: Iterable[pa.RecordBatch], size: int, least: int | None = None
) -> Iterator[pa.RecordBatch]:
    """Regroup into batches of ``size // 2`` (or ``least``) to ``size`` rows (the last may hold
    fewer), copying only to glue small pieces together: a large batch is cut into equal
    zero-copy slices (a remainder glued to the next batch would copy up to ``size`` rows each
    time)."""
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    half = max(1, size // 2) if least is None else least
    for b in batches:
        n = b.num_rows
        if n == 0:
            continue
        if pending:
            take = min(n, size - pending_rows)
            pending.append(b if take == n else b.slice(0, take))
            pending_rows += take
            if pending_rows < half:
                continue
            yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)
            pending, pending_rows = [], 0
            if take == n:
                continue
            b, n = b.slice(take), n - take
        if n < half:
            pending, pending_rows = [b], n
            continue
        parts = -(-n // size)
        for j in range(parts):
            lo, hi = n * j // parts, n * (j + 1) // parts
            yield b if parts == 1 else b.slice(lo, hi - lo)
    if pending:
        yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)


def range_filter(
    batches: Iterable[pa.RecordBatch], start: bytes | None, end: bytes | None
) -> Iterator[pa.RecordBatch]:
    """The rows of a key-sorted stream within ``[start, end)``, as zero-copy slices.

    Stops reading the stream at the first key >= end, so a bounded scan never pulls (and never
    fetches from object storage) batches past its range.
    """
    for b in batches:
        n = b.num_rows
        if n == 0:
            continue
        keys = b.column(0)
        lo = 0 if start is None else search_sorted(keys, start, "left")
        hi = n if end is None else search_sorted(keys, end, "left")
        if lo < hi:
            yield b if lo == 0 and hi == n else b.slice(lo, hi - lo)
        if hi < n:
            return


def iter_rows(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[bytes, bytes]]:
    """``(key, value)`` pairs of live entries, converting a whole batch per step (for Db.scan)."""
    for b in batches:
        if b.num_rows == 0:
            continue
        b = _drop_tombstones(b)
        keys: list[bytes] = b.column(0).to_pylist()
        value_col = b.column(3)
        if value_col.null_count:  # a live entry with a null value reads as empty
            value_col = pc.fill_null(value_col, pa.scalar(b"", pa.binary()))
        values: list[bytes] = value_col.to_pylist()
        yield from zip(keys, values, strict=True)
