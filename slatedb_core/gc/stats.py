"""What one garbage-collection pass did, so operators (and tests) can tell a pass that had nothing
to do from one that was blocked, and price a pass in object-store requests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from slatedb_core.gc.twophase import TwoPhaseGcStats

Kind = Literal["manifest", "wal", "compacted", "compactions"]
KINDS: tuple[Kind, ...] = ("manifest", "wal", "compacted", "compactions")


@dataclass
class KindStats:
    """One namespace's outcome. ``failed`` deletes are not lost: the objects are still behind the
    boundary and still unreferenced, so the next pass retries them."""

    deleted: int = 0
    bytes_freed: int = 0
    failed: int = 0


@dataclass
class GcStats:
    """What one garbage-collection pass over a database found and deleted, per kind of object."""

    path: str
    latest_manifest_id: int | None = None
    """The manifest whose references decided this pass (None: no database at ``path``)."""
    destroyed: bool = False
    """The database is soft-destroyed; this pass deleted nothing (see ``database_deleted``)."""
    database_deleted: bool = False
    """This pass deleted the soft-destroyed database: its grace period was over and no checkpoint
    was active, so every object under its path is gone (counted in ``database_objects``)."""
    database_objects: KindStats = field(default_factory=KindStats)
    """Objects (of any kind) deleted with a destroyed database; not part of ``deleted``."""
    external_checkpoints_released: int = 0
    """Final checkpoints this database held in the databases it was cloned from that this pass
    deleted (when deleting a destroyed clone, or detaching)."""
    detached: tuple[str, ...] = ()
    """Paths of the external databases this pass detached (SlateDB RFC 0004 step 8)."""
    expired_checkpoints_removed: int = 0
    manifest: KindStats = field(default_factory=KindStats)
    wal: KindStats = field(default_factory=KindStats)
    compacted: KindStats = field(default_factory=KindStats)
    compactions: KindStats = field(default_factory=KindStats)
    staged: KindStats = field(default_factory=KindStats)
    """Staged files of crashed local-disk writes (:mod:`slatedb_core.gc.staged`): no objects,
    so not part of ``deleted`` or ``bytes_freed``."""
    manifest_boundary: int | None = None
    """The durable boundary after the pass (None when the pass stopped before that step)."""
    compactions_boundary: int | None = None
    """None also when the database has no compactions records yet."""
    wal_boundary: int | None = None
    """Reported only when the pass advanced it (it deleted WAL SSTs)."""
    data_gc_skipped: str | None = None
    """Why WAL and compacted SSTs were left alone this pass, if they were (a pinned manifest
    could not be read, so the set of live SSTs was unknown)."""
    two_phase: TwoPhaseGcStats | None = None
    """Records and temporary objects of two-phase CAS (None unless the store uses it)."""
    duration_s: float = 0.0
    requests: dict[str, int] = field(default_factory=dict)
    """Object-store requests per operation during the pass (a delta of ``store.counters``; it
    includes other users' requests if the store object is shared while the pass runs)."""

    def kind(self, kind: Kind) -> KindStats:
        """The counters of one kind of object (``manifest``, ``wal``, ``compacted``, ...)."""
        stats: KindStats = getattr(self, kind)
        return stats

    @property
    def deleted(self) -> int:
        return sum(self.kind(k).deleted for k in KINDS)

    @property
    def bytes_freed(self) -> int:
        return sum(self.kind(k).bytes_freed for k in KINDS)

    @property
    def failed(self) -> int:
        return sum(self.kind(k).failed for k in KINDS)

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    def summary(self) -> str:
        """A one-line summary of what the pass deleted and what failed."""
        parts = [f"{k} -{self.kind(k).deleted}" for k in KINDS if self.kind(k).deleted]
        if self.failed:
            parts.append(f"{self.failed} failed")
        if self.staged.deleted:
            parts.append(f"staged -{self.staged.deleted} ({self.staged.bytes_freed} bytes)")
        if self.expired_checkpoints_removed:
            parts.append(f"{self.expired_checkpoints_removed} expired checkpoints")
        if self.detached:
            parts.append(f"detached from {', '.join(self.detached)}")
        if self.database_deleted:
            parts.append(f"destroyed database deleted ({self.database_objects.deleted} objects)")
        elif self.destroyed:
            parts.append("destroyed")
        what = ", ".join(parts) or "nothing to do"
        return (
            f"gc {self.path!r}: {what}; {self.bytes_freed} bytes freed, "
            f"{self.total_requests} requests, {self.duration_s * 1e3:.1f} ms"
        )
