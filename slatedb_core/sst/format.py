"""SlateDB 0.17's SST object: the fixed pieces shared by the writer and the reader.

The layout (docs/format.md, "SSTs and WAL SSTs"; SlateDB 0.17's ``schemas/sst.fbs``), checked
against the bytes the slatedb 0.17 wheel writes. Every integer of the framing is big-endian::

    [data block 0] ... [data block B-1] [filter] [index] [stats] [info] [u64 info_offset]
                                                                        [u16 format_version]

* A **section** (each data block, the filter, the index, the stats) is its bytes, compressed
  with the SST's codec unless "none", then ``u32 crc32`` of the stored (compressed) bytes. The
  CRC is zlib's (IEEE) polynomial, as SlateDB's ``crc32fast``.
* **Data block** (before compression; :mod:`slatedb_core.sst.rows` encodes the rows)::

      rows ... | u16 restart_offset[r] | u16 r

  Rows use SlateDB's row codec v2 with prefix compression against the previous key; every 16th
  row of a block is a restart point (its full key, its offset listed in the trailer).
* **Filter** (absent when ``filter_len`` is 0): a composite filter block (``filter_format`` 1),
  see :mod:`slatedb_core.sst.bloom`.
* **Index**: the ``SsTableIndex`` FlatBuffers table (``BlockMeta`` offset + first_key per block),
  see :mod:`slatedb_core.sst.index`. A WAL SST's index keys are each block's first seq (u64 BE).
* **Stats**: the ``SstStats`` FlatBuffers table (absent in WAL SSTs).
* **Info**: the ``SsTableInfo`` FlatBuffers table (:mod:`slatedb_core.manifest.sst_info`)
  followed by its ``u32 crc32``; ``info_offset`` points at it.
* The last 10 bytes: ``u64 info_offset`` and ``u16 format_version`` (2: block format v2).

Codecs (``SstInfo.compression``, SlateDB's ``CompressionFormat``): 0 none, 1 snappy (raw
snappy), 2 zlib (a zlib stream, level 6), 3 lz4 (an LZ4 block preceded by its decompressed size
as u32 little-endian), 4 zstd (a zstd frame, level 3).
"""

from __future__ import annotations

import struct
from typing import Any

import cramjam  # type: ignore[import-untyped, unused-ignore]
import numpy as np
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

from slatedb_core.errors import CorruptionError
from slatedb_core.options import MAX_KEY_BYTES, MAX_VALUE_BYTES
from slatedb_core.store.checksum import crc32

ENTRY_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary(), nullable=False),
        pa.field("seq", pa.uint64()),
        pa.field("kind", pa.uint8()),
        pa.field("value", pa.binary()),
    ]
)
ROW_SCHEMA = ENTRY_SCHEMA.append(pa.field("expire_ts", pa.int64())).append(
    pa.field("create_ts", pa.int64())
)
"""ENTRY_SCHEMA plus SlateDB's per-row timestamps (int64 ms, null where absent): see
:mod:`slatedb_core.lsm.row_model`."""
KIND_VALUE = 0
KIND_TOMBSTONE = 1
KIND_MERGE = 2
"""A SlateDB merge operand (RowFlags MERGE_OPERAND); reads fold it (SlateDB RFC 0006,
:mod:`slatedb_core.lsm.merge_operator`)."""

FORMAT_VERSION = 2
"""SlateDB's SST format version 2 (block format v2, row codec v2): what 0.17 writes."""
SST_TYPE_COMPACTED = 0
SST_TYPE_WAL = 1
FILTER_FORMAT_COMPOSITE = 1

FOOTER = struct.Struct(">QH")
FOOTER_LEN = FOOTER.size  # 10
U32 = struct.Struct(">I")
CRC_LEN = 4
RESTART_INTERVAL = 16
MAX_BLOCK_SIZE = 65536
"""Restart offsets are u16, so a block's rows must end before 64 KiB (SlateDB's block format)."""

# name -> SlateDB CompressionFormat code
CODECS: dict[str, tuple[int, str | None]] = {
    "none": (0, None),
    "snappy": (1, "snappy"),
    "zlib": (2, "zlib"),
    "lz4": (3, "lz4"),
    "zstd": (4, "zstd"),
}
CODEC_NAMES: dict[int, str] = {code: name for name, (code, _) in CODECS.items()}


