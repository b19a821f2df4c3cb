"""Detaching a clone from the databases it no longer uses, as a garbage-collection pass does it
(SlateDB RFC 0004, GC step 8): an ``external_dbs`` entry whose ``sst_ids`` is empty in every
manifest that decides has its final checkpoint deleted in that database, then is dropped.

The checkpoint goes first, so a crash in between leaves an entry whose checkpoint is already
gone, which the next pass finishes.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Sequence

from slatedb_core.gc.stats import GcStats
from slatedb_core.lifecycle.external import release_external_checkpoints
from slatedb_core.manifest.model import ExternalDb, Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.store.objectstore import ObjectStore

log = logging.getLogger(__name__)


def _key(e: ExternalDb) -> tuple[str, uuid.UUID]:
    return e.path, e.source_checkpoint_id


def detach(
    path: str,
    store: ObjectStore,
    manifests: ManifestStore,
    active: Sequence[Manifest],
    stats: GcStats,
) -> None:
    """Release and drop every external database none of ``active`` (the latest manifest first,
    then the ones unexpired checkpoints pin) references any SST of."""
    used = {_key(e) for m in active for e in m.external_dbs if e.sst_ids}
    done = [e for e in active[0].external_dbs if _key(e) not in used]
    if not done:
        return
    released = 0
    for entry in done:
        released += release_external_checkpoints(
            store, path, dataclasses.replace(active[0], external_dbs=(entry,))
        )
    gone = {_key(e) for e in done}

    def change(m: Manifest) -> Manifest | None:
        if m.destroyed_at_s is not None:
            return None
        keep = tuple(e for e in m.external_dbs if _key(e) not in gone or e.sst_ids)
        if len(keep) == len(m.external_dbs):
            return None
        return dataclasses.replace(m, external_dbs=keep)

    stored = manifests.update(change)
    stats.latest_manifest_id = stored.id
    stats.external_checkpoints_released += released
    stats.detached = tuple(e.path for e in done)
    log.info("gc %r: detached from %s", path, ", ".join(stats.detached))
