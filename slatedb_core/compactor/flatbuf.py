"""A small FlatBuffers builder and bounds-checked reader for the ``.compactions`` codec.

The layout rules are FlatBuffers' own (https://flatbuffers.dev/internals/): a buffer starts with
the root table's u32 offset; a table starts with an i32 back to its vtable (``u16`` vtable size,
``u16`` table size, one ``u16`` field offset per slot, 0 = absent); offsets to tables, vectors and
strings are u32 and point forwards; every scalar sits at a multiple of its width from the buffer's
start, which is what SlateDB's verifier checks. Records are a few hundred bytes, so this is plain
Python: there is no bulk path here.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

U8 = "B"
U16 = "H"
U32 = "I"
U64 = "Q"
REF = "ref"
"""A field kind: an offset to a table, vector or string, given as a position from the builder."""

_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_WIDTH = {U8: 1, U16: 2, U32: 4, U64: 8, REF: 4}


class Malformed(Exception):
    """Raised by :class:`Reader`; the codec turns it into CorruptionError."""


class Builder:
    """Builds a buffer back to front, as FlatBuffers builders do. A position is a distance from
    the end of the finished buffer; children are written before the tables that point at them."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self.size = 0

    def _pad(self, align: int, then: int) -> None:
        """Pad so that after ``then`` more bytes the size is a multiple of ``align``."""
        pad = -(self.size + then) % align
        if pad:
            self._push(bytes(pad))

    def _push(self, data: bytes) -> None:
        self._chunks.append(data)
        self.size += len(data)

    def table(self, fields: Sequence[tuple[int, str, int | None]]) -> int:
        """A table from ``(slot, kind, value)``; ``None`` leaves the field absent. Widest fields go
        last in memory, so every one is aligned without gaps between them."""
        present = sorted(
            ((s, k, v) for s, k, v in fields if v is not None), key=lambda f: _WIDTH[f[1]]
        )
        start = self.size
        at: dict[int, int] = {}
        for slot, kind, value in reversed(present):
            width = _WIDTH[kind]
            self._pad(width, width)
            if kind == REF:
                value = self.size + 4 - value
                kind = U32
            self._push(struct.pack("<" + kind, value))
            at[slot] = self.size
        self._pad(4, 4)
        table_pos = self.size + 4
        n = max(at) + 1 if at else 0
        slots = [table_pos - at[s] if s in at else 0 for s in range(n)]
        vtable = struct.pack(f"<HH{n}H", 4 + 2 * n, table_pos - start, *slots)
        self._push(_I32.pack(len(vtable)))  # the vtable sits right before its table
        self._push(vtable)
        return table_pos

    def _vector(self, body: bytes, count: int, align: int) -> int:
        self._pad(max(4, align), len(body) + 4)
        self._push(body)
        self._push(_U32.pack(count))
        return self.size

    def refs(self, positions: Sequence[int]) -> int:
        """A vector of offsets to tables already written."""
        n = len(positions)
        self._pad(4, 4 * n + 4)
        end = self.size + 4 * n  # position of element 0
        body = struct.pack(f"<{n}I", *(end - 4 * i - p for i, p in enumerate(positions)))
        return self._vector(body, n, 4)

    def u32s(self, values: Sequence[int]) -> int:
        return self._vector(struct.pack(f"<{len(values)}I", *values), len(values), 4)

    def blob(self, data: bytes) -> int:
        return self._vector(bytes(data), len(data), 1)

    def string(self, text: str) -> int:
        data = text.encode("utf-8")
        self._pad(4, len(data) + 5)
        self._push(data + b"\0")
        self._push(_U32.pack(len(data)))
        return self.size

    def finish(self, root: int, prefix: bytes = b"") -> tuple[bytes, int]:
        """The finished buffer after ``prefix`` (not part of the FlatBuffer: alignment counts from
        the byte after it), and how far the FlatBuffer starts from the end of the result."""
        self._pad(8, 4)
        self._push(_U32.pack(self.size + 4 - root))
        return prefix + b"".join(reversed(self._chunks)), self.size


