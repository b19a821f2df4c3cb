"""FlatBuffers, written and read by hand: the one builder and bounds-checked reader of this
engine's FlatBuffers objects (the manifest, SST info in SST footers, ``.compactions``).

The layout rules are FlatBuffers' own (https://flatbuffers.dev/internals/): a buffer starts with
the root table's u32 offset; a table starts with an i32 back to its vtable (u16 vtable size, u16
table size, one u16 field offset per slot, 0 = absent); offsets to tables, vectors and strings are
u32 and point forwards; every scalar sits at a multiple of its width from the buffer's start,
which SlateDB's verifier checks. A table is described once as an :class:`FbTable` (one field kind
per vtable slot); the tables of SlateDB 0.17's schemas are in :mod:`slatedb_core.manifest.tables`.

Writing packs each table with one ``struct`` call, its plan compiled once per set of present
fields; reading compiles each vtable met to one ``struct`` call that reads every field. This is
what keeps encoding and decoding a 100k-SST manifest fast (see :mod:`slatedb_core.manifest.codec`).
The Python runtime has no verifier, and Python's negative indexing would silently wrap a bad
offset, so every offset is checked: a malformed buffer raises :class:`Malformed`, which the
public decoders turn into ``CorruptionError`` naming the object. Slots a table's description does
not know (SlateDB's future fields, or ours seen by an older description) are skipped.

A buffer is a graph, not a tree: nothing stops two offsets (or every element of a vector) from
naming one table, so a small buffer could make a decoder read one large blob, or one long vector,
again and again (a 74 KB manifest once asked for 256 MiB this way). The writer never shares a
vector, string or blob (only Ulid/Uuid tables, read by :meth:`FbReader.pair`), so the bytes a
reader copies out of vectors, strings and blobs add up to at most the buffer's length. Every
such read is charged to one budget per reader, :data:`READ_FACTOR` times the buffer plus
:data:`READ_SLACK`; a read past it raises :class:`Malformed` (docs/format.md, "Manifest").
"""

from __future__ import annotations

import gc
import struct
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from operator import add, is_not, itemgetter
from typing import Any

import numpy as np
import numpy.typing as npt

# Field kinds: B u8 (bool, byte enums; absent = 0), b optional u8 (absent = None), H optional u16
# (absent = None), I u32, Q u64, l i64 (absent = 0), q optional u64 (absent = None), O offset to a
# table, vector or string (absent = None), x a slot this codec neither writes nor reads.
WIDTH = {"B": 1, "b": 1, "H": 2, "I": 4, "Q": 8, "l": 8, "q": 8, "O": 4, "x": 0}
FMT = {"B": "B", "b": "B", "H": "H", "I": "I", "Q": "Q", "l": "q", "q": "Q", "O": "I"}
U32 = struct.Struct("<I")
I32 = struct.Struct("<i")
VT_HEAD = struct.Struct("<HH")
NONES = (None,) * 64
NP_DTYPE = {
    "B": "<u1",
    "b": "<u1",
    "H": "<u2",
    "I": "<u4",
    "Q": "<u8",
    "l": "<i8",
    "q": "<u8",
    "O": "<u4",
}
"""Each field kind's numpy dtype (:meth:`FbReader.columns`)."""
Positions = npt.NDArray[np.int64]
READ_FACTOR = 2
"""How many times its own length a buffer's vectors, strings and blobs may be read in all."""
READ_SLACK = 4096


def read_budget(size: int) -> int:
    """The bytes a decoder may copy out of a FlatBuffers buffer of ``size`` bytes in all (every
    reader of this engine's FlatBuffers objects: :class:`FbReader`, the SST index and stats)."""
    return READ_FACTOR * size + READ_SLACK


class FbTable:
    """One table: field kinds in vtable-slot order."""

    def __init__(self, name: str, kinds: str) -> None:
        self.name = name
        self.kinds = kinds
        self.absent = tuple(0 if k in "BIQl" else None for k in kinds)
        # the writer's encoding plans, one per set of present fields (:class:`WriteLayout`)
        self.layouts: dict[tuple[bool, ...], Any] = {}


def past(used: str, first_ours: int, ours: str) -> str:
    """Field kinds: ``used`` (SlateDB's slots), unused slots up to ``first_ours``, then ``ours``
    (what this engine keeps and SlateDB lacks, in slots past every slot SlateDB 0.17 uses)."""
    return used + "x" * (first_ours - len(used)) + ours


class Malformed(Exception):
    """Raised inside the readers; the public decoders turn it into CorruptionError."""


