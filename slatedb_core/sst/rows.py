"""SlateDB's row codec v2 and block format v2 for whole batches of rows, in numpy and pyarrow.

A row (SlateDB 0.17's ``row_codec_v2``; integers big-endian, varints LEB128 u32)::

    varint shared | varint unshared | varint value_len | key[shared:] | value | u64 seq |
    u8 flags | [i64 expire_ts] | [i64 create_ts]

``shared`` is the length of the prefix the key shares with the previous row's key (0 at a
restart point: every 16th row of a block in SlateDB's SSTs, every row in ours by default, see
``SstOptions.restart_interval``). Flags: 1 tombstone, 2 has expire_ts, 4 has
create_ts, 8 merge operand. A block is its rows, ``u16`` restart offsets and ``u16`` their
count; a row is added while the block, with its trailer, stays within ``block_size`` (the first
row of a block always is).

Encoding: the block boundaries are planned per block with cumulative sums over a window of rows
(a row's size depends on whether it is a restart point); every row's bytes are then built at
once (varint headers and tails as small byte matrices, key suffixes by a mask over the key
bytes) and interleaved with the values by one ``binary_join_element_wise`` call.

Decoding: the restart points of all blocks of a read are walked together, one numpy step per
row position within an interval (16 steps), so the work is per interval position, never per
row; keys are rebuilt from their suffixes and the previous key's prefix in the same 16 steps,
and values are sliced out of the block bytes through a binary-view array.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]

from slatedb_core.sst.format import KIND_MERGE, KIND_TOMBSTONE, RESTART_INTERVAL

if TYPE_CHECKING:
    from typing_extensions import Buffer

F_TOMBSTONE, F_EXPIRE, F_CREATE, F_MERGE = 1, 2, 4, 8
I64 = npt.NDArray[np.int64]


@functools.cache
def _empty() -> pa.Scalar:
    """The empty binary scalar, made on first use: building a pyarrow scalar imports pandas
    (pyarrow checks whether the value is a pandas object), which would add about a third of a
    second to every ``import slatedb_core`` (each Dagster run worker pays it)."""
    return pa.scalar(b"", pa.binary())


def varint_len(x: I64) -> I64:
    return 1 + (x >= 1 << 7) + (x >= 1 << 14) + (x >= 1 << 21) + (x >= 1 << 28)


def _varint_matrix(x: I64) -> tuple[npt.NDArray[np.uint8], I64]:
    """LEB128 bytes of each value as a (n, 5) matrix, and each varint's length."""
    n = len(x)
    ln = varint_len(x)
    mat = np.empty((n, 5), dtype=np.uint8)
    for j in range(5):
        more = (ln > j + 1).astype(np.uint8) << 7
        mat[:, j] = ((x >> (7 * j)) & 0x7F).astype(np.uint8) | more
    return mat, ln


def _compact(mat: npt.NDArray[np.uint8], keep: npt.NDArray[np.bool_], lens: I64) -> pa.Array:
    """Row i of the binary array is the bytes of ``mat[i]`` where ``keep[i]`` (``lens[i]`` of
    them)."""
    n = len(mat)
    data = mat[keep]
    offs = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lens, out=offs[1:])
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offs), pa.py_buffer(data)])


def windows(data: npt.NDArray[np.uint8], width: int) -> npt.NDArray[np.uint8]:
    """Every ``width``-byte window of ``data`` (zero-padded past its end), as a read-only view:
    ``windows(d, w)[starts]`` gathers ``w`` bytes at each start with one index per row."""
    padded = np.concatenate([data, np.zeros(width, dtype=np.uint8)])
    return np.lib.stride_tricks.sliding_window_view(padded, width)


def lcp(kdata: npt.NDArray[np.uint8], koffs: I64) -> I64:
    """Length of the prefix key i shares with key i-1 (0 for key 0)."""
    n = len(koffs) - 1
    out = np.zeros(n, dtype=np.int64)
    if n < 2 or len(kdata) == 0:
        return out
    klen = np.diff(koffs)
    limit = np.minimum(klen[1:], klen[:-1])
    win = windows(kdata, 8)
    a0, b0 = koffs[:-2], koffs[1:-1]
    active = np.arange(n - 1)
    done = np.zeros(n - 1, dtype=np.int64)
    while len(active):
        at = done[active]
        x = (win[a0[active] + at].view(">u8") ^ win[b0[active] + at].view(">u8")).ravel()
        xb = x.astype(">u8").view(np.uint8).reshape(-1, 8) != 0
        anyneq = x != 0
        done[active] = at + np.where(anyneq, xb.argmax(axis=1), 8)
        active = active[(~anyneq) & (done[active] < limit[active])]
    out[1:] = np.minimum(done, limit)
    return out