def compress(code: int, data: bytes | memoryview) -> bytes:
    """``data`` compressed as SlateDB 0.17 stores it for codec ``code`` (not 0)."""
    if code == 1:
        return bytes(cramjam.snappy.compress_raw(data))
    if code == 2:
        return bytes(cramjam.zlib.compress(data, level=6))
    if code == 3:
        return bytes(cramjam.lz4.compress_block(data, store_size=True))
    if code == 4:
        return bytes(cramjam.zstd.compress(data, level=3))
    raise ValueError(f"no compressor for codec {code}")


DEFLATE_MAX_RATIO = 1032
"""Deflate cannot expand input more than this (a 258-byte match per 2 bits at best), so a zlib
section of ``n`` bytes decompresses to at most ``1032 * n`` (RFC 1951)."""
SNAPPY_MAX_RATIO = 32
"""Snappy's densest element copies 64 bytes in 3, so raw snappy expands at most ~21x."""
LZ4_MAX_RATIO = 256
"""An LZ4 block's densest sequence adds 255 bytes of match length per input byte."""
_ZSTD_MAGIC = 0xFD2FB528
_FCS_WIDTH = (0, 2, 4, 8)  # Frame_Content_Size field width by FCS_Field_Size flag (RFC 8878)
_DICT_WIDTH = (0, 1, 2, 4)


def zstd_content_size(data: bytes | memoryview) -> int | None:
    """The Frame_Content_Size a zstd frame's header declares (RFC 8878, 3.1.1.1), None if the
    header leaves it out; ``ValueError`` if ``data`` does not start with a zstd frame header."""
    if len(data) < 6 or int.from_bytes(data[:4], "little") != _ZSTD_MAGIC:
        raise ValueError("not a zstd frame")
    fhd = data[4]
    single = (fhd >> 5) & 1
    width = _FCS_WIDTH[fhd >> 6] or single  # flag 0: one byte if single-segment, else none
    if not width:
        return None
    at = 5 + (0 if single else 1) + _DICT_WIDTH[fhd & 3]
    if len(data) < at + width:
        raise ValueError("zstd frame header is truncated")
    size = int.from_bytes(data[at : at + width], "little")
    return size + 256 if width == 2 else size


def decompress(
    code: int, data: bytes | memoryview, name: str, what: str, limit: int
) -> bytes | memoryview:
    """The inverse of :func:`compress`, refusing (``CorruptionError`` naming ``name``) any
    section that would decompress to more than ``limit`` bytes before allocating them: the size
    snappy and lz4 declare up front (also held to their codec's densest expansion of the input)
    and zstd's frame content size are checked against it; zstd without one decompresses into
    at most ``limit + 1`` bytes, zlib into at most that or :data:`DEFLATE_MAX_RATIO` times its
    input. The one place every SST section is decompressed (limits: :func:`section_limit`,
    :data:`MAX_BLOCK_BYTES`)."""
    try:
        if code == 4:
            size = zstd_content_size(data)
            if size is None:
                return _capped(cramjam.zstd, data, limit, name, what)
            # not zeroed: a header that lies costs address space, not memory
            out = np.empty(_within(size, limit, name, what), np.uint8).data
            if cramjam.zstd.decompress_into(data, out) != size:
                raise CorruptionError(name, f"{what} is shorter than its declared size")
            return out
        if code == 1:
            size = cramjam.snappy.decompress_raw_len(data)
            cap = min(limit, SNAPPY_MAX_RATIO * len(data))
            out = np.empty(_within(size, cap, name, what), np.uint8).data
            if cramjam.snappy.decompress_raw_into(data, out) != size:
                raise CorruptionError(name, f"{what} is shorter than its declared size")
            return out
        if code == 3:
            if len(data) < 4:
                raise CorruptionError(name, f"{what} of {len(data)} bytes is too short")
            size = int.from_bytes(data[:4], "little")
            _within(size, min(limit, LZ4_MAX_RATIO * len(data)), name, what)
            return memoryview(cramjam.lz4.decompress_block(data))
        if code == 2:
            return _capped(
                cramjam.zlib, data, min(limit, DEFLATE_MAX_RATIO * len(data)), name, what
            )
    except CorruptionError:
        raise
    except Exception as e:  # cramjam raises its own DecompressionError (and ValueError)
        raise CorruptionError(name, f"{what} does not decompress: {e}") from None
    raise CorruptionError(name, f"unknown compression codec {code}")


