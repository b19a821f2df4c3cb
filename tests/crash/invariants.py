"""What must hold in the store of a database after any crash (checked on the real store).

* the latest manifest and every manifest above the GC boundary decode;
* manifest ids above the boundary are contiguous up to the latest, and the boundary is behind it
  (the same for ``.compactions`` records when there are any);
* writer and compactor epochs never decrease along the manifest history, nor below what was
  observed before the crash;
* the WAL boundary is behind the replay point of the latest manifest;
* every SST referenced by the latest manifest, and by the manifest each unexpired checkpoint
  pins, exists (in this database or in the external one that owns it);
* every unexpired checkpoint pins a manifest that exists;
* an initialized clone's final checkpoints exist in the databases it references, while a kept
  manifest still uses their SSTs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from slatedb_core.compactor.compactions import compactions_seq
from slatedb_core.lsm.dbstate import resolve_sst_path
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore, StoredManifest
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.wal.log import WalLog
from slatedb_core.wal.writer import wal_boundary


@dataclass(frozen=True, slots=True)
class Epochs:
    writer: int
    compactor: int

    @staticmethod
    def of(m: Manifest) -> Epochs:
        return Epochs(m.writer_epoch, m.compactor_epoch)


def epochs(store: ObjectStore, path: str) -> Epochs | None:
    stored = ManifestStore(store, path).try_read_latest()
    return None if stored is None else Epochs.of(stored.manifest)


def _check_sequenced_ids(ids: list[int], boundary: int, what: str) -> None:
    assert ids, f"{what}: no objects"
    latest = max(ids)
    assert boundary < latest, f"{what}: boundary {boundary} covers the latest id {latest}"
    above = sorted(i for i in ids if i > boundary)
    assert above == list(range(boundary + 1, latest + 1)), (
        f"{what}: ids above boundary {boundary} are not contiguous: {above}"
    )


def _check_ssts_exist(store: ObjectStore, path: str, m: Manifest, what: str) -> None:
    referenced = {v.sst_id for v in m.l0} | {v.sst_id for r in m.compacted for v in r.views}
    for sst in m.ssts:
        if sst.id not in referenced:
            continue
        sst_path = resolve_sst_path(path, m, sst)
        assert store.exists(sst_path), f"{what} references {sst_path}, which does not exist"


def check_database(
    store: ObjectStore, path: str, *, at_least: Epochs | None = None
) -> StoredManifest:
    """Assert every invariant above for the database at ``path``; returns its latest manifest."""
    ms = ManifestStore(store, path)
    latest = ms.read_latest()
    m = latest.manifest
    boundary = ms.seq.boundary.read()
    history = [e.id for e in ms.list()]
    _check_sequenced_ids(history, boundary, f"{path} manifests")
    previous: Epochs | None = None
    for manifest_id in (i for i in history if i > boundary):
        e = Epochs.of(ms.read(manifest_id).manifest)
        if previous is not None:
            assert e.writer >= previous.writer and e.compactor >= previous.compactor, (
                f"{path}: epochs went backwards at manifest {manifest_id}: {previous} -> {e}"
            )
        previous = e
    if at_least is not None:
        now = Epochs.of(m)
        assert now.writer >= at_least.writer and now.compactor >= at_least.compactor, (
            f"{path}: epochs {now} are behind {at_least}, observed before the crash"
        )

    records = compactions_seq(store, path)
    record_ids = [e.id for e in records.list()]
    if record_ids:
        _check_sequenced_ids(record_ids, records.boundary.read(), f"{path} compactions")

    wal_b = wal_boundary(WalLog(store, path)).read()
    assert wal_b == 0 or wal_b < m.replay_after_wal_id, (
        f"{path}: WAL boundary {wal_b} is not behind the replay point {m.replay_after_wal_id}"
    )

    _check_ssts_exist(store, path, m, f"{path} manifest {latest.id}")
    now_s = time.time()
    active = [m]
    for cp in m.checkpoints:
        if cp.is_expired(now_s):
            continue
        # A pinned manifest may sit behind the boundary (the boundary only says "may be
        # deleted"); GC must still have kept it.
        pinned = ms.read(cp.manifest_id).manifest
        active.append(pinned)
        _check_ssts_exist(store, path, pinned, f"{path} checkpoint {cp.id}")
    if m.initialized and m.destroyed_at_s is None:
        for ext in m.external_dbs:
            if ext.final_checkpoint_id is None or not any(
                e.sst_ids for mm in active for e in mm.external_dbs if e.path == ext.path
            ):
                continue  # no kept manifest uses its SSTs any more: a detach may be under way
            source = ManifestStore(store, ext.path).read_latest().manifest
            assert source.checkpoint(ext.final_checkpoint_id) is not None, (
                f"{path}: final checkpoint {ext.final_checkpoint_id} in {ext.path} is gone"
            )
    return latest
