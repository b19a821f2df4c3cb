"""Mutations of valid encodings, as plain data so hypothesis can draw and shrink them.

A :data:`Mutation` is a tuple whose first item names the operation; positions are taken modulo
the current length, so any drawn tuple applies to any input. Checksums would reject almost every
mutated input at the first check, so targets re-seal what they mutate (:func:`reseal` for the
metadata envelope, :func:`repair_sst` for SSTs, :func:`repair_crc_tail` for bloom filters) on most
inputs: those reach the structural checks behind the checksums, which is where decoders break.
"""

from __future__ import annotations

import itertools
import json
import random
import struct
import zlib
from collections.abc import Sequence
from typing import Any

from slatedb_core.errors import CorruptionError
from slatedb_core.manifest.sst_info import decode_sst_info
from slatedb_core.meta import envelope
from slatedb_core.sst.index import decode_index

Mutation = tuple[str, int, int, bytes]
"""(op, a, b, blob). Ops: flip (pos a, bit b), set (pos a, byte b), int (pos a, interesting value
index b, width from blob[0]), truncate (keep a), cut (from a, b bytes), insert (at a, blob),
dup (from a, b bytes, inserted after itself), splice (keep [0, a), then other seed b from the same
offset), random (replace everything by blob), json (if the input is JSON: value number a, in
document order, replaced by the raw JSON text JSON_GARBAGE[b]), alias (the FlatBuffers offsets
in the b % 256 (b if blob is b"all") aligned u32 slots after the one at about a % n, aligned
after the 2-byte version prefix, all made to name what that one names: one table read many
times, issue 39 item 5)."""

OPS = (
    "flip",
    "set",
    "int",
    "truncate",
    "cut",
    "insert",
    "dup",
    "splice",
    "random",
    "json",
    "alias",
)
WIDTHS = (1, 2, 4, 8)


def interesting(data_len: int) -> list[int]:
    """Values that sit on the edges decoders get wrong: zero, signs, widths, the input's size."""
    return [
        0,
        1,
        2,
        7,
        8,
        16,
        0x7F,
        0x80,
        0xFF,
        0x100,
        0x7FFF,
        0x8000,
        0xFFFF,
        0x10000,
        0x7FFFFFFF,
        0x80000000,
        0xFFFFFFFF,
        2**32,
        2**63 - 1,
        2**63,
        2**64 - 1,
        data_len,
        data_len - 1,
        data_len + 1,
        data_len // 2,
        data_len - 10,
        data_len - 14,
    ]


JSON_GARBAGE = (
    "Infinity",
    "-Infinity",
    "NaN",
    "-1",
    "1.5",
    "1e400",
    "-0",
    "18446744073709551616",
    "340282366920938463463374607431768211456",
    "true",
    "false",
    "null",
    '"x"',
    '""',
    '"-1"',
    "[]",
    "{}",
    '{"a": 1}',
    "[1]",
    "0",
    '"7ZZZZZZZZZZZZZZZZZZZZZZZZZ"',
    '"8ZZZZZZZZZZZZZZZZZZZZZZZZZ"',
    '"01ARZ3NDEKTSV4RRFFQ69G5FA"',
    '"01ARZ3NDEKTSV4RRFFQ69G5FAV\\u0000"',
    '"\\ud800"',
    "[" * 3000 + "]" * 3000,
    '{"a":' * 3000 + "1" + "}" * 3000,
)
_HOLE = "\x00fuzz-hole\x00"


