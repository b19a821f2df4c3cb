"""Raw FlatBuffers inspection and surgery on manifest objects (a u16 version prefix, then the
buffer), independent of the codec under test: vtables read and patched by hand."""

from __future__ import annotations

import struct
from collections.abc import Sequence

PREFIX = 2


def _vtable(buf: bytes | bytearray, table: int) -> tuple[int, list[int]]:
    vt = table - struct.unpack_from("<i", buf, table)[0]
    size = struct.unpack_from("<H", buf, vt)[0]
    return vt, list(struct.unpack_from(f"<{(size - 4) // 2}H", buf, vt + 4))


def _root(buf: bytes | bytearray) -> int:
    return PREFIX + int(struct.unpack_from("<I", buf, PREFIX)[0])


def _follow(buf: bytes | bytearray, table: int, slot: int) -> int:
    """The position an offset field points to."""
    field = table + _vtable(buf, table)[1][slot]
    return field + int(struct.unpack_from("<I", buf, field)[0])


def root_slots(data: bytes) -> list[int]:
    """The root table's vtable: each slot's offset in the table, 0 for an absent field."""
    return _vtable(data, _root(data))[1]


def table_slots(data: bytes, path: Sequence[int]) -> list[int]:
    """The vtable of the table reached from the root by ``path``: pairs of (offset field slot,
    index into the vector it points to)."""
    table = _root(data)
    for slot, index in zip(path[::2], path[1::2], strict=True):
        vector = _follow(data, table, slot)
        element = vector + 4 + 4 * index
        table = element + struct.unpack_from("<I", data, element)[0]
    return _vtable(data, table)[1]


def drop_slot(data: bytes, slot: int) -> bytes:
    """The object with the root's field ``slot`` made absent (its vtable entry zeroed), as if the
    writer had not known the field."""
    buf = bytearray(data)
    vt, _ = _vtable(buf, _root(buf))
    struct.pack_into("<H", buf, vt + 4 + 2 * slot, 0)
    return bytes(buf)


def with_one_segment(data: bytes) -> bytes:
    """Our encoding with a non-empty ``segments`` vector (ManifestV2 slot 16): its count patched
    to 1 (the element is whatever bytes follow: enough to be seen as segmented)."""
    buf = bytearray(data)
    vector = _follow(buf, _root(buf), 16)
    struct.pack_into("<I", buf, vector, 1)
    return bytes(buf)