def plan_blocks(
    rsize: I64, nsize: I64, block_size: int, interval: int = RESTART_INTERVAL
) -> list[int]:
    """Row indices where blocks start (plus the end), filled as SlateDB's block builder fills:
    a row is added while data + 2 bytes per restart + 2 stays within ``block_size``. A restart
    point every ``interval`` rows (a restart row is ``rsize`` bytes, any other ``nsize``)."""
    n = len(rsize)
    if interval == 1:
        # every row a restart point: a block of rows s..e costs cum[e] - cum[s] + 2, so each
        # block end is one binary search over the cumulative (row + restart offset) sizes
        cum1 = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(rsize + 2, out=cum1[1:])
        bounds1 = [0]
        s1 = 0
        while s1 < n:
            e1 = int(np.searchsorted(cum1, int(cum1[s1]) + block_size - 2, side="right")) - 1
            s1 = max(s1 + 1, min(n, e1))
            bounds1.append(s1)
        return bounds1
    cum = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(nsize, out=cum[1:])
    bounds = [0]
    s = 0
    while s < n:
        hi = int(np.searchsorted(cum, cum[s] + block_size, side="right"))
        w = max(1, min(n, hi + 1) - s)
        pos = np.arange(w)
        sizes = np.where(pos % interval == 0, rsize[s : s + w], nsize[s : s + w])
        tot = np.cumsum(sizes) + 2 * (pos // interval + 1) + 2
        e = s + max(1, int(np.searchsorted(tot, block_size, side="right")))
        bounds.append(e)
        s = e
    return bounds


def _fixed(mat: npt.NDArray[np.uint8]) -> pa.Array:
    """Each row of a C-contiguous byte matrix as one binary value (no copy)."""
    n, w = mat.shape
    offs = np.arange(0, (n + 1) * w, w, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offs), pa.py_buffer(mat)])


def _headers(shared: I64, unshared: I64, vlen: I64) -> pa.Array:
    """Each row's three varints; one byte each (the common case) without any mask."""
    cols = (shared, unshared, vlen)
    if all(len(c) == 0 or int(c.max()) < 0x80 for c in cols):
        mat = np.empty((len(shared), 3), dtype=np.uint8)
        for j, c in enumerate(cols):
            mat[:, j] = c
        return _fixed(mat)
    mats = [_varint_matrix(x) for x in cols]
    hdr = np.concatenate([m for m, _ in mats], axis=1)
    keep = np.concatenate([np.arange(5)[None, :] < ln[:, None] for _, ln in mats], axis=1)
    return _compact(hdr, keep, mats[0][1] + mats[1][1] + mats[2][1])


def _tail_matrix(
    seqs: npt.NDArray[np.uint64],
    flags: npt.NDArray[np.uint8],
    expire: I64 | None,
    has_e: npt.NDArray[np.bool_] | None,
    create: I64 | None,
    has_c: npt.NDArray[np.bool_] | None,
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.bool_] | None]:
    """Each row's seq, flags and timestamps as a byte matrix, and which of its bytes a row keeps
    (None: all of them, every row has the same timestamps present)."""
    n = len(seqs)
    cols = [(has, ts) for has, ts in ((has_e, expire), (has_c, create)) if has is not None]
    uniform = all(bool(has.all()) or not bool(has.any()) for has, _ in cols)
    present = [(has, ts) for has, ts in cols if bool(has.any())] if uniform else cols
    tmat = np.empty((n, 9 + 8 * len(present)), dtype=np.uint8)
    tmat[:, 0:8] = seqs.astype(">u8").view(np.uint8).reshape(n, 8)
    tmat[:, 8] = flags
    tkeep = None if uniform else np.ones(tmat.shape, dtype=np.bool_)
    for j, (has, ts) in enumerate(present):
        assert ts is not None
        tmat[:, 9 + 8 * j : 17 + 8 * j] = ts.astype(">i8").view(np.uint8).reshape(n, 8)
        if tkeep is not None:
            tkeep[:, 9 + 8 * j : 17 + 8 * j] = has[:, None]
    return tmat, tkeep


def _tails(tmat: npt.NDArray[np.uint8], tkeep: npt.NDArray[np.bool_] | None, tail: I64) -> pa.Array:
    """Each row's seq, flags and timestamps as a binary array."""
    return _fixed(tmat) if tkeep is None else _compact(tmat, tkeep, tail)


