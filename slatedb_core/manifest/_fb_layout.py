"""The FlatBuffers layout of manifest.fbs as the hand-written codec sees it: field kinds per table,
and the id helpers both directions share (see :mod:`slatedb_core.manifest.codec`)."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

from ulid import ULID

from slatedb_core.manifest.model import MAX_PARALLEL_WRITES

MANIFEST_MAGIC = b"SDBM"
SUPPORTED_VERSIONS = frozenset({1, 2})
DEFAULT_FORMAT_VERSION = 2

# FlatBuffers file identifiers: a cheap check that the payload holds the root the header promised.
IDENT = {1: b"SDM1", 2: b"SDM2"}
WRITER_CHECKPOINT = 1  # CheckpointMetadata union tag (0 = NONE)

# Field kinds: B u8/bool, I u32, Q u64 (absent = 0), q optional u64 (absent = None), O offset to a
# table/vector/string, D a 16-byte struct (Ulid / Uuid: two little-endian u64 halves, high first).
WIDTH = {"B": 1, "I": 4, "Q": 8, "q": 8, "O": 4, "D": 16}
ALIGN = {"B": 1, "I": 4, "Q": 8, "q": 8, "O": 4, "D": 8}
FMT = {"B": "B", "I": "I", "Q": "Q", "q": "Q", "O": "I", "D": "16s"}
U32 = struct.Struct("<I")
I32 = struct.Struct("<i")
VT_HEAD = struct.Struct("<HH")
NONES = (None,) * 32


class FbTable:
    """One table of manifest.fbs: field kinds in declaration (= vtable slot) order."""

    def __init__(self, name: str, kinds: str) -> None:
        self.name = name
        self.kinds = kinds
        self.absent = tuple(0 if k in "BIQ" else None for k in kinds)
        # the writer's encoding plans, one per set of present fields (``_fb_writer.WriteLayout``)
        self.layouts: dict[tuple[bool, ...], Any] = {}


# One entry per table of schema/manifest.fbs, fields in declaration order: keep in step with it.
BOUND = FbTable("BytesBound", "BO")
RANGE = FbTable("BytesRange", "OO")
INFO = FbTable("SsTableInfo", "OOQQQQIQQ")
SST = FbTable("CompactedSsTable", "DOID")
VIEW = FbTable("CompactedSsTableView", "DDO")
RUN2 = FbTable("SortedRunV2", "IO")
EXT = FbTable("ExternalDb", "ODDO")
WCP = FbTable("WriterCheckpoint", "Q")
CP = FbTable("Checkpoint", "DQqQBOO")
M2 = FbTable("ManifestV2", "OBqQQQQQOOOOQDDIO")
RUN1 = FbTable("SortedRunV1", "IO")
M1 = FbTable("ManifestV1", "OBqQQQQQDOOOQI")


class Malformed(Exception):
    """Raised inside the reader; ``decode_manifest`` turns it into CorruptionError."""


def swap_halves(raw: bytes) -> bytes:
    """Big-endian 16-byte id <-> the schema's (high, low) pair of little-endian u64s (an involution)."""
    return raw[7::-1] + raw[15:7:-1]


def ulid_of(raw: bytes) -> ULID:
    return ULID(raw[7::-1] + raw[15:7:-1])


def uuid_of(raw: bytes) -> uuid.UUID:
    return uuid.UUID(bytes=swap_halves(raw))


def picker(indices: Sequence[int]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """An itemgetter that always returns a tuple, whatever the number of indices."""
    if len(indices) == 1:
        only = indices[0]
        return lambda seq: (seq[only],)
    if not indices:
        return lambda seq: ()
    return itemgetter(*indices)


def parallel_writes_of(stored: int) -> int:
    """0 is the schema default (what an absent field reads as, and what a writer that predates
    parallel WAL writes stores): one write in flight."""
    if stored == 0:
        return 1
    if stored > MAX_PARALLEL_WRITES:
        raise Malformed(f"max_parallel_writes {stored} exceeds {MAX_PARALLEL_WRITES}")
    return stored
