"""Decoding data blocks whose rows all have one width, without a walk: the rows of a block are
then a ``(rows, width)`` matrix over its bytes, and keys, values, seqs and flags are its columns.

Every SST of a bulk load (:mod:`slatedb_core.sst.fixed_width`) and every SST the general encoder
writes for rows of one key width and one value width with restart interval 1 (our default,
docs/format.md) has this shape: each row is ``varint(0) varint(key_len) varint(value_len) key
value seq(8) flags(1)`` with the same three header varints. Reading such a block by columns copies
each field once (issue 42, goal 4: a Spark full read spent most of its Python worker's time in the
general row walk of :mod:`slatedb_core.sst.decode`, a dozen numpy passes per row).

:func:`decode_fixed` is a fast path and nothing more: it returns None (and the caller decodes the
blocks with the general walk, which reports any damage with its own messages) unless every row of
every block checks out: the restart trailer sound and every restart point at a row boundary, every
row's header bytes identical and in canonical one-varint form, a non-empty key, flags with no
timestamps (TTL rows carry ``expire_ts``, decoded by the general walk at the reader's clock) and
no unknown bits, no row both a tombstone and a merge operand, a tombstone only with an empty value.
On such blocks its result is the general walk's, field for field (tests/sst/test_decode_fixed.py).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

from slatedb_core.sst.decode import Decoded
from slatedb_core.sst.format import KIND_MERGE, KIND_TOMBSTONE
from slatedb_core.sst.rows import F_MERGE, F_TOMBSTONE, varint_bytes

__all__ = ["decode_fixed"]

_U16 = struct.Struct(">H")
_TAIL = 9  # seq (8) and flags (1) of a row without timestamps
_NO_TS = np.iinfo(np.int64).min
_no_ts = np.full(0, _NO_TS, dtype=np.int64)


def _absent_timestamps(n: int) -> npt.NDArray[np.int64]:
    """``n`` "no timestamp" values: a read-only slice of one shared array (a fresh ``np.full``
    per group cost about as much as copying the keys)."""
    global _no_ts
    if len(_no_ts) < n:
        _no_ts = np.full(max(n, 2 * len(_no_ts)), _NO_TS, dtype=np.int64)
        _no_ts.flags.writeable = False
    return _no_ts[:n]


def _varint(raw: pa.Buffer, pos: int, end: int) -> tuple[int, int] | None:
    """The LEB128 u32 varint at ``pos`` and the position after it; None past ``end``."""
    val = shift = 0
    mv = memoryview(raw).cast("B")  # a pa.Buffer's view may be signed chars
    while pos < end and shift <= 28:
        b = mv[pos]
        val |= (b & 0x7F) << shift
        pos += 1
        if b < 0x80:
            return val, pos
        shift += 7
    return None


def _row_shape(raw: pa.Buffer, a: int, data_end: int) -> tuple[bytes, int, int] | None:
    """``(header bytes, key width, value width)`` of the row at ``a``, when its header is three
    canonical varints with ``shared`` 0 and its key is not empty."""
    parsed = []
    pos = a
    for _ in range(3):
        got = _varint(raw, pos, data_end)
        if got is None:
            return None
        parsed.append(got[0])
        pos = got[1]
    shared, k, v = parsed
    head = varint_bytes(0) + varint_bytes(k) + varint_bytes(v)
    if shared != 0 or k == 0 or pos - a != len(head):
        return None  # a prefix-compressed or non-canonical header: the general walk
    return head, k, v


_trailers: dict[tuple[int, int], bytes] = {}


def _trailer(rows: int, width: int) -> bytes:
    """The restart trailer of a block of ``rows`` rows of ``width`` bytes, each a restart point:
    every row's offset and their count, big-endian u16s."""
    t = _trailers.get((rows, width))
    if t is None:
        offs = np.arange(0, rows * width, width, dtype=np.int64).astype(">u2").tobytes()
        t = _trailers[rows, width] = offs + _U16.pack(rows)
        if len(_trailers) > 64:
            _trailers.clear()
            _trailers[rows, width] = t
    return t


def _column(n: int, width: int) -> tuple[pa.Buffer, npt.NDArray[np.uint8]]:
    """A buffer for ``n`` items of ``width`` bytes from Arrow's pool (which keeps freed memory
    mapped: a fresh numpy array this size would fault in page by page), and a writable
    ``(n, width)`` view of it."""
    buf = pa.allocate_buffer(n * width)
    return buf, np.frombuffer(buf, dtype=np.uint8).reshape(n, width)


def _fixed_binary(n: int, width: int, data: pa.Buffer) -> pa.Array:
    offs = np.arange(n + 1, dtype=np.int32)
    offs *= width
    offsets = pa.py_buffer(offs)
    return pa.Array.from_buffers(pa.binary(), n, [None, offsets, data])


