"""What a fleet scan reports of one database (:class:`DatabaseStatus`), and what the scanner
keeps of it for the next scan. See :mod:`slatedb_core.fleet`."""

from __future__ import annotations

import dataclasses

from slatedb_core.errors import (
    BoundaryMissing,
    CorruptionError,
    SlateDBError,
    SstMissing,
    StoreError,
)
from slatedb_core.health import BOUNDARY_NAMESPACES, DatabaseHealth, database_health
from slatedb_core.layout import BOUNDARY_SUFFIX, GC_DIR, MANIFEST_BOUNDARY, join
from slatedb_core.manifest.model import Checkpoint
from slatedb_core.manifest.store import StoredManifest
from slatedb_core.meta.boundary import TOMBSTONE

__all__ = ["STATES", "Boundary", "DatabaseStatus", "Identity", "Latest", "Seen", "status_of"]

STATES = ("live", "destroyed", "uninitialized", "missing", "damaged", "unreachable")
"""Every :attr:`DatabaseStatus.state`."""

Identity = tuple[str | None, int, float]
"""What a listing says of one object: e-tag, size, last-modified (seconds)."""


@dataclasses.dataclass(frozen=True, slots=True)
class DatabaseStatus:
    """One database as one scan saw it."""

    path: str
    state: str
    """One of :data:`STATES`."""
    health: DatabaseHealth | None
    """The latest manifest's figures; None when there is no readable manifest (missing, a
    manifest that does not decode, unreachable, or destroyed and already collected). A database
    damaged elsewhere (a boundary file, a missing SST) keeps the figures of its manifest."""
    checkpoints: tuple[Checkpoint, ...]
    """Of the latest manifest (empty without one)."""
    pinned_by: Checkpoint | None
    """The unexpired non-writer checkpoint pinning the oldest manifest (what makes
    ``health.manifest_lag``); None when nothing pins."""
    l0_sst_ids: tuple[str, ...]
    """The L0 SSTs' ids (the ULID's text), in manifest order (newest first)."""
    boundaries: dict[str, int | None]
    """Like :func:`slatedb_core.health.read_boundaries`; None where the file does not exist or
    does not decode (then ``error`` names it)."""
    error_kind: str | None
    """The error's class name (``CorruptionError``, ``SstMissing``, ``BoundaryMissing``,
    ``StoreError``...); None when the database is readable and whole."""
    error: str | None
    missing_ssts: tuple[str, ...] | None
    """Only for paths passed in ``verify``: the SST paths (and ``<db>#<sst id>`` views naming
    an unlisted SST) the latest manifest references that are absent. None: not verified."""
    changed: bool
    """The state, the manifest id, a boundary or the error kind differs from this scanner's
    previous scan of the path (True on its first scan of the path)."""
    manifest_id: int | None = None
    """The latest manifest's id (None without a readable one)."""
    scanned_at_s: float = 0.0
    requests: int = 0
    """Store requests this database's scan made."""
    last_compacted_ms: int | None = None
    """ULID time (ms) of the newest SST in a sorted run, i.e. when a compaction last wrote
    output; None without a sorted run (exported by :mod:`slatedb_core.fleet.metrics`)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Boundary:
    identity: Identity
    value: int | None
    error: CorruptionError | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Latest:
    """The latest manifest as listed, and what it decoded to."""

    id: int
    identity: Identity
    stored: StoredManifest | None
    error: SlateDBError | None = None


@dataclasses.dataclass(slots=True)
class Seen:
    """What one scan learnt of one database, for the next scan."""

    latest: Latest | None
    boundaries: dict[str, Boundary] = dataclasses.field(default_factory=dict)
    missing_at: tuple[Identity, tuple[str, ...]] | None = None
    """The last verification's missing SSTs and the manifest identity it checked."""
    status: DatabaseStatus | None = None


def status_of(
    path: str,
    seen: Seen,
    vanished: list[str],
    now_s: float,
    prev: Seen | None,
    requests: int,
    unreachable: StoreError | None,
    missing: tuple[str, ...] | None = None,
) -> DatabaseStatus:
    latest = seen.latest
    stored = latest.stored if latest is not None else None
    manifest = stored.manifest if stored is not None else None
    # a boundary at 0 covers nothing: shown as no boundary (a writer creates gc/wal.boundary at
    # 0 to record its lease, docs/gc-and-boundaries.md "The boundary lease")
    values = {
        ns: b.value or None if (b := seen.boundaries.get(ns)) else None
        for ns in BOUNDARY_NAMESPACES
    }
    err: SlateDBError | None = None
    if unreachable is not None:
        state, err = "unreachable", unreachable
    elif values[MANIFEST_BOUNDARY] == TOMBSTONE:
        state = "destroyed"  # destroyed and collected: only the tombstone is left
    elif latest is None:
        state = "missing"
    elif manifest is None:
        state, err = "damaged", latest.error
    elif manifest.destroyed_at_s is not None:
        state = "destroyed"
    else:
        err = damage(path, seen, vanished)
        state = "damaged" if err else "live" if manifest.initialized else "uninitialized"
    pins = [
        c
        for c in (manifest.checkpoints if manifest is not None else ())
        if c.writer_epoch is None and not c.is_expired(now_s)
    ]
    status = DatabaseStatus(
        path=path,
        state=state,
        health=database_health(stored, path, now_s) if stored is not None else None,
        checkpoints=manifest.checkpoints if manifest is not None else (),
        pinned_by=min(pins, key=lambda c: (c.manifest_id, c.create_time_s)) if pins else None,
        l0_sst_ids=tuple(str(v.sst_id) for v in manifest.l0) if manifest is not None else (),
        boundaries=values,
        error_kind=type(err).__name__ if err is not None else None,
        error=str(err) if err is not None else None,
        missing_ssts=missing,
        changed=True,
        manifest_id=stored.id if stored is not None else None,
        scanned_at_s=now_s,
        requests=requests,
        last_compacted_ms=max(
            (v.sst_id.milliseconds for run in manifest.compacted for v in run.views),
            default=None,
        )
        if manifest is not None
        else None,
    )
    before = prev.status if prev is not None else None
    if before is not None:
        key = (status.state, status.manifest_id, status.boundaries, status.error_kind)
        old = (before.state, before.manifest_id, before.boundaries, before.error_kind)
        status = dataclasses.replace(status, changed=key != old)
    return status


def damage(path: str, seen: Seen, vanished: list[str]) -> SlateDBError | None:
    """Damage outside the manifest: a boundary that does not decode, or is gone, or SSTs the
    last verification of this manifest found absent."""
    for ns in BOUNDARY_NAMESPACES:
        if (b := seen.boundaries.get(ns)) is not None and b.error is not None:
            return b.error
    if vanished:
        names = ", ".join(join(path, GC_DIR, ns + BOUNDARY_SUFFIX) for ns in sorted(vanished))
        return BoundaryMissing(f"boundary files {names} existed and are now missing")
    if seen.missing_at is not None and seen.missing_at[1]:
        gone = seen.missing_at[1]
        return SstMissing(gone[0], f"{len(gone)} referenced SSTs absent: {', '.join(gone[:5])}")
    return None
