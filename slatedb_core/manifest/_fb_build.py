"""A small back-to-front FlatBuffers builder for the tables of :mod:`._fb_tables`.

Only what SlateDB 0.17's manifest and SST info use: tables (vtables shared), vectors of tables,
byte vectors and strings. Each table is packed with one ``struct`` call, its plan compiled once
per set of present fields; this is what keeps encoding a 100k-SST manifest fast (see
:mod:`slatedb_core.manifest.codec`).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from operator import is_not
from typing import Any

from slatedb_core.manifest._fb_tables import FMT, NONES, U32, WIDTH, FbTable, picker

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
        self.last: WriteLayout | None = None
        """The layout of the table written last (where each of its fields lies)."""

    def _put(self, data: bytes, align: int, shift: int = 0) -> int:
        pad = (shift - self._size - len(data)) % align
        if pad:
            self._chunks.append(bytes(pad))
        self._chunks.append(data)
        self._size += pad + len(data)
        return self._size

    def table(self, table: FbTable, values: Sequence[Any]) -> int:
        """Children (offset values) must already be written; ``None`` leaves a field absent."""
        present = tuple(map(is_not, values, NONES))
        lay = table.layouts.get(present)
        if lay is None:
            lay = table.layouts[present] = WriteLayout(table, present)
        vt = self._vtables.get(lay.vtable)
        if vt is None:
            vt = self._vtables[lay.vtable] = self._put(lay.vtable, 2)
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
        lay = table.layouts.get(_BOTH)
        if lay is None:
            lay = table.layouts[_BOTH] = WriteLayout(table, _BOTH)
        vt = self._vtables.get(lay.vtable)
        if vt is None:
            vt = self._vtables[lay.vtable] = self._put(lay.vtable, 2)
        size = lay.struct.size
        pad = -(self._size + size) % 8
        start = self._size + pad + size
        if pad:
            self._chunks.append(bytes(pad))
        self._chunks.append(lay.struct.pack(vt - start, high, low))
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

    def string(self, text: str) -> int:
        data = text.encode("utf-8")
        return self._put(U32.pack(len(data)) + data + b"\0", 4)

    def finish(self, root: int) -> bytes:
        """The buffer: the root offset, then everything written (no file identifier: SlateDB
        0.17 writes none), its length a multiple of 8 so 8-byte fields stay aligned."""
        start = self._size + (-self._size - 4) % 8 + 4
        self._put(U32.pack(start - root), 8)
        return b"".join(reversed(self._chunks))