def _field(
    raw: pa.Buffer, first: int, nb: int, rows: int, step: int, width: int, at: int, dtype: str
) -> Any:
    """Byte ``at`` of every row of ``nb`` blocks of ``rows`` rows of ``width`` bytes, ``step``
    bytes apart from ``first`` on, read as ``dtype``: a strided view, nothing copied."""
    return np.ndarray((nb, rows), dtype=dtype, buffer=raw, offset=first + at, strides=(step, width))


def decode_fixed(raw: pa.Buffer, spans: list[tuple[int, int]]) -> Decoded | None:
    """The rows of the blocks ``raw[a:b]`` for each ``(a, b)`` in ``spans`` (uncompressed,
    without their CRCs), or None when any block is not made of rows of one shape (the general
    decoder's job; see the module doc)."""
    if not spans:
        return None
    a0, b0 = spans[0]
    if b0 - a0 < 2:
        return None
    (r0,) = _U16.unpack_from(raw, b0 - 2)
    shape = _row_shape(raw, a0, b0 - 2 - 2 * r0)
    if shape is None:
        return None
    head, k, v = shape
    h = len(head)
    width = h + k + v + _TAIL
    mv = memoryview(raw)
    counts: list[int] = []
    runs: list[tuple[int, int, int, int]] = []  # (first byte, blocks, rows per block, stride)
    for a, b in spans:
        if b - a < 2:
            return None
        (r,) = _U16.unpack_from(raw, b - 2)
        data_end = b - 2 - 2 * r
        size = data_end - a
        if r == 0 or size <= 0 or size % width:
            return None
        rows = size // width
        if r == rows:  # restart interval 1: every row a restart point
            if mv[data_end:b].tobytes() != _trailer(rows, width):
                return None
        else:
            rs = np.frombuffer(raw, dtype=">u2", count=r, offset=data_end).astype(np.int64)
            if rs[0] != 0 or rs[-1] >= size or (rs % width).any() or (np.diff(rs) <= 0).any():
                return None
        counts.append(rows)
        if runs:  # blocks of one size at one stride: a single strided view
            first, nb, rrows, stride = runs[-1]
            if rrows == rows and (nb == 1 or a - first == nb * stride):
                runs[-1] = (first, nb + 1, rows, a - first if nb == 1 else stride)
                continue
        runs.append((a, 1, rows, 0))
    n = sum(counts)
    if n * max(k, v) >= 1 << 31:
        return None
    kbuf, kmat = _column(n, k)
    vbuf, vmat = _column(n, v)
    seqs = np.empty(n, dtype=np.uint64)
    flags = np.empty(n, dtype=np.uint8)
    s = h + k + v
    # a row's first 8 bytes (its header, then key bytes) as one integer: the header compared
    # with one masked integer per row (width >= h + 1 + 9 > 8, so it never leaves the row)
    mask = (1 << (8 * h)) - 1 if h < 8 else (1 << 64) - 1
    want = int.from_bytes(head[:8], "little")
    i = 0
    for first, nb, rows, stride in runs:
        step = stride or rows * width
        at = (raw, first, nb, rows, step, width)
        if h <= 8:
            if ((_field(*at, 0, "<u8") & np.uint64(mask)) != np.uint64(want)).any():
                return None
        elif not all((_field(*at, c, "u1") == head[c]).all() for c in range(h)):
            return None
        j = i + nb * rows
        # keys and values copied as whole fixed-size items (a memcpy each: about twice as fast
        # as numpy's byte-wise copy of a (rows, width) uint8 slice)
        kmat[i:j].reshape(nb, rows, k).view(f"V{k}")[..., 0] = _field(*at, h, f"V{k}")
        if v:
            vmat[i:j].reshape(nb, rows, v).view(f"V{v}")[..., 0] = _field(*at, h + k, f"V{v}")
        seqs[i:j].reshape(nb, rows)[...] = _field(*at, s, ">u8")
        flags[i:j].reshape(nb, rows)[...] = _field(*at, s + 8, "u1")
        i = j
    seen = int(np.bitwise_or.reduce(flags))
    if seen & ~(F_TOMBSTONE | F_MERGE):
        return None  # timestamps (TTL) or unknown bits: the general walk
    if seen & F_TOMBSTONE and (
        v or (seen & F_MERGE and ((flags & F_TOMBSTONE) & (flags >> 3)).any())
    ):
        return None
    kinds = np.zeros(n, dtype=np.uint8)
    if seen:
        kinds[(flags & F_TOMBSTONE) > 0] = KIND_TOMBSTONE
        kinds[(flags & F_MERGE) > 0] = KIND_MERGE
    none = _absent_timestamps(n)
    return Decoded(
        _fixed_binary(n, k, kbuf), seqs, kinds, _fixed_binary(n, v, vbuf), counts, none, none, False
    )
