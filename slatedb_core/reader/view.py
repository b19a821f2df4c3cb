"""Statistics, views, pins and small helpers of :mod:`slatedb_core.reader.reader` and
:mod:`slatedb_core.reader.refresh`."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from slatedb_core.errors import (
    InvalidArgument,
)
from slatedb_core.lsm.dbstate import DbState
from slatedb_core.manifest.model import Manifest
from slatedb_core.options import ReaderMode


@dataclass(frozen=True, slots=True)
class ReaderStats:
    """The state a :class:`DbReader` serves: its mode, manifest, checkpoint, WAL and memtables."""

    mode: ReaderMode
    manifest_id: int
    checkpoint_id: uuid.UUID | None
    last_wal_id: int
    """The highest WAL SST id served (replayed, or covered by the manifest's L0)."""
    memtables: int
    memtable_bytes: int
    l0_views: int
    sorted_runs: int


# ---- checkpoints ---------------------------------------------------------------------------
class Pin:
    """One checkpoint this reader created, with the open scans that still read its state."""

    def __init__(self, checkpoint_id: uuid.UUID, expire_time_s: int | None) -> None:
        self.id = checkpoint_id
        self.expire_time_s = expire_time_s
        self.scans: set[int] = set()  # set.add/discard are atomic: scans release without a lock


@dataclass(frozen=True, slots=True)
class View:
    """What a DbReader serves, published as one reference under the refresh lock: a read takes
    one view at its start and reads only from it. Nothing reachable from it changes (the
    memtable is an empty frozen one; WAL tables are immutable), except ``pin``'s scan set."""

    state: DbState
    pin: Pin | None
    last_wal_id: int  # every WAL SST <= this is in ``state`` (replayed, or in its SSTs)


def sst_set(m: Manifest) -> tuple[object, ...]:
    """What decides whether a state must be rebuilt (SlateDB RFC 0004: the set of L0 SSTs and runs)."""
    return (m.l0, m.compacted, m.replay_after_wal_id)


def as_key(key: object) -> bytes:
    if type(key) is not bytes:
        if not isinstance(key, bytes | bytearray | memoryview):
            raise InvalidArgument(f"keys must be bytes, got {type(key).__name__}")
        key = bytes(key)
    assert isinstance(key, bytes)
    if not key:
        raise InvalidArgument("keys are non-empty")
    return key
