"""A minimal FlatBuffers writer for the SST's index and stats tables (``schemas/sst.fbs``).

It lays out bytes exactly as the ``flatbuffers`` package's ``Builder`` does (back to front:
each piece aligned to its size, a table's vtable shared with an identical earlier one, the root
aligned to the largest alignment used), which is also the layout SlateDB 0.17's Rust builder
produces for these tables (the oracle tests compare our SSTs with the wheel's byte for byte).
What it saves is the generic builder's per-call bookkeeping: an index of a few hundred blocks
is written in about a tenth of the time.
"""

from __future__ import annotations

import struct

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U64 = struct.Struct("<Q")
_PAD = [bytes(n) for n in range(16)]


class BackWriter:
    """Bytes written back to front; positions are counted from the end (the ``Builder``'s
    ``Offset()``)."""

    __slots__ = ("_fields", "_obj_end", "_parts", "_vtables", "minalign", "off")

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self.off = 0
        self.minalign = 1
        self._vtables: dict[tuple[int, ...], int] = {}
        self._fields: list[int] = []
        self._obj_end = 0

    def prep(self, size: int, extra: int) -> None:
        """Pad so that after ``extra`` more bytes the position is a multiple of ``size``."""
        if size > self.minalign:
            self.minalign = size
        pad = (-(self.off + extra)) & (size - 1)
        if pad:
            self._parts.append(_PAD[pad])
            self.off += pad

    def _put(self, b: bytes) -> None:
        self._parts.append(b)
        self.off += len(b)

    def byte_vector(self, data: bytes) -> int:
        """A ``[ubyte]`` vector; returns its position."""
        self.prep(4, len(data))
        self._parts.append(data)
        self._parts.append(_U32.pack(len(data)))
        self.off += len(data) + 4
        return self.off

    def uoffset(self, target: int) -> None:
        """A reference to the object at position ``target``."""
        self.prep(4, 0)
        self._put(_U32.pack(self.off - target + 4))

    def offset_vector(self, targets: list[int]) -> int:
        """A vector of references to tables, in this order; returns its position."""
        n = len(targets)
        self.prep(4, 4 * n)
        base = self.off
        # element j from the end sits at base + 4 * j + 4 (back-to-front) and points at target
        vals = [base + 4 * j + 4 - t for j, t in enumerate(reversed(targets))]
        self._parts.append(struct.pack(f"<{n}I", *reversed(vals)))
        self._parts.append(_U32.pack(n))
        self.off += 4 * n + 4
        return self.off

    def start(self, numfields: int) -> None:
        self._fields = [0] * numfields
        self._obj_end = self.off

    def u64_slot(self, slot: int, value: int) -> None:
        """A ulong field (left out at its default 0)."""
        if value:
            self.prep(8, 0)
            self._put(_U64.pack(value))
            self._fields[slot] = self.off

    def u16_slot(self, slot: int, value: int) -> None:
        """A ushort field (left out at its default 0)."""
        if value:
            self.prep(2, 0)
            self._put(_U16.pack(value))
            self._fields[slot] = self.off

    def offset_slot(self, slot: int, target: int) -> None:
        self.uoffset(target)
        self._fields[slot] = self.off

    def end(self) -> int:
        """Close the table: its vtable offset, and a vtable unless an equal one exists."""
        self.prep(4, 0)
        at = len(self._parts)
        self._put(b"\0\0\0\0")
        obj = self.off
        fields = self._fields
        while fields and fields[-1] == 0:
            fields.pop()
        vt = [obj - f if f else 0 for f in fields]
        key = (*vt, obj - self._obj_end)
        found = self._vtables.get(key)
        if found is None:
            self._put(struct.pack(f"<{len(vt) + 2}H", 2 * (len(vt) + 2), obj - self._obj_end, *vt))
            self._parts[at] = _I32.pack(self.off - obj)
            self._vtables[key] = self.off
        else:
            self._parts[at] = _I32.pack(found - obj)
        return obj

    def finish(self, root: int) -> bytes:
        self.prep(self.minalign, 4)
        self.uoffset(root)
        return b"".join(reversed(self._parts))
