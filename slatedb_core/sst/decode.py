"""Decoding data blocks (SlateDB 0.17's block format v2, row codec v2; layout in
:mod:`slatedb_core.sst.rows`) into Arrow columns, many blocks at once.

The rows of a restart interval can only be found one after another (each row's length is in its
own header), so the walk is vectorised across intervals instead: step ``t`` parses row ``t`` of
every interval of every block being decoded (16 steps for SlateDB's restart interval). Keys are
then rebuilt: every suffix in one ragged copy, and the shared prefixes step by step (row ``t``'s
prefix comes from row ``t-1``, finished in the step before). Values are sliced out of the block
bytes through a binary-view array and made a plain binary column by one Arrow cast.

Anything inconsistent (a varint or row running past its interval, unknown flags, a restart row
that shares a prefix, a prefix longer than the previous key) is a :class:`CorruptionError`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

from slatedb_core.errors import CorruptionError
from slatedb_core.sst.format import KIND_MERGE, KIND_TOMBSTONE, KIND_VALUE
from slatedb_core.sst.rows import F_CREATE, F_EXPIRE, F_MERGE, F_TOMBSTONE

I64 = npt.NDArray[np.int64]
_U16 = struct.Struct(">H")
_KNOWN = F_TOMBSTONE | F_EXPIRE | F_CREATE | F_MERGE


@dataclass(slots=True)
class Decoded:
    keys: pa.Array
    seqs: npt.NDArray[np.uint64]
    kinds: npt.NDArray[np.uint8]
    values: pa.Array
    counts: list[int]  # rows per block
    expire: I64  # per row; int64 min where the row has none
    create: I64  # likewise
    has_expire: bool


def _varints(buf: npt.NDArray[np.uint8], pos: I64, end: I64) -> tuple[I64, I64]:
    """LEB128 u32 varints at ``pos`` (each must end before ``end``): values and new positions."""
    b = buf[np.minimum(pos, len(buf) - 1)].astype(np.int64)
    val = b & 0x7F
    ln = np.ones(len(pos), dtype=np.int64)
    cont = np.flatnonzero(b >= 0x80)
    shift = 7
    while len(cont):
        if shift > 28:
            raise ValueError("a varint is longer than 5 bytes")
        at = pos[cont] + ln[cont]
        nb = buf[np.minimum(at, len(buf) - 1)].astype(np.int64)
        val[cont] |= (nb & 0x7F) << shift
        ln[cont] += 1
        cont = cont[nb >= 0x80]
        shift += 7
    new = pos + ln
    if np.any(new > end):
        raise ValueError("a row header runs past its restart interval")
    return val, new


def _ragged_copy(
    dst: npt.NDArray[np.uint8], dst_at: I64, src: npt.NDArray[np.uint8], src_at: I64, lens: I64
) -> None:
    total = int(lens.sum())
    if total == 0:
        return
    keep = lens > 0
    dst_at, src_at, lens = dst_at[keep], src_at[keep], lens[keep]
    first = np.zeros(len(lens), dtype=np.int64)
    np.cumsum(lens[:-1], out=first[1:])
    step = np.arange(total, dtype=np.int64) - np.repeat(first, lens)
    dst[np.repeat(dst_at, lens) + step] = src[np.repeat(src_at, lens) + step]


def decode_blocks(
    name: str,
    raw: pa.Buffer,
    spans: list[tuple[int, int]],
    first_block: int,
    now_ms: int,
) -> Decoded:
    """Rows of the blocks ``raw[a:b]`` for each ``(a, b)`` in ``spans`` (uncompressed, without
    their CRCs), in order. Rows whose expire_ts is at or before ``now_ms`` decode as tombstones."""
    buf = np.frombuffer(raw, dtype=np.uint8)
    iblock: list[int] = []
    ends: list[int] = []
    for j, (a, b) in enumerate(spans):
        if b - a < 2:
            raise CorruptionError(name, f"block {first_block + j} is too short")
        (r,) = _U16.unpack_from(raw, b - 2)
        data_end = b - 2 - 2 * r
        if r == 0 or data_end < a:
            raise CorruptionError(name, f"block {first_block + j} has {r} restart points")
        iblock.append(r)
        ends.append(data_end)
    p, blocks = _restarts(name, buf, spans, iblock, ends, first_block)
    e = np.empty_like(p)  # each interval ends where the next starts, the last at its block's end
    e[:-1] = p[1:]
    e[np.cumsum(iblock) - 1] = ends
    try:
        return _walk(name, raw, buf, p, e, blocks, len(spans), now_ms)
    except (ValueError, IndexError, pa.ArrowException) as err:
        where = f"block {first_block}" if len(spans) == 1 else f"block {first_block}+"
        raise CorruptionError(name, f"{where} is malformed: {err}") from None


def _restarts(
    name: str,
    buf: npt.NDArray[np.uint8],
    spans: list[tuple[int, int]],
    counts: list[int],
    ends: list[int],
    first_block: int,
) -> tuple[I64, I64]:
    """Every restart offset of the blocks at ``spans`` (``counts[j]`` u16s of block ``j`` ending
    at ``ends[j]``, where its rows end), as positions in ``buf``, and each one's block (its
    index in ``spans``). Each block's must start at 0, rise, and stay inside its rows. Gathered
    for all the blocks at once: a scan of 4 KiB blocks (SlateDB's default size) decodes ~2,000
    of them a GET, and five numpy calls a block cost more than the rows' decode (issue 42)."""
    n = len(spans)
    if n == 1:
        r = counts[0]
        a = spans[0][0]
        rs = np.frombuffer(buf, dtype=">u2", count=r, offset=ends[0]).astype(np.int64)
        if rs[0] != 0 or (rs[1:] <= rs[:-1]).any() or rs[-1] >= ends[0] - a:
            raise CorruptionError(name, f"block {first_block} has bad restart offsets")
        return (rs + a if a else rs), np.zeros(r, dtype=np.int64)
    cnt = np.array(counts, dtype=np.int64)
    last = np.cumsum(cnt) - 1  # each block's last restart
    first = last - cnt + 1
    starts = np.array([a for a, _ in spans], dtype=np.int64)
    blocks = np.repeat(np.arange(n, dtype=np.int64), cnt)
    at = np.arange(len(blocks), dtype=np.int64)
    at -= first[blocks]
    at *= 2
    at += np.array(ends, dtype=np.int64)[blocks]  # each u16's first byte
    rs = buf[at].astype(np.int64)
    rs <<= 8
    rs |= buf[at + 1]
    bad = rs[first] != 0
    bad |= rs[last] >= np.array(ends, dtype=np.int64) - starts
    falls = np.flatnonzero(rs[1:] <= rs[:-1])  # a restart not above the one before...
    falls = falls[blocks[falls] == blocks[falls + 1]]  # ...of its own block
    if bad.any() or len(falls):
        j = min([*np.flatnonzero(bad).tolist(), *blocks[falls].tolist()])
        raise CorruptionError(name, f"block {first_block + j} has bad restart offsets")
    rs += starts[blocks]
    return rs, blocks


_C3 = np.arange(3, dtype=np.int64)


_PAD = 64  # zero bytes before and after a read's bytes, so fixed-width gathers never clip
_MATRIX_KEYS = 1 << 26  # key matrix cells (rows x longest key) up to which keys are rebuilt at once


def _win(padded: npt.NDArray[np.uint8], width: int) -> npt.NDArray[np.uint8]:
    """``_win(p, w)[i + pad]`` is the ``w`` bytes at position ``i`` of the unpadded buffer
    (a read-only strided view: gathering rows of it takes one index per row)."""
    if len(padded) < width:
        raise IndexError("a fixed-width read is longer than the buffer")
    # np.ndarray over the buffer directly: as_strided costs ~10 us a call, a point lookup makes 5
    view: npt.NDArray[np.uint8] = np.ndarray(
        (len(padded) - width + 1, width), dtype=np.uint8, buffer=padded, strides=(1, 1)
    )
    view.flags.writeable = False
    return view


def _gather(padded: npt.NDArray[np.uint8], width: int, at: I64) -> npt.NDArray[np.uint8]:
    """``_win(padded, width)[at]`` (an IndexError past the end), gathered as ``width``-byte
    items, about twice as fast as rows of the two-dimensional window."""
    if len(padded) < width:
        raise IndexError("a fixed-width read is longer than the buffer")
    items: npt.NDArray[np.void] = np.ndarray(
        (len(padded) - width + 1,), dtype=f"V{width}", buffer=padded, strides=(1,)
    )
    return items[at].view(np.uint8).reshape(len(at), width)


def _headers(
    buf: npt.NDArray[np.uint8], at: I64, end: I64, win3: npt.NDArray[np.uint8], pad: int
) -> tuple[I64, I64, I64, I64]:
    """``(shared, unshared, value_len, key position)`` of the rows starting at ``at``."""
    h = win3[at + pad]
    if not (h >= 0x80).any():
        h64 = h.astype(np.int64)
        return h64[:, 0], h64[:, 1], h64[:, 2], at + 3
    shared, q = _varints(buf, at, end)
    unshared, q = _varints(buf, q, end)
    vlen, q = _varints(buf, q, end)
    return shared, unshared, vlen, q


_TAIL = np.array(
    [9 + 8 * ((f & F_EXPIRE) > 0) + 8 * ((f & F_CREATE) > 0) for f in range(256)], dtype=np.int64
)  # seq + flags + timestamps, by flags byte


def _next_rows(
    padded: npt.NDArray[np.uint8], win3: npt.NDArray[np.uint8], at: I64, end: I64, pad: int
) -> I64:
    """Where the rows starting at ``at`` end (an index error or a varint past ``end`` is
    corruption, raised by the caller's conversion)."""
    h = win3[at + pad]
    if (h >= 0x80).any():
        buf = padded[pad : len(padded) - pad]
        _, q = _varints(buf, at, end)
        unshared, q = _varints(buf, q, end)
        vlen, q = _varints(buf, q, end)
        seqpos = q + unshared + vlen
    else:
        seqpos = at + 3 + h[:, 1] + h[:, 2].astype(np.int64)
    out: I64 = seqpos + _TAIL[padded[seqpos + 8 + pad]]
    return out


def _row_starts(padded: npt.NDArray[np.uint8], p: I64, e: I64, pad: int) -> list[tuple[I64, I64]]:
    """``(intervals, row starts)`` of row ``t`` of every interval that has one, for t = 0, 1..;
    each interval's rows must end exactly at its end."""
    win3 = _win(padded, 3)
    live = np.arange(len(p))
    at, end = p, e
    steps: list[tuple[I64, I64]] = []
    while len(at):
        steps.append((live, at))
        nxt = _next_rows(padded, win3, at, end, pad)
        keep = nxt < end
        if not keep.all():
            if np.any(nxt[~keep] != end[~keep]):
                raise ValueError("a row runs past its restart interval")
            at, end, live = nxt[keep], end[keep], live[keep]
        else:
            at = nxt
    return steps


def _one_row_each(
    padded: npt.NDArray[np.uint8], win3: npt.NDArray[np.uint8], p: I64, e: I64, pad: int
) -> tuple[I64, I64, I64, I64, npt.NDArray[np.uint8]] | None:
    """``(shared, unshared, value_len, seq position, seq and flags bytes)`` when every interval
    is one row whose header varints are one byte each (restart interval 1, our default:
    docs/format.md), else None (the general walk then parses the rows, and reports any
    damage). Each row's seq and flags are gathered here at once (one pass over the rows)."""
    h = _gather(padded, 3, p + pad)
    if h.max() >= 0x80:
        return None
    h64 = h.astype(np.int64)
    unshared, vlen = h64[:, 1], h64[:, 2]
    seqpos = p + 3 + unshared + vlen
    tail = _gather(padded, 9, seqpos + pad)
    if not np.array_equal(seqpos + _TAIL[tail[:, 8]], e):
        return None
    return h64[:, 0], unshared, vlen, seqpos, tail


def _walk(
    name: str,
    raw: pa.Buffer,
    buf: npt.NDArray[np.uint8],
    p: I64,
    e: I64,
    iblock: I64,
    nblocks: int,
    now_ms: int,
) -> Decoded:
    """The rows, read from ``buf`` itself (no copy); when a fixed-width gather runs past its
    end (only ever at the last rows: short keys or values there), from a copy padded with
    _PAD zero bytes on each side. Every position is the sum of non-negative parts, so without
    padding a gather can only fail (IndexError), never read another position."""
    del name
    try:
        return _walk_padded(raw, buf, p, e, iblock, nblocks, now_ms, 0)
    except IndexError:
        padded = np.concatenate([np.zeros(_PAD, np.uint8), buf, np.zeros(_PAD, np.uint8)])
        return _walk_padded(raw, padded, p, e, iblock, nblocks, now_ms, _PAD)


def _walk_padded(
    raw: pa.Buffer,
    padded: npt.NDArray[np.uint8],
    p: I64,
    e: I64,
    iblock: I64,
    nblocks: int,
    now_ms: int,
    pad: int,
) -> Decoded:
    """:func:`_walk` over ``padded``: the block bytes after ``pad`` bytes, and ``pad`` more."""
    buf = padded[pad : len(padded) - pad] if pad else padded
    win3 = _win(padded, 3)
    single = _one_row_each(padded, win3, p, e, pad)
    if single is not None:  # every row a restart point: its key is whole, shares nothing
        shared, unshared, vlen, seqpos, tail = single
        n = len(p)
        kpos = p + 3
        rank = [np.arange(n)]
        counts = np.bincount(iblock, minlength=nblocks).tolist()
        if shared.any():
            raise ValueError("a restart row shares a prefix")
        klen = unshared
    else:
        steps = _row_starts(padded, p, e, pad)
        nint = len(p)
        per_int = np.zeros(nint, dtype=np.int64)
        for live_t, _ in steps:
            per_int[live_t] += 1
        int_first = np.zeros(nint + 1, dtype=np.int64)
        np.cumsum(per_int, out=int_first[1:])
        n = int(int_first[-1])
        rank = [int_first[live_t] + t for t, (live_t, _) in enumerate(steps)]
        rowpos = np.empty(n, dtype=np.int64)
        rowpos[np.concatenate(rank)] = np.concatenate([at for _, at in steps])
        row_end = np.repeat(e, per_int)
        shared, unshared, vlen, kpos = _headers(buf, rowpos, row_end, win3, pad)
        seqpos = kpos + unshared + vlen
        if (seqpos + 9 > row_end).any():
            raise ValueError("a row runs past its restart interval")
        tail = _gather(padded, 9, seqpos + pad)
        if shared[int_first[:-1]].any():
            raise ValueError("a restart row shares a prefix")
        klen = shared + unshared
        if n > 1 and (shared[1:] > klen[:-1]).any():
            raise ValueError("a row shares more bytes than the previous key has")
        counts = np.bincount(iblock, weights=per_int, minlength=nblocks).astype(np.int64).tolist()
    if 0 in counts:
        raise ValueError("a block has no rows")
    if klen.min() == 0:
        raise ValueError("a row has an empty key")
    koffs = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(klen, out=koffs[1:])
    if koffs[-1] >= 1 << 31:
        raise ValueError("the keys of one read exceed 2 GiB")
    longest = int(klen.max())
    if longest <= _PAD and n * longest <= _MATRIX_KEYS:
        kbytes = _keys_matrix(padded, shared, kpos, klen, longest, pad)
    else:
        kbytes = _keys_steps(buf, koffs, shared, unshared, kpos, rank)
    keys = pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(koffs.astype(np.int32)), pa.py_buffer(kbytes)]
    )

    flags = tail[:, 8]
    seen = int(np.bitwise_or.reduce(flags))  # every flag some row has
    if seen & (0xFF ^ _KNOWN) or (
        seen & F_TOMBSTONE
        and seen & F_MERGE
        and ((flags & F_TOMBSTONE) & ((flags & F_MERGE) >> 3)).any()
    ):
        raise ValueError("a row has unknown flags, or is both a tombstone and a merge operand")
    win8 = _win(padded, 8)
    seqs = np.ascontiguousarray(tail[:, :8]).view(">u8").reshape(n).astype(np.uint64)
    vpos = kpos + unshared
    vlen = seqpos - vpos
    expire = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    create = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    if not seen & (F_TOMBSTONE | F_MERGE | F_EXPIRE | F_CREATE):  # plain values only
        kinds = np.zeros(n, dtype=np.uint8)
        values = _values(raw, vpos, vlen)
        return Decoded(keys, seqs, kinds, values, counts, expire, create, False)
    kinds = np.full(n, KIND_VALUE, dtype=np.uint8)
    kinds[(flags & F_TOMBSTONE) > 0] = KIND_TOMBSTONE
    kinds[(flags & F_MERGE) > 0] = KIND_MERGE
    has_e = (flags & F_EXPIRE) > 0
    any_e = bool(seen & F_EXPIRE)
    if any_e:
        rows_e = np.flatnonzero(has_e)
        at = seqpos[rows_e] + 9
        expire[rows_e] = win8[at + pad].view(">i8").reshape(len(rows_e))
        dead = rows_e[expire[rows_e] <= now_ms]
        kinds[dead] = KIND_TOMBSTONE
    vlen[kinds == KIND_TOMBSTONE] = 0
    if seen & F_CREATE:
        has_c = np.flatnonzero((flags & F_CREATE) > 0)
        at = seqpos[has_c] + 9 + 8 * has_e[has_c]
        create[has_c] = win8[at + pad].view(">i8").reshape(len(has_c))
    values = _values(raw, vpos, vlen)
    return Decoded(keys, seqs, kinds, values, counts, expire, create, any_e)