def _uniform(x: I64) -> int | None:
    """The one value every element of ``x`` has, or None."""
    if len(x) == 0:
        return None
    v = int(x[0])
    return v if bool(np.all(x == v)) else None


def _fixed_width_rows(
    kdata: npt.NDArray[np.uint8],
    koffs: I64,
    kw: int,
    voffs: npt.NDArray[np.int32],
    values: pa.Array,
    vw: int,
    tmat: npt.NDArray[np.uint8],
) -> tuple[pa.Buffer, npt.NDArray[np.uint8]]:
    """Rows whose keys all have ``kw`` bytes and values ``vw`` (every key whole): one byte
    matrix, a row per row, filled column range by column range (no per-row gather)."""
    n = len(tmat)
    head = np.frombuffer(b"\x00" + varint_bytes(kw) + varint_bytes(vw), dtype=np.uint8)
    h = len(head)
    width = h + kw + vw + tmat.shape[1]
    # from Arrow's memory pool, which keeps freed memory mapped: a fresh numpy array this size
    # would be mapped anew for every SST and fault in page by page
    buf = pa.allocate_buffer(n * width)
    mat = np.frombuffer(buf, dtype=np.uint8).reshape(n, width)
    mat[:, :h] = head
    mat[:, h : h + kw] = kdata[int(koffs[0]) : int(koffs[0]) + n * kw].reshape(n, kw)
    if vw:
        vdata = np.frombuffer(values.buffers()[2], dtype=np.uint8)
        mat[:, h + kw : h + kw + vw] = vdata[int(voffs[0]) : int(voffs[0]) + n * vw].reshape(n, vw)
    mat[:, h + kw + vw :] = tmat
    return buf, mat


def pooled_concat(pieces: Iterable[Buffer]) -> memoryview:
    """The concatenation of ``pieces`` (any bytes-like objects) in one buffer from Arrow's
    memory pool, as a byte ``memoryview`` that keeps that buffer alive.

    For the big transient outputs of the encoders (an 8 MiB part of a streamed SST): built in
    a ``bytearray`` or joined into ``bytes``, they come from glibc's heaps, which keep freed
    memory resident (issue 42, goal 3); the pool's freed pages are returned by
    :func:`~slatedb_core.compactor.output_ssts.release_freed_arrow_memory`."""
    views = [memoryview(p).cast("B") for p in pieces]
    buf = pa.allocate_buffer(sum(v.nbytes for v in views))
    out = memoryview(buf).cast("B")
    pos = 0
    for v in views:
        out[pos : pos + v.nbytes] = v
        pos += v.nbytes
    return out


def varint_bytes(x: int) -> bytes:
    """One LEB128 u32 varint (row codec v2's header fields)."""
    out = bytearray()
    while x >= 0x80:
        out.append((x & 0x7F) | 0x80)
        x >>= 7
    out.append(x)
    return bytes(out)


def _key_array(kdata: npt.NDArray[np.uint8], koffs: I64) -> pa.Array:
    """The keys as a binary array over ``kdata`` (offsets rebased to 0, data not copied)."""
    n = len(koffs) - 1
    offs = (koffs - koffs[0]).astype(np.int32)
    data = kdata[int(koffs[0]) : int(koffs[-1])] if n else kdata[:0]
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offs), pa.py_buffer(data)])


@dataclass(frozen=True, slots=True)
class EncodedRows:
    data: pa.Buffer  # every row's bytes, concatenated
    row_offs: I64  # row i is data[row_offs[i]:row_offs[i+1]]
    bounds: list[int]  # block b holds rows bounds[b]..bounds[b+1]
    restart: npt.NDArray[np.bool_]


