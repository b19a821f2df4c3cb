"""The boundary that makes GC with any ``min_age`` (even 0) safe for a writer's new SSTs.

The race: a writer uploads ``compacted/X.sst`` and then commits a manifest that references X. A GC
pass that listed X and read the manifest before that commit sees X unreferenced and deletes it,
possibly after the commit: the manifest then points at nothing, and acknowledged data is gone.
``min_age`` only makes the window unlikely; compaction outputs are covered by the ``.compactions``
in-flight record, but a writer's memtable flushes and bulk ingests are not.

The fix is seed 004's boundary again, over SST creation times. X's ULID carries its creation time
in milliseconds; ``gc/compacted.boundary`` holds a millisecond value B:

* GC advances B to cover an SST *before* it reads the manifest, and deletes only SSTs whose ULID
  time is <= the durable B;
* a writer, *after* committing a manifest that references X, reads B. If X's time is > B, no GC
  pass can delete X: any later pass reads the manifest only after moving B, so it sees the
  reference. If X's time is <= B, some pass may already have decided to delete X, so the writer
  writes the same bytes under a fresh id Y with time > B, commits the manifest swapping X for Y,
  and checks again.
"""

from __future__ import annotations

from slatedb_core.errors import CorruptionError
from slatedb_core.meta.boundary import BoundaryObject
from slatedb_core.store.objectstore import ObjectStore, ObjectVersion, join

ULID_MS_MAX = 2**48 - 1
"""The largest time a ULID can carry (48 bits of milliseconds), so the largest valid compacted
boundary. A boundary of exactly this value is valid: it covers every SST id there can be."""


class CompactedBoundary(BoundaryObject):
    """A :class:`BoundaryObject` whose value is a ULID time: a stored value above
    :data:`ULID_MS_MAX` names no SST and is damage, reported as :class:`CorruptionError` naming
    the object on every read (issue 19 item 16: it used to reach ``ULID.from_timestamp`` in the
    writer's re-homing and fail ``Db.open`` with a raw ValueError; GC would have taken it as
    permission to delete every unreferenced SST)."""

    def _read(self) -> tuple[int, ObjectVersion | None]:
        with self._lock:
            seen = (self._value, self._e_tag, self._observed)
        value, version = super()._read()
        if value > ULID_MS_MAX:
            with self._lock:  # keep the damaged value out of the cache: every read re-checks it
                self._value, self._e_tag, self._observed = seen
            raise CorruptionError(
                self.path,
                f"compacted boundary {value} exceeds the largest ULID time {ULID_MS_MAX} "
                "(48-bit milliseconds)",
            )
        return value, version


def compacted_boundary(store: ObjectStore, db_path: str) -> CompactedBoundary:
    """``<db>/gc/compacted.boundary``: ULID milliseconds; SSTs created at or before it may be
    deleted by GC if no manifest it read references them."""
    return CompactedBoundary(store, join(db_path, "gc", "compacted.boundary"))
