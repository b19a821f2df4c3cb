"""The SST byte layout, and the small fixed-size pieces shared by the writer and the reader.

Why this shape: an SST is read from object storage, where every request costs far more than the
bytes it moves. The manifest's ``SstInfo`` therefore records where the index starts and how long the
object is, so a reader fetches index + filter + footer with ONE ranged GET ``[index_offset,
size_bytes)`` and no HEAD. Data blocks are columnar so both directions are a handful of numpy /
``pyarrow.Array.from_buffers`` calls per block instead of Python work per entry.

All integers are little-endian. ``align8(x)`` rounds ``x`` up to a multiple of 8. Every byte of the
object is covered by exactly one CRC-32 (zlib's polynomial, :mod:`slatedb_core.store.checksum`), and all
padding is zero and checksummed, so a flipped byte anywhere is detected.

Object::

    [block 0][block 1]...[block B-1][index][filter][metadata][tail]
    0 ........................... index_offset    |         |
                       filter_offset = index_offset + index_len
                                  footer = filter_offset + filter_len ... size_bytes

Data block (stored; starts at a multiple of 8 so uncompressed columns decode zero-copy, aligned)::

    body      body_len bytes: the raw payload, compressed with the SST's codec unless "none"
    pad       align8(body_len) - body_len zero bytes
    trailer   u32 body_len, u32 raw_len, u32 entry_count n, u32 crc32(body + pad + first 12 bytes)

Raw payload of a block with n entries (K key bytes, V value bytes; raw_len = 17n + 8 + K + V)::

    seqs        u64[n]      at 0
    key_offs    i32[n+1]    at 8n            (key_offs[0] = 0, strictly increasing, last = K)
    value_offs  i32[n+1]    at 12n + 4       (value_offs[0] = 0, non-decreasing, last = V)
    kinds       u8[n]       at 16n + 8       (0 = value, 1 = tombstone)
    key bytes   K           at 17n + 8
    value bytes V

Raw payload of a block in an SST of format version 2 (the fixed-width layout, written for bulk
loads whose keys all have one width K1 >= 1 and values one width V1, every entry a value of one
sequence number; raw_len = 16 + n * (K1 + V1))::

    seq         u64         at 0             (every entry's)
    K1, V1      u32, u32    at 8
    key bytes   n * K1      at 16
    value bytes n * V1

It saves the 17 bytes per entry of seqs, offsets and kinds (about 13% of an SST of 16-byte keys
and 100-byte values); a reader rebuilds those columns when it decodes the block.

Index (index_len bytes; B blocks; the first and last key of block i are keys 2i and 2i+1)::

    u32 B, u32 reserved = 0
    u64 block_offs[B+1]     block i is [block_offs[i], block_offs[i+1]); block_offs[B] = index_offset
    u32 entry_counts[B]
    u32 key_offs[2B+1]      into the key bytes that follow
    key bytes
    u32 crc32 of everything above

Filter (filter_len bytes; 0 when the bloom filter is disabled or the SST is empty): see ``bloom``.

Metadata (meta_len bytes; free-form ``dict[str, int]`` of u64, e.g. the WAL's ``writer_epoch``)::

    repeated, sorted by name, names unique: u8 name_len (1..255), UTF-8 name, unsigned LEB128 value

Tail (the last 64 bytes)::

    u64 index_offset, u64 index_len, u64 filter_offset, u64 filter_len, u64 entry_count,
    u32 meta_len, u8 codec, u8 reserved = 0, u16 format_version, u32 block_count,
    u32 crc32(metadata + the 52 tail bytes before this field), 8 bytes magic b"SLTDBSST"

format_version: 1 = the block layout above, 2 = the fixed-width layout (all blocks).

Codecs (``SstInfo.compression``): 0 = none, 3 = lz4 (raw LZ4 blocks), 4 = zstd. The codes follow
SlateDB's compression enum so snappy (1) and zlib (2) could be added without renumbering.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

from slatedb_core.errors import CorruptionError, InvalidArgument
from slatedb_core.store.checksum import crc32

ENTRY_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary(), nullable=False),
        pa.field("seq", pa.uint64()),
        pa.field("kind", pa.uint8()),
        pa.field("value", pa.binary()),
    ]
)
KIND_VALUE = 0
KIND_TOMBSTONE = 1

MAGIC = b"SLTDBSST"
FORMAT_VERSION = 1
FIXED_FORMAT_VERSION = 2
"""Version 2: every block in the fixed-width layout (see the module doc)."""
FORMAT_VERSIONS = frozenset({FORMAT_VERSION, FIXED_FORMAT_VERSION})
FIXED_HEADER = struct.Struct("<QII")
TAIL = struct.Struct("<5QIBBHII8s")
TAIL_LEN = TAIL.size  # 64
BLOCK_TRAILER = struct.Struct("<IIII")
BLOCK_TRAILER_LEN = BLOCK_TRAILER.size  # 16
INDEX_HEADER = struct.Struct("<II")
U32 = struct.Struct("<I")
MAX_U64 = (1 << 64) - 1

# name -> (code stored in the SST and in SstInfo.compression, pyarrow codec name or None)
CODECS: dict[str, tuple[int, str | None]] = {"none": (0, None), "lz4": (3, "lz4_raw"), "zstd": (4, "zstd")}
CODEC_NAMES: dict[int, str] = {code: name for name, (code, _) in CODECS.items()}


def align8(n: int) -> int:
    return (n + 7) & ~7


def raw_layout(n: int) -> tuple[int, int, int, int]:
    """Offsets of key_offs, value_offs, kinds and key bytes in a block's raw payload."""
    return 8 * n, 12 * n + 4, 16 * n + 8, 17 * n + 8


