"""The byte envelope around every sequenced metadata object (manifests, compactions).

Layout (little-endian)::

    magic        4 bytes   identifies the object kind, e.g. b"SDBM" for manifests
    version      u16       format version of the payload (1 = ManifestV1, 2 = ManifestV2, ...)
    flags        u16       reserved, must be 0
    nonce        16 bytes  random per write: makes every write's bytes unique, so a writer whose
                           create-if-absent came back ambiguous can recognise its own object
    payload_len  u32
    payload      payload_len bytes
    crc32        u32       zlib CRC-32 of every byte before it

A flipped or truncated byte anywhere fails the length or checksum test and raises ``CorruptionError``
naming the object.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from slatedb_core.checksum import crc32
from slatedb_core.errors import CorruptionError

_HEADER = struct.Struct("<4sHH16sI")
_CRC = struct.Struct("<I")
HEADER_SIZE = _HEADER.size
OVERHEAD = _HEADER.size + _CRC.size


@dataclass(frozen=True, slots=True)
class Opened:
    version: int
    nonce: bytes
    payload: bytes


def seal(magic: bytes, version: int, payload: bytes, nonce: bytes | None = None) -> bytes:
    if len(magic) != 4:
        raise ValueError("magic must be 4 bytes")
    body = _HEADER.pack(magic, version, 0, nonce or os.urandom(16), len(payload)) + payload
    return body + _CRC.pack(crc32(body))


def open_sealed(data: bytes, *, magic: bytes, name: str, versions: frozenset[int]) -> Opened:
    """Validate and unwrap ``data``; ``name`` is used in error messages (usually the object path)."""
    if len(data) < OVERHEAD:
        raise CorruptionError(name, f"truncated: {len(data)} bytes is shorter than the header")
    got_magic, version, flags, nonce, payload_len = _HEADER.unpack_from(data, 0)
    if got_magic != magic:
        raise CorruptionError(name, f"bad magic {got_magic!r}, expected {magic!r}")
    if HEADER_SIZE + payload_len + _CRC.size != len(data):
        raise CorruptionError(
            name,
            f"length mismatch: header says {payload_len} payload bytes, object has "
            f"{len(data) - OVERHEAD}",
        )
    (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
    if crc32(memoryview(data)[: len(data) - _CRC.size]) != crc:
        raise CorruptionError(name, "checksum mismatch")
    if flags != 0:
        raise CorruptionError(name, f"unknown flags {flags:#x}")
    if version not in versions:
        raise CorruptionError(name, f"unsupported format version {version}")
    return Opened(version, nonce, bytes(data[HEADER_SIZE : HEADER_SIZE + payload_len]))
