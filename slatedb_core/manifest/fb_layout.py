"""The FlatBuffers layout of manifest.fbs as the hand-written codec sees it: field kinds per table,
and the id helpers both directions share (see :mod:`slatedb_core.manifest.codec`)."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from ulid import ULID

from slatedb_core.manifest.model import MAX_PARALLEL_WRITES

if TYPE_CHECKING:
    from slatedb_core.manifest.fb_writer import _WriteLayout

MANIFEST_MAGIC = b"SDBM"
SUPPORTED_VERSIONS = frozenset({1, 2})
DEFAULT_FORMAT_VERSION = 2

# FlatBuffers file identifiers: a cheap check that the payload holds the root the header promised.
_IDENT = {1: b"SDM1", 2: b"SDM2"}
_WRITER_CHECKPOINT = 1  # CheckpointMetadata union tag (0 = NONE)

# Field kinds: B u8/bool, I u32, Q u64 (absent = 0), q optional u64 (absent = None), O offset to a
# table/vector/string, D a 16-byte struct (Ulid / Uuid: two little-endian u64 halves, high first).
_WIDTH = {"B": 1, "I": 4, "Q": 8, "q": 8, "O": 4, "D": 16}
_ALIGN = {"B": 1, "I": 4, "Q": 8, "q": 8, "O": 4, "D": 8}
_FMT = {"B": "B", "I": "I", "Q": "Q", "q": "Q", "O": "I", "D": "16s"}
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_VT_HEAD = struct.Struct("<HH")
_NONES = (None,) * 32


class _Table:
    """One table of manifest.fbs: field kinds in declaration (= vtable slot) order."""

    def __init__(self, name: str, kinds: str) -> None:
        self.name = name
        self.kinds = kinds
        self.absent = tuple(0 if k in "BIQ" else None for k in kinds)
        self.layouts: dict[tuple[bool, ...], _WriteLayout] = {}


# One entry per table of schema/manifest.fbs, fields in declaration order: keep in step with it.
_BOUND = _Table("BytesBound", "BO")
_RANGE = _Table("BytesRange", "OO")
_INFO = _Table("SsTableInfo", "OOQQQQIQQ")
_SST = _Table("CompactedSsTable", "DOID")
_VIEW = _Table("CompactedSsTableView", "DDO")
_RUN2 = _Table("SortedRunV2", "IO")
_EXT = _Table("ExternalDb", "ODDO")
_WCP = _Table("WriterCheckpoint", "Q")
_CP = _Table("Checkpoint", "DQqQBOO")
_M2 = _Table("ManifestV2", "OBqQQQQQOOOOQDDIO")
_RUN1 = _Table("SortedRunV1", "IO")
_M1 = _Table("ManifestV1", "OBqQQQQQDOOOQI")


class _Malformed(Exception):
    """Raised inside the reader; ``decode_manifest`` turns it into CorruptionError."""


def _swap(raw: bytes) -> bytes:
    """Big-endian 16-byte id <-> the schema's (high, low) pair of little-endian u64s (an involution)."""
    return raw[7::-1] + raw[15:7:-1]


def _ulid(raw: bytes) -> ULID:
    return ULID(raw[7::-1] + raw[15:7:-1])


def _uuid(raw: bytes) -> uuid.UUID:
    return uuid.UUID(bytes=_swap(raw))


def _picker(indices: Sequence[int]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """An itemgetter that always returns a tuple, whatever the number of indices."""
    if len(indices) == 1:
        only = indices[0]
        return lambda seq: (seq[only],)
    if not indices:
        return lambda seq: ()
    return itemgetter(*indices)


def _parallel_writes(stored: int) -> int:
    """0 is the schema default (what an absent field reads as, and what a writer that predates
    parallel WAL writes stores): one write in flight."""
    if stored == 0:
        return 1
    if stored > MAX_PARALLEL_WRITES:
        raise _Malformed(f"max_parallel_writes {stored} exceeds {MAX_PARALLEL_WRITES}")
    return stored
