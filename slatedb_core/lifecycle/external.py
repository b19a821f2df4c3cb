"""The final checkpoints a clone or union holds in the databases it references (SlateDB RFC 0004,
"Clones"; docs/clones-and-destroy.md): taken while the clone is made, released when it is
destroyed or collected. Edits of another database's manifest commit in that database's format.
"""

from __future__ import annotations

import logging

from slatedb_core.checkpoints import delete_change
from slatedb_core.errors import CheckpointNotFound, DatabaseDestroyed, DatabaseNotFound
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore, StoredManifest
from slatedb_core.store.objectstore import ObjectStore

log = logging.getLogger(__name__)

Latest = tuple[ManifestStore, StoredManifest]


def same_format_store(store: ObjectStore, path: str) -> Latest:
    """The latest manifest and its manifest store. Every commit is written as ManifestV2, as
    SlateDB 0.17 writes it, whatever the base's format (a ManifestV1 base is read: docs/format.md,
    "ManifestV1")."""
    ms = ManifestStore(store, path)
    # read_latest: the base carries its nonce (a commit on it records its parent, see
    # ManifestStore) and a destroyed, collected path raises DatabaseDestroyed
    return ms, ms.read_latest()


def release_external_checkpoints(store: ObjectStore, path: str, m: Manifest) -> int:
    """Delete the final checkpoints that ``m`` (a clone's manifest) holds in the databases it
    references, so those can be collected. Missing checkpoints or databases are fine (an earlier
    attempt got there). Returns how many were deleted."""
    n = 0
    for entry in m.external_dbs:
        if entry.final_checkpoint_id is None:
            continue
        try:
            ems, latest = same_format_store(store, entry.path)
            ems.update(delete_change(entry.final_checkpoint_id), base=latest)
            n += 1
        except (CheckpointNotFound, DatabaseNotFound, DatabaseDestroyed):
            log.info(
                "final checkpoint %s of %r in %r is already gone",
                entry.final_checkpoint_id,
                path,
                entry.path,
            )
    return n
