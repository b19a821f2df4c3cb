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

from slatedb_core.meta.boundary import BoundaryObject
from slatedb_core.store.objectstore import ObjectStore, join


def compacted_boundary(store: ObjectStore, db_path: str) -> BoundaryObject:
    """``<db>/gc/compacted.boundary``: ULID milliseconds; SSTs created at or before it may be
    deleted by GC if no manifest it read references them."""
    return BoundaryObject(store, join(db_path, "gc", "compacted.boundary"))