@dataclass(frozen=True, slots=True)
class Tail:
    index_offset: int
    index_len: int
    filter_offset: int
    filter_len: int
    entry_count: int
    meta_len: int
    codec: int
    format_version: int
    block_count: int

    def footer_offset(self) -> int:
        return self.filter_offset + self.filter_len


def encode_footer(tail: Tail, meta: bytes) -> bytes:
    head = TAIL.pack(
        tail.index_offset, tail.index_len, tail.filter_offset, tail.filter_len, tail.entry_count,
        tail.meta_len, tail.codec, 0, tail.format_version, tail.block_count, 0, MAGIC,
    )[:52]
    crc = crc32(head, crc32(meta))
    return meta + head + U32.pack(crc) + MAGIC


def decode_tail(name: str, buf: bytes | memoryview, object_size: int) -> Tail:
    """Parse and cross-check the tail at the end of ``buf``; the metadata before it must be in buf.

    ``object_size`` is the length of the whole object, so every offset can be checked against it
    even when ``buf`` holds only its end.
    """
    if len(buf) < TAIL_LEN or object_size < TAIL_LEN:
        raise CorruptionError(name, f"object of {object_size} bytes is too short for an SST footer")
    raw = bytes(buf[len(buf) - TAIL_LEN :])
    (io, il, fo, fl, count, meta_len, codec, reserved, version, blocks, crc, magic) = TAIL.unpack(raw)
    if magic != MAGIC:
        raise CorruptionError(name, f"bad SST magic {magic!r}")
    if version not in FORMAT_VERSIONS:
        raise CorruptionError(name, f"unsupported SST format version {version}")
    if meta_len > len(buf) - TAIL_LEN:
        raise CorruptionError(name, f"metadata length {meta_len} runs past the start of the object")
    meta_start = len(buf) - TAIL_LEN - meta_len
    if crc32(raw[:52], crc32(buf[meta_start : len(buf) - TAIL_LEN])) != crc:
        raise CorruptionError(name, "footer checksum mismatch")
    if reserved != 0:
        raise CorruptionError(name, "reserved footer byte is not zero")
    if codec not in CODEC_NAMES:
        raise CorruptionError(name, f"unknown compression codec {codec}")
    tail = Tail(io, il, fo, fl, count, meta_len, codec, version, blocks)
    if io % 8 or io + il != fo or fo + fl + meta_len + TAIL_LEN != object_size:
        raise CorruptionError(name, "footer offsets do not tile the object")
    if il < INDEX_HEADER.size + 8 + 4 + 4:
        raise CorruptionError(name, f"index length {il} is too short")
    return tail


def encode_metadata(metadata: Mapping[str, int] | None) -> bytes:
    if not metadata:
        return b""
    out = bytearray()
    for key in sorted(metadata):
        value = metadata[key]
        if not isinstance(key, str):
            raise InvalidArgument(f"SST metadata names must be str, got {type(key).__name__}")
        raw = key.encode("utf-8")
        if not 1 <= len(raw) <= 255:
            raise InvalidArgument(f"SST metadata name {key!r} must be 1..255 UTF-8 bytes")
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise InvalidArgument(f"SST metadata {key!r} must be an int, got {type(value).__name__}")
        v = int(value)
        if not 0 <= v <= MAX_U64:
            raise InvalidArgument(f"SST metadata {key!r}={v} is not a u64")
        out.append(len(raw))
        out += raw
        while True:
            byte = v & 0x7F
            v >>= 7
            if v:
                out.append(byte | 0x80)
            else:
                out.append(byte)
                break
    return bytes(out)