def encode_rows(
    kdata: npt.NDArray[np.uint8],
    koffs: I64,
    values: pa.Array,
    seqs: npt.NDArray[np.uint64],
    kinds: npt.NDArray[np.uint8],
    expire: I64 | None,
    create: I64 | None,
    block_size: int,
    *,
    interval: int = RESTART_INTERVAL,
) -> EncodedRows:
    """Rows in the given order (keys as ``kdata``/``koffs``), cut into blocks. ``expire`` and
    ``create`` hold a timestamp per row or None; a row has one where the array is not the
    minimum int64. A restart point every ``interval`` rows; ``interval=1`` stores every key whole
    (no prefix compression; SlateDB's reader accepts any interval)."""
    n = len(seqs)
    klen = np.diff(koffs)
    voffs = np.frombuffer(
        values.buffers()[1], dtype=np.int32, count=n + 1, offset=4 * values.offset
    )
    vlen = np.diff(voffs).astype(np.int64)
    shared_nr = lcp(kdata, koffs) if interval > 1 else np.zeros(n, dtype=np.int64)
    flags = np.where(
        kinds == KIND_TOMBSTONE, F_TOMBSTONE, np.where(kinds == KIND_MERGE, F_MERGE, 0)
    )
    flags = flags.astype(np.uint8)
    tail = np.full(n, 9, dtype=np.int64)
    has_e = has_c = None
    if expire is not None:
        has_e = expire != np.iinfo(np.int64).min
        flags |= has_e.astype(np.uint8) * F_EXPIRE
        tail += 8 * has_e
    if create is not None:
        has_c = create != np.iinfo(np.int64).min
        flags |= has_c.astype(np.uint8) * F_CREATE
        tail += 8 * has_c
    tmat, tkeep = _tail_matrix(seqs, flags, expire, has_e, create, has_c)
    kw = _uniform(klen) if interval == 1 and tkeep is None else None
    vw = _uniform(vlen) if kw is not None else None
    if kw is not None and vw is not None:
        # every row the same size: a block holds as many as fit with their restart offsets
        buf, mat = _fixed_width_rows(kdata, koffs, kw, voffs, values, vw, tmat)
        width = mat.shape[1]
        per = max(1, (block_size - 2) // (width + 2))
        return EncodedRows(
            buf,
            np.arange(n + 1, dtype=np.int64) * width,
            [*range(0, n, per), n],
            np.ones(n, dtype=np.bool_),
        )
    common = varint_len(vlen) + vlen + tail
    rsize = 1 + varint_len(klen) + klen + common
    nsize = varint_len(shared_nr) + varint_len(klen - shared_nr) + klen - shared_nr + common
    bounds = plan_blocks(rsize, nsize, block_size, interval)
    if interval == 1:
        restart = np.ones(n, dtype=np.bool_)
        shared = shared_nr
        unshared = klen
        suffix = _key_array(kdata, koffs)
    else:
        starts = np.zeros(n, dtype=np.int64)
        starts[np.asarray(bounds[1:-1], dtype=np.int64)] = 1
        block_start = np.asarray(bounds[:-1], dtype=np.int64)[np.cumsum(starts)]
        restart = (np.arange(n) - block_start) % interval == 0
        shared = np.where(restart, 0, shared_nr)
        unshared = klen - shared
        keep = np.repeat(
            np.tile(np.array([False, True]), n), np.column_stack([shared, unshared]).ravel()
        )
        suffix_data = kdata[int(koffs[0]) : int(koffs[-1])][keep] if n else kdata[:0]
        soffs = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(unshared, out=soffs[1:])
        suffix = pa.Array.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(soffs), pa.py_buffer(suffix_data)]
        )
    header = _headers(shared, unshared, vlen)
    joined = pc.binary_join_element_wise(
        header, suffix, values, _tails(tmat, tkeep, tail), _empty()
    )
    bufs = joined.buffers()
    row_offs = np.frombuffer(bufs[1], dtype=np.int32, count=n + 1).astype(np.int64)
    data = bufs[2] if bufs[2] is not None else pa.py_buffer(b"")
    return EncodedRows(data, row_offs, bounds, restart)


def block_trailers(enc: EncodedRows) -> tuple[bytes, list[int]]:
    """Every block's restart offsets and their count (u16 big-endian), all computed at once:
    the bytes of all trailers, and where each block's trailer starts in them (plus the end)."""
    ro, bounds = enc.row_offs, np.asarray(enc.bounds, dtype=np.int64)
    nb = len(bounds) - 1
    rs = np.flatnonzero(enc.restart)
    block = np.searchsorted(bounds, rs, side="right") - 1
    counts = np.bincount(block, minlength=nb)
    at_count = np.cumsum(counts) + np.arange(nb)  # each block's count follows its offsets
    out = np.empty(len(rs) + nb, dtype=">u2")
    is_offset = np.ones(len(out), dtype=np.bool_)
    is_offset[at_count] = False
    out[is_offset] = ro[rs] - ro[bounds[block]]
    out[at_count] = counts
    starts = np.zeros(nb + 1, dtype=np.int64)
    starts[1:] = 2 * (at_count + 1)
    return out.tobytes(), starts.tolist()