def picker(indices: Sequence[int]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """An itemgetter that always returns a tuple, whatever the number of indices."""
    if len(indices) == 1:
        only = indices[0]
        return lambda seq: (seq[only],)
    if not indices:
        return lambda seq: ()
    return itemgetter(*indices)


_BOTH = (True, True)


class WriteLayout:
    """How a table with a given set of present fields is packed: one struct call per table."""

    def __init__(self, table: FbTable, present: tuple[bool, ...]) -> None:
        slots = [s for s, p in enumerate(present) if p]
        for s in slots:
            if table.kinds[s] == "x":
                raise ValueError(f"{table.name} slot {s} is not written by this codec")
        # 4-byte fields first (they follow the 4-byte vtable offset), then 8, 2 and 1 bytes.
        order = sorted(slots, key=lambda s: (WIDTH[table.kinds[s]] != 4, -WIDTH[table.kinds[s]]))
        fmt, pos, offs = ["<i"], 4, [0] * (max(slots) + 1 if slots else 0)
        self.rel: list[tuple[int, int]] = []  # (index in packing order, position) of offsets
        for i, s in enumerate(order):
            kind = table.kinds[s]
            pad = -pos % WIDTH[kind]
            fmt.append("x" * pad + FMT[kind])
            pos += pad
            offs[s] = pos
            if kind == "O":
                self.rel.append((i, pos))
            pos += WIDTH[kind]
        self.pick = picker(order)
        self.struct = struct.Struct("".join(fmt))
        self.align = 8 if any(WIDTH[table.kinds[s]] == 8 for s in slots) else 4
        self.offs = tuple(offs)  # each slot's position in the table (0 = absent)
        self.vtable = struct.pack(f"<HH{len(offs)}H", 4 + 2 * len(offs), pos, *offs)


class FbWriter:
    """The builder; positions are byte counts from the end of the buffer, as in FlatBuffers."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self._size = 0
        self._vtables: dict[bytes, int] = {}
        self._pairs: dict[str, tuple[struct.Struct, int]] = {}
        self.last: WriteLayout | None = None
        """The layout of the table written last (where each of its fields lies)."""

    @property
    def size(self) -> int:
        """Bytes written so far: the position the next object ends at."""
        return self._size

    @property
    def vtables(self) -> dict[bytes, int]:
        """The vtables written so far, by their bytes."""
        return self._vtables

    @property
    def pairs(self) -> dict[str, tuple[struct.Struct, int]]:
        """:meth:`pair`'s plans (each names its vtable's position)."""
        return self._pairs

    def collapse(self) -> bytes:
        """Everything written so far, as it will end the buffer (one chunk from now on)."""
        data = b"".join(reversed(self._chunks))
        self._chunks = [data]
        return data

    def resume(
        self,
        tail: bytes,
        vtables: dict[bytes, int],
        pairs: dict[str, tuple[struct.Struct, int]],
    ) -> None:
        """Start an empty writer from ``tail``, the last bytes of an earlier buffer (what its
        writer had written at some point, see :meth:`collapse`), with the vtables and pair plans
        that lie inside it: what is written next may refer to anything in ``tail``."""
        if self._size:
            raise ValueError("resume() starts an empty writer")
        self._chunks = [tail]
        self._size = len(tail)
        self._vtables = vtables
        self._pairs = pairs

    def _put(self, data: bytes, align: int, shift: int = 0) -> int:
        pad = (shift - self._size - len(data)) % align
        if pad:
            self._chunks.append(bytes(pad))
        self._chunks.append(data)
        self._size += pad + len(data)
        return self._size

    def _plan(self, table: FbTable, present: tuple[bool, ...]) -> tuple[WriteLayout, int]:
        """How to pack ``table`` with these fields present, and where its vtable is (written
        once per buffer: tables of one layout share it)."""
        lay = table.layouts.get(present)
        if lay is None:
            lay = table.layouts[present] = WriteLayout(table, present)
        vt = self._vtables.get(lay.vtable)
        if vt is None:
            vt = self._vtables[lay.vtable] = self._put(lay.vtable, 2)
        return lay, vt

    def table(self, table: FbTable, values: Sequence[Any]) -> int:
        """Children (offset values) must already be written; ``None`` leaves a field absent."""
        lay, vt = self._plan(table, tuple(map(is_not, values, NONES)))
        size = lay.struct.size
        pad = (-self._size - size) % lay.align
        start = self._size + pad + size
        args: Sequence[Any] = lay.pick(values)
        if lay.rel:
            fixed = list(args)
            for i, pos in lay.rel:
                fixed[i] = start - pos - fixed[i]
            args = fixed
        if pad:
            self._chunks.append(bytes(pad))
        self._chunks.append(lay.struct.pack(vt - start, *args))
        self._size = start
        self.last = lay
        return start

    def pair(self, table: FbTable, high: int, low: int) -> int:
        """A table of two u64 fields, both present (Ulid, Uuid): :meth:`table` without its
        per-call planning, for the one table written most often."""
        plan = self._pairs.get(table.name)
        if plan is None:
            lay, vt = self._plan(table, _BOTH)
            plan = self._pairs[table.name] = (lay.struct, vt)
        packer, vt = plan
        size = packer.size
        pad = -(self._size + size) % 8
        start = self._size + pad + size
        if pad:
            self._chunks.append(bytes(pad))
        self._chunks.append(packer.pack(vt - start, high, low))
        self._size = start
        return start

    def tables(self, offsets: Sequence[int]) -> int:
        """A vector of tables (``offsets`` as returned by :meth:`table`)."""
        n = len(offsets)
        start = self._size + (-self._size) % 4 + 4 + 4 * n
        rel = map(int.__sub__, range(start - 4, start - 4 - 4 * n, -4), offsets)
        return self._put(struct.pack(f"<I{n}I", n, *rel), 4)

    def blob(self, data: bytes) -> int:
        """A ``[ubyte]`` vector."""
        return self._put(U32.pack(len(data)) + data, 4)

    def u32s(self, values: Sequence[int]) -> int:
        """A ``[uint32]`` vector."""
        return self._put(struct.pack(f"<I{len(values)}I", len(values), *values), 4)

    def string(self, text: str) -> int:
        data = text.encode("utf-8")
        return self._put(U32.pack(len(data)) + data + b"\0", 4)

    def finish(self, root: int) -> bytes:
        """The buffer: the root offset, then everything written (no file identifier: SlateDB
        0.17 writes none), its length a multiple of 8 so 8-byte fields stay aligned."""
        start = self._size + (-self._size - 4) % 8 + 4
        self._put(U32.pack(start - root), 8)
        return b"".join(reversed(self._chunks))


U64X2 = struct.Struct("<QQ")


class ReadLayout:
    """A vtable as found in the buffer, compiled to one struct call that reads every field."""

    def __init__(self, table: FbTable, offs: Sequence[int], tsize: int) -> None:
        kinds = table.kinds
        fields = sorted((off, s, kinds[s]) for s, off in enumerate(offs) if off and kinds[s] != "x")
        fmt, end = ["<"], fields[0][0] if fields else 0
        self.first = end
        index: dict[int, int] = {}
        self.rel: list[tuple[int, int]] = []
        for i, (off, slot, kind) in enumerate(fields):
            if off < end or off + WIDTH[kind] > tsize:
                raise Malformed(f"{table.name} field {slot} overlaps or lies outside its table")
            fmt.append("x" * (off - end) + FMT[kind])
            end = off + WIDTH[kind]
            index[slot] = i
            if kind == "O":
                self.rel.append((slot, off))
        self.struct = struct.Struct("".join(fmt))
        self.tsize = tsize
        self.fields = fields
        """``(offset in the table, slot, kind)`` of each field present, by offset."""
        n = len(fields)
        self.pick = picker([index.get(s, n + s) for s in range(len(kinds))])


class FbReader:
    """Bounds-checked access to one buffer; vtable layouts are compiled once and shared."""

    def __init__(self, buf: bytes | memoryview) -> None:
        self.buf = buf
        self._n = len(buf)
        self._layouts: dict[tuple[str, int], ReadLayout] = {}
        self._pairs: dict[int, tuple[int, int]] = {}
        self._budget = read_budget(self._n)
        self._u8: npt.NDArray[np.uint8] | None = None
        """Bytes the vectors, strings and blobs read from here may still copy (module doc)."""

    @property
    def u8(self) -> npt.NDArray[np.uint8]:
        """The buffer as a numpy array (no copy), for :meth:`columns`."""
        a = self._u8
        if a is None:
            a = self._u8 = np.frombuffer(self.buf, np.uint8)
        return a

    def root(self) -> int:
        if self._n < 8:
            raise Malformed(f"buffer of {self._n} bytes is too short")
        return int(U32.unpack_from(self.buf, 0)[0])

    def _layout(self, table: FbTable, vt: int) -> ReadLayout:
        if vt < 0 or vt + 4 > self._n:
            raise Malformed(f"{table.name} vtable at {vt} is out of bounds")
        vsize, tsize = VT_HEAD.unpack_from(self.buf, vt)
        if vsize < 4 or vsize % 2 or vt + vsize > self._n or tsize < 4:
            raise Malformed(f"{table.name} vtable at {vt} is malformed")
        k = min((vsize - 4) // 2, len(table.kinds))
        offs = struct.unpack_from(f"<{k}H", self.buf, vt + 4)
        lay = self._layouts[table.name, vt] = ReadLayout(table, offs, tsize)
        return lay

    def table(self, table: FbTable, pos: int) -> list[Any]:
        """Field values by slot; offset fields come back as absolute positions, absent ones as the
        schema default (0 for plain scalars, None for optional scalars and offsets)."""
        if pos < 0 or pos + 4 > self._n:
            raise Malformed(f"{table.name} table at {pos} is out of bounds")
        vt = pos - I32.unpack_from(self.buf, pos)[0]
        lay = self._layouts.get((table.name, vt)) or self._layout(table, vt)
        if pos + lay.tsize > self._n:
            raise Malformed(f"{table.name} table at {pos} runs past the buffer")
        vals = list(lay.pick(lay.struct.unpack_from(self.buf, pos + lay.first) + table.absent))
        for slot, off in lay.rel:
            vals[slot] += pos + off
        return vals

    def columns(self, table: FbTable, positions: Positions) -> dict[int, npt.NDArray[Any]] | None:
        """:meth:`table` of every table at ``positions`` at once (issue 42: a manifest's 10k SSTs
        were 10k calls per table kind): each field present as one array, by slot (an offset
        field as absolute positions, int64; an absent slot has no array: the caller takes the
        schema default). None when the tables do not all share one vtable (the caller then reads
        them one by one). The same checks as :meth:`table`, over every position."""
        n = self._n
        if not len(positions):
            return {}
        u8 = self.u8
        vts = self.vtable_positions(table, positions)
        vt = int(vts[0])
        if not bool((vts == vt).all()):
            return None
        lay = self._layouts.get((table.name, vt)) or self._layout(table, vt)
        if int(positions.max()) + lay.tsize > n:
            raise Malformed(f"a {table.name} table runs past the buffer")
        out: dict[int, npt.NDArray[Any]] = {}
        for off, slot, kind in lay.fields:
            at = positions + off
            vals = gather(u8, at, NP_DTYPE[kind])
            out[slot] = at + vals.astype(np.int64) if kind == "O" else vals
        return out

    def vtable_positions(self, table: FbTable, positions: Positions) -> Positions:
        """Where the vtable of each table of ``table`` at ``positions`` lies (its tables are
        checked to lie inside the buffer; the vtables are checked when read)."""
        if not len(positions):
            return positions
        if int(positions.min()) < 0 or int(positions.max()) + 4 > self._n:
            raise Malformed(f"a {table.name} table is out of bounds")
        out: Positions = positions - gather(self.u8, positions, "<i4")
        return out

    def positions(self, pos: int | None, what: str) -> Positions:
        """:meth:`tables` as an int64 array."""
        if pos is None:
            raise Malformed(f"required field {what} is missing")
        start, n = self._vector(pos, 4)
        rel = np.frombuffer(self.buf, "<u4", n, start).astype(np.int64)
        return rel + np.arange(start, start + 4 * n, 4, dtype=np.int64)

    def blobs(self, positions: Positions) -> list[bytes]:
        """:meth:`blob` of each of ``positions``, with the same checks and budget."""
        if not len(positions):
            return []
        n = self._n
        if int(positions.min()) < 0 or int(positions.max()) + 4 > n:
            raise Malformed("a vector is out of bounds")
        counts = gather(self.u8, positions, "<u4").astype(np.int64)
        starts = positions + 4
        ends = starts + counts
        if int(ends.max()) > n:
            raise Malformed("a vector runs past the buffer")
        self._budget -= int(ends.sum() - positions.sum())
        if self._budget < 0:
            raise Malformed(
                f"vectors are read more than {READ_FACTOR} times the buffer's length "
                "(shared by more offsets than a writer makes)"
            )
        buf = self.buf
        if not isinstance(buf, bytes):
            buf = bytes(buf)
        return list(map(buf.__getitem__, map(slice, starts.tolist(), ends.tolist())))

    def pair(self, table: FbTable, pos: int) -> tuple[int, int]:
        """The two u64 fields of a Ulid or Uuid table: :meth:`table`'s checks, with a fast path
        for the usual layout (both fields present, high before low)."""
        if pos < 0 or pos + 4 > self._n:
            raise Malformed(f"{table.name} table at {pos} is out of bounds")
        vt = pos - I32.unpack_from(self.buf, pos)[0]
        fast = self._pairs.get(vt)
        if fast is None:
            lay = self._layouts.get((table.name, vt)) or self._layout(table, vt)
            usual = lay.struct.format == "<QQ" and lay.pick((1, 2, 3, 4)) == (1, 2)
            fast = self._pairs[vt] = (lay.first if usual else -1, lay.tsize)
        first, tsize = fast
        if first < 0 or pos + tsize > self._n:
            high, low = self.table(table, pos)
            return high, low
        high, low = U64X2.unpack_from(self.buf, pos + first)
        return high, low

    def vtables(self) -> dict[bytes, int]:
        """The vtables of the tables read so far: their bytes, and where they lie."""
        out: dict[bytes, int] = {}
        for _, vt in self._layouts:
            vsize = VT_HEAD.unpack_from(self.buf, vt)[0]
            out.setdefault(bytes(self.buf[vt : vt + vsize]), vt)
        return out

    def slot_position(self, table: FbTable, pos: int, slot: int) -> int | None:
        """Where field ``slot`` of the table at ``pos`` lies (None if absent); the table must
        have been read with :meth:`table` already."""
        vt = pos - I32.unpack_from(self.buf, pos)[0]
        vsize = VT_HEAD.unpack_from(self.buf, vt)[0]
        if 4 + 2 * slot + 2 > vsize:
            return None
        off = struct.unpack_from("<H", self.buf, vt + 4 + 2 * slot)[0]
        return pos + off if off else None

    def _vector(self, pos: int, width: int) -> tuple[int, int]:
        if pos < 0 or pos + 4 > self._n:
            raise Malformed(f"vector at {pos} is out of bounds")
        count = U32.unpack_from(self.buf, pos)[0]
        size = count * width
        if pos + 4 + size > self._n:
            raise Malformed(f"vector at {pos} of {count} elements runs past the buffer")
        self._budget -= 4 + size
        if self._budget < 0:
            raise Malformed(
                f"vector at {pos}: the buffer's vectors are read more than {READ_FACTOR} times "
                "its length (shared by more offsets than a writer makes)"
            )
        return pos + 4, count

    def tables(self, pos: int | None, what: str) -> list[int]:
        """Absolute positions of the tables of a vector; a missing vector is an error."""
        if pos is None:
            raise Malformed(f"required field {what} is missing")
        start, n = self._vector(pos, 4)
        rel = struct.unpack_from(f"<{n}I", self.buf, start)
        return list(map(add, rel, range(start, start + 4 * n, 4)))

    def blob(self, pos: int) -> bytes:
        """A ``[ubyte]`` vector."""
        start, n = self._vector(pos, 1)
        return bytes(self.buf[start : start + n])

    def u32s(self, pos: int) -> tuple[int, ...]:
        """A ``[uint32]`` vector."""
        start, n = self._vector(pos, 4)
        return tuple(struct.unpack_from(f"<{n}I", self.buf, start))

    def string(self, pos: int) -> str:
        """A string: UTF-8 bytes, then the NUL FlatBuffers puts after them."""
        start, n = self._vector(pos, 1)
        if start + n >= self._n or self.buf[start + n] != 0:
            raise Malformed(f"string at {pos} is not NUL-terminated")
        return bytes(self.buf[start : start + n]).decode("utf-8")


def gather(u8: npt.NDArray[np.uint8], positions: Positions, dtype: str) -> npt.NDArray[Any]:
    """The value of ``dtype`` at each of ``positions`` of ``u8`` (any alignment; the caller
    checked that each lies inside)."""
    width = np.dtype(dtype).itemsize
    rows = u8[positions[:, None] + np.arange(width)]
    out: npt.NDArray[Any] = rows.view(dtype).reshape(len(positions))
    return out


@contextmanager
def gc_paused() -> Iterator[None]:
    """Decoding a 100k-SST manifest allocates ~500k acyclic objects; with the cyclic collector
    running, its repeated full passes over them (and over the previous manifest, still alive) more
    than double the decode time while finding nothing to free. Only re-enables what it disabled."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def need(value: Any, what: str) -> Any:
    """``value``, or Malformed if a required field is absent."""
    if value is None:
        raise Malformed(f"required field {what} is missing")
    return value