def _json_field(data: bytes, index: int, garbage: str) -> bytes:
    """Field-level garbage for JSON payloads (the compactions records)."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return data
    slots: list[tuple[Any, Any]] = []  # (container, key) of every value, in document order

    def walk(node: Any) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for k, v in items:
            slots.append((node, k))
            if isinstance(v, dict | list):
                walk(v)

    if not isinstance(doc, dict | list):
        return garbage.encode()
    walk(doc)
    if not slots:
        return garbage.encode()
    container, k = slots[index % len(slots)]
    container[k] = _HOLE
    return json.dumps(doc).replace(json.dumps(_HOLE), garbage).encode()


def apply(data: bytes, mutation: Mutation, others: Sequence[bytes]) -> bytes:
    op, a, b, blob = mutation
    n = len(data)
    if op == "json":
        return (
            _json_field(data, a, JSON_GARBAGE[b % len(JSON_GARBAGE)]) if data[:1] == b"{" else data
        )
    if op == "random":
        return blob
    if op == "insert":
        pos = a % (n + 1)
        return data[:pos] + blob + data[pos:]
    if op == "truncate":
        return data[: a % (n + 1)]
    if op == "splice":
        other = others[b % len(others)] if others else data
        pos = a % (n + 1)
        return data[:pos] + other[pos:]
    if n == 0:
        return data
    pos = a % n
    if op == "flip":
        buf = bytearray(data)
        buf[pos] ^= 1 << (b % 8)
        return bytes(buf)
    if op == "set":
        buf = bytearray(data)
        buf[pos] = b % 256
        return bytes(buf)
    if op == "int":
        width = WIDTHS[(blob[0] if blob else 2) % len(WIDTHS)]
        values = interesting(n)
        value = values[b % len(values)] % (1 << (8 * width))
        # Fields are aligned in every format here: write at an aligned offset most of the time.
        at = pos - pos % width if not blob or blob[0] < 192 else pos
        return data[:at] + value.to_bytes(width, "little") + data[at + width :]
    if op == "cut":
        return data[:pos] + data[pos + 1 + b % 64 :]
    if op == "alias":
        return _alias(data, pos, b % 256 if blob != b"all" else b)
    if op == "dup":
        piece = data[pos : pos + 1 + b % 64]
        end = pos + len(piece)
        return data[:end] + piece + data[end:]
    raise ValueError(f"unknown mutation {op!r}")


def _alias(data: bytes, pos: int, count: int) -> bytes:
    """Offsets in ``count`` u32 slots from ``pos`` (aligned as FlatBuffers aligns them after a
    2-byte version prefix) made to name the first slot's target, as if each slot were an element
    of a vector of tables (or any offset field) pointing at one shared table."""
    first = pos - (pos - 2) % 4
    if first < 2 or first + 4 > len(data):
        return data
    target = first + int.from_bytes(data[first : first + 4], "little")
    if target >= len(data):
        return data
    buf = bytearray(data)
    for at in range(first + 4, min(len(data) - 3, first + 4 + 4 * count), 4):
        buf[at : at + 4] = ((target - at) & 0xFFFFFFFF).to_bytes(4, "little")
    return bytes(buf)


def apply_all(data: bytes, mutations: Sequence[Mutation], others: Sequence[bytes]) -> bytes:
    for m in mutations:
        data = apply(data, m, others)
    return data


def random_mutation(rng: random.Random) -> Mutation:
    """The same distribution the hypothesis strategy draws from, for the long-run CLI."""
    op = rng.choice(OPS)
    blob = b""
    if op in ("insert", "int"):
        blob = rng.randbytes(rng.randrange(1, 17))
    elif op == "random":
        blob = rng.randbytes(rng.randrange(0, 200))
    return (op, rng.randrange(1 << 20), rng.randrange(1 << 16), blob)


# ---------------------------------------------------------------------------- checksum repair


def payload_of(sealed: bytes) -> bytes:
    """The envelope's payload without any checks (what lies between header and CRC)."""
    return sealed[envelope.HEADER_SIZE : max(envelope.HEADER_SIZE, len(sealed) - 4)]


def reseal(original: bytes, payload: bytes) -> bytes:
    """``payload`` in the envelope header of ``original`` (magic, version, flags and nonce kept,
    length and CRC made right), so the payload decoder itself sees the mutation."""
    head = bytearray(original[: envelope.HEADER_SIZE].ljust(envelope.HEADER_SIZE, b"\0"))
    struct.pack_into("<I", head, envelope.HEADER_SIZE - 4, len(payload) & 0xFFFFFFFF)
    body = bytes(head) + payload
    return body + struct.pack("<I", zlib.crc32(body))


def repair_crc_tail(data: bytes) -> bytes:
    """Make the trailing u32 the CRC-32 of everything before it (bloom filter, index)."""
    if len(data) < 4:
        return data
    return data[:-4] + struct.pack("<I", zlib.crc32(data[:-4]))


def _fix_crc_at(buf: bytearray, start: int, end: int) -> None:
    """The u32 (big-endian, as SlateDB's SST sections) at ``end - 4`` becomes the CRC of
    ``buf[start:end-4]``, if the range is inside."""
    if 0 <= start <= end - 4 and end <= len(buf):
        struct.pack_into(">I", buf, end - 4, zlib.crc32(bytes(buf[start : end - 4])))


def repair_sst(data: bytes) -> bytes:
    """Recompute every CRC of an SST that its (possibly mutated) footer, info and index still
    locate: the info, the filter, the index, the stats and each data block. Best effort: where an
    offset points outside the object or a section does not parse, the rest is left as it is."""
    buf = bytearray(data)
    size = len(buf)
    if size < 14:
        return data
    info_at = struct.unpack_from(">Q", buf, size - 10)[0]
    if not 0 <= info_at <= size - 14:
        return data
    _fix_crc_at(buf, info_at, size - 10)
    try:
        info = decode_sst_info(bytes(buf[info_at : size - 14]), "x")
    except CorruptionError:
        return bytes(buf)
    for off, length in (
        (info.filter_offset, info.filter_len),
        (info.index_offset, info.index_len),
        (info.stats_offset, info.stats_len),
    ):
        if length:
            _fix_crc_at(buf, off, off + length)
    end = info.index_offset + info.index_len
    if info.compression == 0 and 4 < info.index_len and end <= size:
        try:
            offsets, _ = decode_index("x", bytes(buf[info.index_offset : end - 4]))
        except CorruptionError:
            return bytes(buf)
        data_end = info.filter_offset if info.filter_len else info.index_offset
        for lo, hi in itertools.pairwise([*offsets, data_end]):
            if lo < hi <= data_end and len(offsets) < 10_000:
                _fix_crc_at(buf, lo, hi)
    return bytes(buf)
