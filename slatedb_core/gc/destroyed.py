"""A destroyed database's objects, as a garbage-collection pass collects them: every object of a
soft-destroyed database once its grace period is over, and the strays left on a path that holds
only a tombstone (SlateDB RFC 0004, GC step 2; docs/clones-and-destroy.md).

A soft-destroyed database (``destroyed_at_s``) is deleted once ``db_delete_grace`` has passed and
no checkpoint is active; until then it is reported and left alone. A clone first releases the
final checkpoints it holds in its parents. The deletion writes the tombstone boundaries first,
then deletes everything but the latest manifest, then that manifest
(:func:`~slatedb_core.lifecycle.destroy.delete_database_objects`), so the database reads as
destroyed until its last object goes. A path without manifests that holds the tombstone is swept
of the stray objects a writer that stalled through the destroy may have left (its commits fail).
"""

from __future__ import annotations

import logging

from slatedb_core.gc.stats import GcStats
from slatedb_core.lifecycle.destroy import delete_database_objects
from slatedb_core.lifecycle.external import release_external_checkpoints
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.wal.location import WalLocation

log = logging.getLogger(__name__)


def _delete_everything(
    manifests: ManifestStore, wal: WalLocation, concurrency: int, stats: GcStats
) -> None:
    n, size = delete_database_objects(manifests, concurrency=concurrency, wal=wal)
    stats.database_objects.deleted += n
    stats.database_objects.bytes_freed += size


def sweep_tombstone(
    manifests: ManifestStore, wal: WalLocation, *, concurrency: int, stats: GcStats
) -> None:
    """A path without manifests: if it holds a destroyed database's tombstone, delete what a
    writer that stalled through the destroy may have left (slatedb_core.lifecycle.destroy)."""
    if not manifests.is_tombstone():
        return
    stats.destroyed = True
    _delete_everything(manifests, wal, concurrency, stats)


def collect_destroyed(
    path: str,
    store: ObjectStore,
    manifests: ManifestStore,
    wal: WalLocation,
    m: Manifest,
    *,
    grace_s: float,
    now_s: float,
    concurrency: int,
    stats: GcStats,
) -> None:
    """Delete the soft-destroyed database whose latest manifest is ``m`` once its grace period
    is over, no checkpoint is active and no SlateDB actor (which does not know it is destroyed)
    used it since. A destroyed database only admits (clones' final) checkpoints derived from an
    active one, so the checkpoint check cannot go stale before the deletes."""
    stats.destroyed = True
    assert m.destroyed_at_s is not None
    due = m.destroyed_at_s + grace_s
    if now_s < due:
        log.debug("gc %r: destroyed; deletable after %s", path, due)
        return
    if any(not c.is_expired(now_s) for c in m.checkpoints):
        log.info("gc %r: destroyed, but checkpoints are still active", path)
        return
    if (m.our_writer_epoch, m.our_compactor_epoch) != (m.writer_epoch, m.compactor_epoch):
        log.warning("gc %r: destroyed, but a SlateDB actor used it since: kept", path)
        return
    stats.external_checkpoints_released += release_external_checkpoints(store, path, m)
    _delete_everything(manifests, wal, concurrency, stats)
    stats.database_deleted = True