def _capped(codec: Any, data: bytes | memoryview, limit: int, name: str, what: str) -> memoryview:
    """``data`` decompressed into a buffer of ``limit + 1`` bytes (not zeroed, so its pages are
    only touched as far as the output reaches); a stream that fills it, or would overflow it,
    is refused. A usual block fits a small buffer first, sparing the large one's mapping."""
    for size in (min(limit + 1, _FIRST_TRY), limit + 1):
        out = np.empty(size, np.uint8)
        try:
            n = codec.decompress_into(data, out)
        except Exception:  # the output did not fit (or the stream is damaged)
            if size > limit:
                raise
            continue
        if n < size:
            return memoryview(out.data)[:n]
        if size > limit:
            break
    raise CorruptionError(name, f"{what} decompresses to more than {limit} bytes")


_FIRST_TRY = 2 * MAX_BLOCK_SIZE


def _within(size: int, limit: int, name: str, what: str) -> int:
    if size > limit:
        raise CorruptionError(name, f"{what} declares {size} bytes, more than its {limit}")
    return size


MAX_BLOCK_BYTES = MAX_BLOCK_SIZE + MAX_KEY_BYTES + MAX_VALUE_BYTES + 64
"""The most a data block can hold decompressed: rows are added while the block stays within
``block_size`` (at most :data:`MAX_BLOCK_SIZE`), except a block's first row, which may be one
key and value of the largest sizes this engine accepts (options.MAX_KEY_BYTES, MAX_VALUE_BYTES)
plus its row header (at most 33 bytes in row codec v2) and the block's trailer."""
SECTION_RATIO = 64
"""An index, filter or stats section may decompress to :data:`MAX_BLOCK_BYTES` or this many
times its stored size, whichever is more (filters hardly compress; index keys a little)."""


def section_limit(stored: int) -> int:
    """The most an index, filter or stats section of ``stored`` bytes may decompress to."""
    return max(MAX_BLOCK_BYTES, SECTION_RATIO * stored)


def seal(code: int, data: bytes | memoryview) -> list[bytes | memoryview]:
    """A section as stored: ``data`` (compressed unless ``code`` is 0) and its CRC."""
    body: bytes | memoryview = compress(code, data) if code else data
    return [body, U32.pack(crc32(body))]


def unseal(code: int, buf: bytes | memoryview, name: str, what: str) -> bytes | memoryview:
    """A stored section's bytes after checking its CRC (and decompressing)."""
    if len(buf) < CRC_LEN:
        raise CorruptionError(name, f"{what} of {len(buf)} bytes is too short")
    body = memoryview(buf)[: len(buf) - CRC_LEN]
    if crc32(body) != U32.unpack_from(buf, len(buf) - CRC_LEN)[0]:
        raise CorruptionError(name, f"{what} checksum mismatch")
    return decompress(code, body, name, what, section_limit(len(body))) if code else body


def encode_footer(info_bytes: bytes, info_offset: int) -> bytes:
    """The SsTableInfo, its CRC, the info offset and the format version."""
    return info_bytes + U32.pack(crc32(info_bytes)) + FOOTER.pack(info_offset, FORMAT_VERSION)


def decode_footer(name: str, tail: bytes | memoryview, object_size: int) -> tuple[int, int]:
    """``(info_offset, format_version)`` from the last 10 bytes, checked against the object."""
    if object_size <= FOOTER_LEN or len(tail) < FOOTER_LEN:
        raise CorruptionError(name, f"object of {object_size} bytes is too short for an SST")
    info_offset, version = FOOTER.unpack_from(tail, len(tail) - FOOTER_LEN)
    if version != FORMAT_VERSION:
        raise CorruptionError(name, f"unsupported SST format version {version}")
    if not 0 <= info_offset <= object_size - FOOTER_LEN - CRC_LEN - 4:
        raise CorruptionError(name, f"SST info offset {info_offset} is outside the object")
    return info_offset, version
