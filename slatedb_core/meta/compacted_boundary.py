"""The boundary that makes GC with any ``min_age`` (even 0) safe for a writer's new SSTs.

The race: a writer uploads ``compacted/X.sst`` and then commits a manifest that references X. A GC
pass that listed X and read the manifest before that commit sees X unreferenced and deletes it,
possibly after the commit: the manifest then points at nothing, and acknowledged data is gone.
``min_age`` only makes the window unlikely; compaction outputs are covered by the ``.compactions``
in-flight record, but a writer's memtable flushes and bulk ingests are not.

The fix is SlateDB RFC 0026's boundary again, over SST creation times, plus a barrier commit.
X's ULID carries its creation time in milliseconds; ``gc/compacted.boundary`` holds a millisecond
value B:

* GC advances B over its candidates; if any candidate is unreferenced, it commits a *barrier* (a
  manifest with unchanged content on top of the latest) and only then reads the manifests that
  decide; it deletes only SSTs whose ULID time is <= the durable B;
* a writer reads B inside every commit attempt, after the attempt's base manifest is known and
  before its create (:class:`~slatedb_core.writer.gc_safety.NewSsts`). If X's time is <= B it
  writes the same bytes under a fresh id Y with time > B first, and names Y instead.

An attempt whose create succeeds on a base at or after the barrier read B after GC moved it, so
it named no SST GC may delete. An attempt that created an id below the barrier committed before
it, so the pass reads its reference (in the latest manifest, or in a checkpointed one). So no
manifest, latest or checkpointed, ever names an SST GC may already have deleted, at any
``min_age`` (RELIABILITY.md, review item 2). The tombstone of a destroyed database sets B to
2^48-1 (:data:`~slatedb_core.meta.boundary.ULID_MS_TOMBSTONE`): every later commit of an SST is
refused.
"""

from __future__ import annotations

from slatedb_core.errors import CorruptionError
from slatedb_core.layout import COMPACTED_BOUNDARY, boundary_path
from slatedb_core.meta.boundary import ULID_MS_TOMBSTONE, BoundaryObject
from slatedb_core.store.objectstore import ObjectStore, ObjectVersion

ULID_MS_MAX = ULID_MS_TOMBSTONE
"""The largest time a ULID can carry (48 bits of milliseconds), so the largest valid compacted
boundary. A boundary of exactly this value is valid: it covers every SST id there can be."""


class CompactedBoundary(BoundaryObject):
    """A :class:`BoundaryObject` whose value is a ULID time: a stored value above
    :data:`ULID_MS_MAX` names no SST and is damage, reported as :class:`CorruptionError` naming
    the object on every read (found by review: it used to reach ``ULID.from_timestamp`` in the
    writer's re-homing and fail ``Db.open`` with a raw ValueError; GC would have taken it as
    permission to delete every unreferenced SST)."""

    def _read(self) -> tuple[int, ObjectVersion | None, int | None]:
        with self._lock:
            seen = (self._value, self._e_tag, self._observed)
        value, version, lease_ms = super()._read()
        if value > ULID_MS_MAX:
            with self._lock:  # keep the damaged value out of the cache: every read re-checks it
                self._value, self._e_tag, self._observed = seen
            raise CorruptionError(
                self.path,
                f"compacted boundary {value} exceeds the largest ULID time {ULID_MS_MAX} "
                "(48-bit milliseconds)",
            )
        return value, version, lease_ms


def compacted_boundary(store: ObjectStore, db_path: str) -> CompactedBoundary:
    """``<db>/gc/compacted.boundary``: ULID milliseconds; SSTs created at or before it may be
    deleted by GC if no manifest it read references them."""
    return CompactedBoundary(store, boundary_path(db_path, COMPACTED_BOUNDARY))
