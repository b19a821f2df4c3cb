"""A small bounds-checked FlatBuffers reader for the tables of :mod:`._fb_tables`.

The Python runtime has no verifier, and Python's negative indexing would silently wrap a bad
offset, so every offset is checked here: a malformed buffer raises :class:`Malformed`, which the
public decoders turn into ``CorruptionError`` naming the object. Slots a table's description
does not know (SlateDB's future fields, or ours seen by an older description) are skipped.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from operator import add
from typing import Any

from slatedb_core.manifest._fb_tables import (
    FMT,
    I32,
    U32,
    VT_HEAD,
    WIDTH,
    FbTable,
    Malformed,
    picker,
)

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
        n = len(fields)
        self.pick = picker([index.get(s, n + s) for s in range(len(kinds))])


class FbReader:
    """Bounds-checked access to one buffer; vtable layouts are compiled once and shared."""

    def __init__(self, buf: bytes | memoryview) -> None:
        self.buf = buf
        self._n = len(buf)
        self._layouts: dict[tuple[str, int], ReadLayout] = {}
        self._pairs: dict[int, tuple[int, int]] = {}

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
        if pos + 4 + count * width > self._n:
            raise Malformed(f"vector at {pos} of {count} elements runs past the buffer")
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

    def string(self, pos: int) -> str:
        return self.blob(pos).decode("utf-8")


def need(value: Any, what: str) -> Any:
    """``value``, or Malformed if a required field is absent."""
    if value is None:
        raise Malformed(f"required field {what} is missing")
    return value
