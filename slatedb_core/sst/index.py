"""The SST's index and stats sections: SlateDB 0.17's ``SsTableIndex`` and ``SstStats``
FlatBuffers tables (``schemas/sst.fbs``), written (:mod:`slatedb_core.sst.fbwrite`) in the order
SlateDB's writer builds them (so the bytes match the wheel's) and read by hand.

``SsTableIndex { block_meta: [BlockMeta] (required) }``,
``BlockMeta { offset: ulong; first_key: [ubyte] (required) }``: block i's first_key is the
shortest key greater than every key of block i-1 and not above block i's first key (empty for
block 0); a WAL SST's is the block's first seq as u64 big-endian.

``SstStats { num_puts, num_deletes, num_merges, raw_key_size, raw_val_size: ulong;
block_stats: [BlockStats] }``, ``BlockStats { num_puts, num_deletes, num_merges: ushort }``.
"""

from __future__ import annotations

import bisect
import itertools
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from slatedb_core.errors import CorruptionError
from slatedb_core.manifest.flatbuf import read_budget
from slatedb_core.sst.fbwrite import BackWriter

_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U16 = struct.Struct("<H")
_U64 = struct.Struct("<Q")


def separator(prev_last: bytes, first: bytes) -> bytes:
    """The shortest key ``k`` with ``prev_last < k <= first`` that is a prefix of ``first``
    (SlateDB's index key of a block after the first)."""
    n = min(len(prev_last), len(first))
    i = 0
    while i < n and prev_last[i] == first[i]:
        i += 1
    if i < len(prev_last):
        return first[: i + 1]
    return first if len(prev_last) == len(first) else first[: len(prev_last) + 1]


def encode_index(offsets: list[int], first_keys: list[bytes]) -> bytes:
    """The SsTableIndex of blocks at ``offsets`` with index keys ``first_keys``."""
    w = BackWriter()
    metas = []
    for off, key in zip(offsets, first_keys, strict=True):
        vec = w.byte_vector(key)
        w.start(2)
        w.u64_slot(0, off)
        w.offset_slot(1, vec)
        metas.append(w.end())
    vec = w.offset_vector(metas)
    w.start(1)
    w.offset_slot(0, vec)
    return w.finish(w.end())


@dataclass(frozen=True, slots=True)
class Stats:
    num_puts: int = 0
    num_deletes: int = 0
    num_merges: int = 0
    raw_key_size: int = 0
    raw_val_size: int = 0
    block_puts: tuple[int, ...] = ()
    block_deletes: tuple[int, ...] = ()
    block_merges: tuple[int, ...] = ()


def encode_stats(
    block_puts: npt.NDArray[np.int64],
    block_deletes: npt.NDArray[np.int64],
    block_merges: npt.NDArray[np.int64],
    raw_key_size: int,
    raw_val_size: int,
) -> bytes:
    """The SstStats table (per-block counts are u16, as SlateDB stores them)."""
    w = BackWriter()
    tables = []
    for p, d, m in zip(
        block_puts.tolist(), block_deletes.tolist(), block_merges.tolist(), strict=True
    ):
        w.start(3)
        w.u16_slot(2, m)
        w.u16_slot(1, d)
        w.u16_slot(0, p)
        tables.append(w.end())
    vec = w.offset_vector(tables) if tables else None
    w.start(6)
    w.u64_slot(4, raw_val_size)
    w.u64_slot(3, raw_key_size)
    w.u64_slot(2, int(block_merges.sum()))
    w.u64_slot(1, int(block_deletes.sum()))
    w.u64_slot(0, int(block_puts.sum()))
    if vec is not None:
        w.offset_slot(5, vec)
    return w.finish(w.end())


class _Fb:
    """Bounds-checked reads of a FlatBuffers buffer (every failure is ``ValueError``)."""

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.budget = read_budget(len(buf))  # what vectors may copy in all (flatbuf's doc)

    def u32(self, pos: int) -> int:
        if not 0 <= pos <= len(self.buf) - 4:
            raise ValueError(f"offset {pos} is outside the table")
        return int(_U32.unpack_from(self.buf, pos)[0])

    def field(self, table: int, slot: int) -> int:
        """Absolute position of a table's field, or 0 when absent."""
        self.u32(table)  # bounds
        vt = table - _I32.unpack_from(self.buf, table)[0]
        if not 0 <= vt <= len(self.buf) - 4:
            raise ValueError("vtable is outside the buffer")
        vt_len = _U16.unpack_from(self.buf, vt)[0]
        at = 4 + 2 * slot
        if at + 2 > vt_len or vt + vt_len > len(self.buf):
            return 0
        rel = _U16.unpack_from(self.buf, vt + at)[0]
        return table + rel if rel else 0

    def deref(self, pos: int) -> int:
        return pos + self.u32(pos)

    def vector(self, pos: int, width: int) -> tuple[int, int]:
        """A vector's first element and count; its bytes are charged to the budget, so offsets
        sharing one vector cannot make the decoder copy it again and again."""
        start = self.deref(pos)
        n = self.u32(start)
        self.budget -= 4 + n * width
        if self.budget < 0:
            raise ValueError("vectors are read more than twice the buffer: shared offsets")
        return start + 4, n

    def u64(self, pos: int) -> int:
        if not pos:
            return 0
        if pos + 8 > len(self.buf):
            raise ValueError("field is outside the buffer")
        return int(_U64.unpack_from(self.buf, pos)[0])

    def u16(self, pos: int) -> int:
        if not pos:
            return 0
        if pos + 2 > len(self.buf):
            raise ValueError("field is outside the buffer")
        return int(_U16.unpack_from(self.buf, pos)[0])


