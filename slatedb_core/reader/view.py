"""Errors, statistics and small helpers of :mod:`slatedb_core.reader.reader` and
:mod:`slatedb_core.reader.refresh`."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from slatedb_core.errors import (
    DatabaseDestroyed,
    DatabaseNotInitialized,
    InvalidArgument,
)
from slatedb_core.lsm.dbstate import DbState
from slatedb_core.manifest.model import Checkpoint, Manifest
from slatedb_core.options import ReaderMode


class _CheckpointLost(Exception):
    """Our checkpoint is no longer in the latest manifest (expired and collected, or deleted)."""


@dataclass(frozen=True, slots=True)
class ReaderStats:
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
class _Pin:
    """One checkpoint this reader created, with the open scans that still read its state."""

    def __init__(self, checkpoint_id: uuid.UUID, expire_time_s: int | None) -> None:
        self.id = checkpoint_id
        self.expire_time_s = expire_time_s
        self.scans: set[int] = set()  # set.add/discard are atomic: scans release without a lock


@dataclass(frozen=True, slots=True)
class _View:
    """What a DbReader serves, published as one reference under the refresh lock: a read takes
    one view at its start and reads only from it. Nothing reachable from it changes (the
    memtable is an empty frozen one; WAL tables are immutable), except ``pin``'s scan set."""

    state: DbState
    pin: _Pin | None
    last_wal_id: int  # every WAL SST <= this is in ``state`` (replayed, or in its SSTs)


def _check_live(path: str, m: Manifest) -> None:
    if m.destroyed_at_s is not None:
        raise DatabaseDestroyed(f"database {path!r} was destroyed at {m.destroyed_at_s}")
    if not m.initialized:
        raise DatabaseNotInitialized(f"database {path!r} is not initialized")


def _sst_set(m: Manifest) -> tuple[object, ...]:
    """What decides whether a state must be rebuilt (seed 003: the set of L0 SSTs and runs)."""
    return (m.l0, m.compacted, m.replay_after_wal_id)


def _as_key(key: object) -> bytes:
    if type(key) is not bytes:
        if not isinstance(key, bytes | bytearray | memoryview):
            raise InvalidArgument(f"keys must be bytes, got {type(key).__name__}")
        key = bytes(key)
    assert isinstance(key, bytes)
    if not key:
        raise InvalidArgument("keys are non-empty")
    return key


# ---- the reader's checkpoint changes (for ManifestStore.update_at) ------------------------------
def pin_change(
    path: str,
    new_id: uuid.UUID,
    now_s: int,
    expire_s: int | None,
    drop: set[uuid.UUID],
    last_seen: int,
) -> Callable[[Manifest, int], Manifest | None]:
    """A new checkpoint pinning the manifest being written, ``wal_id_last_seen`` recorded in the
    same update, and the reader's older checkpoints in ``drop`` deleted. Re-applied on a manifest
    that already holds ``new_id`` (an earlier attempt that landed) it changes nothing."""

    def change(m: Manifest, next_id: int) -> Manifest | None:
        if m.checkpoint(new_id) is not None:
            return None
        _check_live(path, m)
        cp = Checkpoint(id=new_id, manifest_id=next_id, create_time_s=now_s, expire_time_s=expire_s)
        return dataclasses.replace(
            m,
            checkpoints=(*(c for c in m.checkpoints if c.id not in drop), cp),
            wal_id_last_seen=max(last_seen, m.replay_after_wal_id),
        )

    return change


def refresh_change(
    ours: uuid.UUID, done: set[uuid.UUID], stale: set[uuid.UUID], expire_s: int | None
) -> Callable[[Manifest, int], Manifest]:
    """Extend the ``stale`` checkpoints to ``expire_s`` and delete the retired ``done`` ones;
    raises _CheckpointLost if our current checkpoint is gone (GC expired it)."""

    def change(m: Manifest, _next_id: int) -> Manifest:
        if m.checkpoint(ours) is None:
            raise _CheckpointLost()
        cps = []
        for c in m.checkpoints:
            if c.id in done:
                continue
            if c.id in stale and c.expire_time_s is not None and expire_s is not None:
                c = dataclasses.replace(c, expire_time_s=max(c.expire_time_s, expire_s))
            cps.append(c)
        return dataclasses.replace(m, checkpoints=tuple(cps))

    return change


def drop_change(doomed: set[uuid.UUID]) -> Callable[[Manifest, int], Manifest | None]:
    """Delete the checkpoints in ``doomed``; nothing is committed if none is there."""

    def change(m: Manifest, _next_id: int) -> Manifest | None:
        kept = tuple(c for c in m.checkpoints if c.id not in doomed)
        if len(kept) == len(m.checkpoints):
            return None
        return dataclasses.replace(m, checkpoints=kept)

    return change
