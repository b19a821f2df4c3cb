"""The byte envelope around this engine's own metadata objects (a table's shard maps and named
snapshots, a clone's origin record). Manifests and ``.compactions`` records are not in it: they
are SlateDB 0.17's objects and carry their nonces and checksums in fields of their own
(docs/format.md).

Layout (little-endian)::

    magic        4 bytes   identifies the object kind, e.g. b"SDBT" for shard maps
    version      u16       format version of the payload
    flags        u16       bit 0 = a parent nonce follows the header; other bits must be 0
    nonce        16 bytes  random per write: makes every write's bytes unique, so a writer whose
                           create-if-absent came back ambiguous can recognise its own object
    payload_len  u32
    parent       16 bytes  only with flag bit 0: the nonce of the object this one was built on
                           (the previous version), so a committer whose id GC has already passed
                           can tell whether later history was built on its object (see
                           ``docs/manifest-and-fencing.md``, "Commits behind the boundary")
    payload      payload_len bytes
    crc32        u32       zlib CRC-32 of every byte before it

A flipped or truncated byte anywhere fails the length or checksum test and raises ``CorruptionError``
naming the object.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from slatedb_core.errors import CorruptionError
from slatedb_core.store.checksum import crc32

_HEADER = struct.Struct("<4sHH16sI")
_CRC = struct.Struct("<I")
HEADER_SIZE = _HEADER.size
OVERHEAD = _HEADER.size + _CRC.size
NONCE_SIZE = 16
FLAG_PARENT = 0x1


@dataclass(frozen=True, slots=True)
class Opened:
    version: int
    nonce: bytes
    payload: bytes
    parent: bytes | None = None
    """The nonce of the object this one was built on, if the writer recorded it."""


def new_nonce() -> bytes:
    return os.urandom(NONCE_SIZE)


def seal(
    magic: bytes,
    version: int,
    payload: bytes,
    nonce: bytes | None = None,
    *,
    parent: bytes | None = None,
) -> bytes:
    if len(magic) != 4:
        raise ValueError("magic must be 4 bytes")
    if parent is not None and len(parent) != NONCE_SIZE:
        raise ValueError(f"a parent nonce is {NONCE_SIZE} bytes")
    flags = 0 if parent is None else FLAG_PARENT
    head = _HEADER.pack(magic, version, flags, nonce or new_nonce(), len(payload))
    body = head + (parent or b"") + payload
    return body + _CRC.pack(crc32(body))


def open_sealed(data: bytes, *, magic: bytes, name: str, versions: frozenset[int]) -> Opened:
    """Validate and unwrap ``data``; ``name`` is used in error messages (usually the object path)."""
    if len(data) < OVERHEAD:
        raise CorruptionError(name, f"truncated: {len(data)} bytes is shorter than the header")
    got_magic, version, flags, nonce, payload_len = _HEADER.unpack_from(data, 0)
    if got_magic != magic:
        raise CorruptionError(name, f"bad magic {got_magic!r}, expected {magic!r}")
    extra = NONCE_SIZE if flags & FLAG_PARENT else 0
    if HEADER_SIZE + extra + payload_len + _CRC.size != len(data):
        raise CorruptionError(
            name,
            f"length mismatch: header says {payload_len} payload bytes, object has "
            f"{len(data) - OVERHEAD - extra}",
        )
    (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
    if crc32(memoryview(data)[: len(data) - _CRC.size]) != crc:
        raise CorruptionError(name, "checksum mismatch")
    if flags & ~FLAG_PARENT:
        raise CorruptionError(name, f"unknown flags {flags:#x}")
    if version not in versions:
        raise CorruptionError(name, f"unsupported format version {version}")
    start = HEADER_SIZE + extra
    parent = bytes(data[HEADER_SIZE:start]) if extra else None
    return Opened(version, nonce, bytes(data[start : start + payload_len]), parent)
