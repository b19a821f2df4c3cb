"""Expired checkpoints, as a garbage-collection pass removes them: all in one manifest update,
before anything is collected, so what only they pinned can go in the same pass (SlateDB RFC
0004).

The change (:func:`~slatedb_core.checkpoints.expire_change`) is re-applied on a conflict, so a
checkpoint refreshed meanwhile is no longer expired and survives. A pass over a database with no
expired checkpoint writes nothing here.
"""

from __future__ import annotations

from slatedb_core.checkpoints import expire_change
from slatedb_core.gc.stats import GcStats
from slatedb_core.manifest.store import ManifestStore, StoredManifest


def remove_expired_checkpoints(
    manifests: ManifestStore, latest: StoredManifest, *, now_s: float, stats: GcStats
) -> StoredManifest:
    """The latest manifest once the checkpoints expired at ``now_s`` are dropped from it."""
    if not any(c.is_expired(now_s) for c in latest.manifest.checkpoints):
        return latest
    change = expire_change(now_s)
    stored = manifests.update(change, base=latest)
    stats.expired_checkpoints_removed = change.removed
    return stored