def _keys_matrix(
    padded: npt.NDArray[np.uint8], shared: I64, kpos: I64, klen: I64, longest: int, pad: int
) -> npt.NDArray[np.uint8]:
    """Every key at once as a (rows, longest) matrix: each row's suffix in place, then each
    shared byte taken from the latest row whose own suffix holds that column (a restart row
    holds every column of its key, so the search never leaves the restart interval)."""
    n = len(shared)
    cols = np.arange(longest, dtype=np.int64)
    mat = _gather(padded, longest, np.maximum(kpos - shared + pad, 0))
    most = int(shared.max(initial=0))
    if most:
        pc_ = cols[:most].astype(np.int32)
        src = np.where(
            shared[:, None] <= pc_[None, :], np.arange(n, dtype=np.int32)[:, None], np.int32(0)
        )
        np.maximum.accumulate(src, axis=0, out=src)
        flat = src.astype(np.int64) * longest + pc_[None, :]
        mat[:, :most] = np.take(mat.reshape(-1), flat)
    if int(klen.min(initial=longest)) == longest:
        return np.ascontiguousarray(mat, dtype=np.uint8).reshape(-1)
    return np.asarray(mat[cols[None, :] < klen[:, None]], dtype=np.uint8)


def _keys_steps(
    buf: npt.NDArray[np.uint8], koffs: I64, shared: I64, unshared: I64, kpos: I64, rank: list[I64]
) -> npt.NDArray[np.uint8]:
    """Long keys: suffixes in one ragged copy, then shared prefixes step by step (row ``t`` of
    every interval takes its prefix from row ``t-1``, finished in the step before)."""
    kbytes = np.empty(int(koffs[-1]), dtype=np.uint8)
    _ragged_copy(kbytes, koffs[:-1] + shared, buf, kpos, unshared)
    for r in rank[1:]:
        _ragged_copy(kbytes, koffs[r], kbytes, koffs[r - 1], shared[r])
    return kbytes


def _values(raw: pa.Buffer, vpos: I64, vlen: I64) -> pa.Array:
    """The values as a binary array, copied out of ``raw`` by one Arrow ``take``: of a binary
    array over ``raw`` whose even items are the values and odd ones the bytes between them
    (rows lie in order, so its offsets increase; checked, since nothing is read past them)."""
    n = len(vpos)
    if n == 0:
        return pa.array([], pa.binary())
    offs = np.empty(2 * n + 1, dtype=np.int64)
    offs[0 : 2 * n : 2] = vpos
    offs[1 : 2 * n : 2] = vpos + vlen
    offs[2 * n] = offs[2 * n - 1]
    if offs[0] < 0 or offs[-1] > raw.size or (offs[1:] < offs[:-1]).any():
        raise ValueError("values overlap or lie outside the block")
    if offs[-1] >= 1 << 31:
        raise ValueError("a read of 2 GiB or more")
    spaced = pa.Array.from_buffers(
        pa.binary(), 2 * n, [None, pa.py_buffer(offs.astype(np.int32)), raw]
    )
    return spaced.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int64)))