class _Cols:
    """Vectorised :class:`_Fb` reads of many tables of one vector at once (an index or stats
    block of a 4 KiB-block SST holds thousands: docs/format.md). Every read is bounds-checked
    as :class:`_Fb`'s are; every failure is ``ValueError``."""

    def __init__(self, fb: _Fb) -> None:
        self.fb = fb
        self.n = len(fb.buf)

    def _view(self, fmt: str, width: int) -> npt.NDArray[np.int64]:
        count = max(0, self.n - width + 1)
        return np.ndarray((count,), dtype=fmt, buffer=self.fb.buf, strides=(1,))

    def take(self, fmt: str, width: int, pos: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        return self.take_raw(fmt, width, pos).astype(np.int64)

    def take_raw(self, fmt: str, width: int, pos: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        if len(pos) and (int(pos.min()) < 0 or int(pos.max()) > self.n - width):
            raise ValueError("a field is outside the buffer")
        return self._view(fmt, width)[pos]

    def tables(self, start: int, count: int) -> npt.NDArray[np.int64]:
        """The tables a vector of ``count`` offsets at ``start`` points to."""
        slots = start + 4 * np.arange(count, dtype=np.int64)
        return slots + self.take("<u4", 4, slots)

    def field(self, tables: npt.NDArray[np.int64], slot: int) -> npt.NDArray[np.int64]:
        """:meth:`_Fb.field` of each table: its field's absolute position, or 0 when absent."""
        n = self.n
        vt = tables - self.take("<i4", 4, tables)
        if len(vt) and (int(vt.min()) < 0 or int(vt.max()) > n - 4):
            raise ValueError("vtable is outside the buffer")
        vt_len = self.take("<u2", 2, vt)
        at = 4 + 2 * slot
        present = (at + 2 <= vt_len) & (vt + vt_len <= n)
        rel = np.zeros(len(tables), dtype=np.int64)
        rel[present] = self.take("<u2", 2, vt[present] + at)
        return np.where(rel != 0, tables + rel, 0)

    def scalar(self, fmt: str, width: int, pos: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """:meth:`_Fb.u64` / :meth:`_Fb.u16` of each position (0 where the field is absent)."""
        out = np.zeros(len(pos), dtype=np.int64)
        there = pos != 0
        out[there] = self.take(fmt, width, pos[there])
        return out


def decode_index(name: str, buf: bytes | memoryview) -> tuple[list[int], list[bytes]]:
    """``(block offsets, index keys)`` of an SsTableIndex."""
    fb = _Fb(bytes(buf))
    try:
        root = fb.u32(0)
        metas = fb.field(root, 0)
        if not metas:
            raise ValueError("block_meta is missing")
        start, n = fb.vector(metas, 4)
        if n > len(fb.buf) // 4:
            raise ValueError(f"{n} blocks cannot fit")
        cols = _Cols(fb)
        t = cols.tables(start, n)
        key_at = cols.field(t, 1)
        if n and not key_at.all():
            raise ValueError(f"block {int(np.argmin(key_at != 0))} has no first_key")
        kvec = key_at + cols.take("<u4", 4, key_at)  # deref
        klen = cols.take("<u4", 4, kvec)
        kstart = kvec + 4
        fb.budget -= int((4 + klen).sum())  # as _Fb.vector charges each key vector
        if fb.budget < 0:
            raise ValueError("vectors are read more than twice the buffer: shared offsets")
        if n and int((kstart + klen).max()) > len(fb.buf):
            bad = int(np.argmax(kstart + klen > len(fb.buf)))
            raise ValueError(f"first_key of block {bad} runs past the index")
        off_at = cols.field(t, 0)
        off = np.zeros(n, dtype=np.uint64)  # u64 (Python ints below: no wrap past 2**63)
        off[off_at != 0] = cols.take_raw("<u8", 8, off_at[off_at != 0])
        offsets: list[int] = off.tolist()
        data = fb.buf
        keys = [data[a:b] for a, b in zip(kstart.tolist(), (kstart + klen).tolist(), strict=True)]
    except (ValueError, struct.error, IndexError) as e:
        raise CorruptionError(name, f"malformed SST index: {e}") from None
    return offsets, keys


def decode_stats(name: str, buf: bytes | memoryview) -> Stats:
    fb = _Fb(bytes(buf))
    try:
        root = fb.u32(0)
        counts: list[tuple[int, ...]] = [(), (), ()]
        vec = fb.field(root, 5)
        if vec:
            start, n = fb.vector(vec, 4)
            if n > len(fb.buf) // 4:
                raise ValueError(f"{n} block stats cannot fit")
            cols = _Cols(fb)
            t = cols.tables(start, n)
            for slot in range(3):
                counts[slot] = tuple(cols.scalar("<u2", 2, cols.field(t, slot)).tolist())
        totals = [fb.u64(fb.field(root, slot)) for slot in range(5)]
        return Stats(
            totals[0],
            totals[1],
            totals[2],
            totals[3],
            totals[4],
            counts[0],
            counts[1],
            counts[2],
        )
    except (ValueError, struct.error, IndexError) as e:
        raise CorruptionError(name, f"malformed SST stats: {e}") from None


def bisect_all(index: list[bytes], keys: list[bytes]) -> list[int]:
    """``bisect_left(index, k)`` of each of ``keys`` (sorted, distinct). Many keys: one stable
    sort of both lists (two runs, which the sort merges in linear time; a key sorts before an
    equal index key, so its position minus its rank counts the index keys below it)."""
    n = len(keys)
    if n * 8 < len(index):
        return list(map(bisect.bisect_left, itertools.repeat(index, n), keys))
    both = keys + index
    order = np.array(sorted(range(len(both)), key=both.__getitem__))
    return (np.flatnonzero(order < n) - np.arange(n)).tolist()  # type: ignore[no-any-return]