class Table:
    """One table in a :class:`Reader`'s buffer: typed, bounds-checked access by slot."""

    __slots__ = ("_offs", "_r", "name", "pos")

    def __init__(self, reader: Reader, pos: int, name: str) -> None:
        buf, n = reader.buf, len(reader.buf)
        if pos < 0 or pos % 4 or pos + 4 > n:
            raise Malformed(f"{name} table at {pos} is out of bounds or unaligned")
        vt = pos - _I32.unpack_from(buf, pos)[0]
        if vt < 0 or vt % 2 or vt + 4 > n:
            raise Malformed(f"{name} vtable at {vt} is out of bounds")
        vsize, tsize = struct.unpack_from("<HH", buf, vt)
        if vsize < 4 or vsize % 2 or vt + vsize > n or tsize < 4 or pos + tsize > n:
            raise Malformed(f"{name} vtable at {vt} is malformed")
        self._offs = struct.unpack_from(f"<{(vsize - 4) // 2}H", buf, vt + 4)
        for off in self._offs:
            if off and (off < 4 or off >= tsize):
                raise Malformed(f"{name} field at {off} lies outside its {tsize}-byte table")
        self._r, self.pos, self.name = reader, pos, name

    def _at(self, slot: int, kind: str) -> int | None:
        off = self._offs[slot] if slot < len(self._offs) else 0
        if not off:
            return None
        at = self.pos + off
        width = _WIDTH[kind]
        if at % width or at + width > len(self._r.buf):
            raise Malformed(f"{self.name} field {slot} is unaligned or out of bounds")
        return at

    def scalar(self, slot: int, kind: str) -> int | None:
        at = self._at(slot, kind)
        return None if at is None else int(struct.unpack_from("<" + kind, self._r.buf, at)[0])

    def ref(self, slot: int) -> int | None:
        at = self._at(slot, REF)
        return None if at is None else at + int(_U32.unpack_from(self._r.buf, at)[0])

    def field_offset(self, slot: int, kind: str) -> int | None:
        """Where the field's bytes are in the buffer (None when absent)."""
        return self._at(slot, kind)


class Reader:
    def __init__(self, buf: bytes) -> None:
        self.buf = buf

    def root(self, name: str) -> Table:
        if len(self.buf) < 8:
            raise Malformed(f"buffer of {len(self.buf)} bytes is too short")
        return Table(self, int(_U32.unpack_from(self.buf, 0)[0]), name)

    def table(self, pos: int, name: str) -> Table:
        return Table(self, pos, name)

    def _vector(self, pos: int, width: int) -> tuple[int, int]:
        if pos % 4 or pos + 4 > len(self.buf):
            raise Malformed(f"vector at {pos} is out of bounds or unaligned")
        count = int(_U32.unpack_from(self.buf, pos)[0])
        if pos + 4 + count * width > len(self.buf):
            raise Malformed(f"vector at {pos} of {count} elements runs past the buffer")
        return pos + 4, count

    def tables(self, pos: int, name: str) -> list[Table]:
        start, n = self._vector(pos, 4)
        rel = struct.unpack_from(f"<{n}I", self.buf, start)
        return [Table(self, start + 4 * i + r, name) for i, r in enumerate(rel)]

    def u32s(self, pos: int) -> tuple[int, ...]:
        start, n = self._vector(pos, 4)
        return tuple(struct.unpack_from(f"<{n}I", self.buf, start))

    def blob(self, pos: int) -> bytes:
        start, n = self._vector(pos, 1)
        return bytes(self.buf[start : start + n])

    def string(self, pos: int) -> str:
        start, n = self._vector(pos, 1)
        if start + n >= len(self.buf) or self.buf[start + n] != 0:
            raise Malformed(f"string at {pos} is not NUL-terminated")
        try:
            return bytes(self.buf[start : start + n]).decode("utf-8")
        except UnicodeDecodeError as e:
            raise Malformed(f"string at {pos} is not UTF-8: {e}") from None