def decode_metadata(name: str, buf: bytes | memoryview) -> dict[str, int]:
    data = bytes(buf)
    out: dict[str, int] = {}
    pos = 0
    prev: str | None = None
    try:
        while pos < len(data):
            n = data[pos]
            if n == 0 or pos + 1 + n > len(data):
                raise CorruptionError(name, "metadata name length is out of range")
            key = data[pos + 1 : pos + 1 + n].decode("utf-8")
            pos += 1 + n
            value = shift = 0
            while True:
                if pos >= len(data) or shift > 63:
                    raise CorruptionError(name, f"metadata value of {key!r} is truncated or overlong")
                byte = data[pos]
                pos += 1
                value |= (byte & 0x7F) << shift
                shift += 7
                if not byte & 0x80:
                    break
            if value > MAX_U64 or (prev is not None and key <= prev):
                raise CorruptionError(name, f"metadata entry {key!r} is out of range or order")
            out[key] = value
            prev = key
    except UnicodeDecodeError as e:
        raise CorruptionError(name, f"metadata name is not UTF-8: {e}") from None
    return out


@dataclass(frozen=True, slots=True)
class Index:
    """The decoded block index: per-block byte ranges, entry counts and first/last keys."""

    block_offs: npt.NDArray[np.uint64]
    entry_counts: npt.NDArray[np.uint32]
    first_keys: list[bytes]
    last_keys: list[bytes]


def encode_index(
    block_offs: list[int], entry_counts: list[int], first_keys: list[bytes], last_keys: list[bytes]
) -> bytes:
    keys = [k for pair in zip(first_keys, last_keys, strict=True) for k in pair]
    key_offs = np.zeros(len(keys) + 1, dtype=np.uint32)
    np.cumsum([len(k) for k in keys], out=key_offs[1:])
    body = b"".join(
        [
            INDEX_HEADER.pack(len(entry_counts), 0),
            np.asarray(block_offs, dtype="<u8").tobytes(),
            np.asarray(entry_counts, dtype="<u4").tobytes(),
            key_offs.astype("<u4").tobytes(),
            *keys,
        ]
    )
    return body + U32.pack(crc32(body))


def decode_index(name: str, buf: bytes | memoryview, tail: Tail) -> Index:
    """Parse the index and check it against the footer: block ranges tile [0, index_offset)."""
    size = len(buf)
    if size != tail.index_len:
        raise CorruptionError(name, "index length does not match the footer")
    if crc32(buf[: size - 4]) != U32.unpack_from(buf, size - 4)[0]:
        raise CorruptionError(name, "index checksum mismatch")
    count, reserved = INDEX_HEADER.unpack_from(buf, 0)
    if reserved != 0 or count != tail.block_count:
        raise CorruptionError(name, "index header does not match the footer")
    pos = INDEX_HEADER.size
    fixed = 8 * (count + 1) + 4 * count + 4 * (2 * count + 1)
    if pos + fixed + 4 > size:
        raise CorruptionError(name, f"index of {size} bytes is too short for {count} blocks")
    offs = np.frombuffer(buf, dtype="<u8", count=count + 1, offset=pos).astype(np.uint64)
    pos += 8 * (count + 1)
    counts = np.frombuffer(buf, dtype="<u4", count=count, offset=pos).astype(np.uint32)
    pos += 4 * count
    key_offs = np.frombuffer(buf, dtype="<u4", count=2 * count + 1, offset=pos).astype(np.int64)
    pos += 4 * (2 * count + 1)
    if key_offs[0] != 0 or np.any(np.diff(key_offs) <= 0) or pos + int(key_offs[-1]) + 4 != size:
        raise CorruptionError(name, "index key offsets are inconsistent")
    if offs[0] != 0 or int(offs[-1]) != tail.index_offset:
        raise CorruptionError(name, "index block offsets do not cover the data region")
    signed = offs.astype(np.int64)
    lens = signed[1:] - signed[:-1]
    if np.any(lens < BLOCK_TRAILER_LEN + 8) or np.any(np.bitwise_and(lens, 7)) or np.any(counts == 0):
        raise CorruptionError(name, "index has an impossible block length or entry count")
    if int(counts.sum(dtype=np.uint64)) != tail.entry_count:
        raise CorruptionError(name, "index entry counts do not sum to the footer's entry count")
    blob = bytes(buf[pos : size - 4])
    ko = key_offs.tolist()
    keys = [blob[ko[i] : ko[i + 1]] for i in range(2 * count)]
    first, last = keys[0::2], keys[1::2]
    for i in range(count):
        if first[i] > last[i] or (i and last[i - 1] >= first[i]):
            raise CorruptionError(name, f"index keys of block {i} are out of order")
    return Index(offs, counts, first, last)
