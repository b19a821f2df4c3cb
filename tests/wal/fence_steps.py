"""Helpers of the WAL fencing tests. WAL objects carry no epoch (SlateDB 0.17's layout: a fence is
a zero-byte object), so a test that needs to know which writer created a slot records it in the
store that writer talks to (:class:`Recorder`), and sets the manifest's ``writer_epoch`` that a
writer losing a create reads (:func:`set_writer_epoch`)."""

from __future__ import annotations

import dataclasses

from slatedb_core.errors import ManifestVersionExists
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.store.objectstore import ObjectStore, ObjectVersion
from slatedb_core.testing import FaultyStore
from slatedb_core.wal import WalLog


class Recorder(FaultyStore):
    """A FaultyStore that records the paths its ``put_if_absent`` created, for a writer of
    ``epoch``."""

    def __init__(self, inner: ObjectStore, epoch: int) -> None:
        super().__init__(inner)
        self.epoch = epoch
        self.created: set[str] = set()

    def put_if_absent(self, path: str, data: bytes) -> ObjectVersion:
        version = super().put_if_absent(path, data)
        self.created.add(path)
        return version


def set_writer_epoch(store: ObjectStore, epoch: int, path: str = "db") -> None:
    """Commit ``epoch`` as the latest manifest's ``writer_epoch`` (creating the manifest), as a
    writer's open does before it fences (SlateDB RFC 0001)."""
    ms = ManifestStore(store, path)
    try:
        ms.create_initial(Manifest())
    except ManifestVersionExists:
        pass
    ms.update(lambda m: dataclasses.replace(m, writer_epoch=epoch), force=True)


def epochs(store: ObjectStore, *writers: Recorder, path: str = "db") -> dict[int, int]:
    """``{wal id: epoch of the writer that created it}`` of every WAL object of ``path``; each
    object must have been created through exactly one of ``writers``."""
    wal = WalLog(store, path)
    out: dict[int, int] = {}
    for wal_id in wal.list_ids():
        owners = [w.epoch for w in writers if wal.path(wal_id) in w.created]
        assert len(owners) == 1, f"WAL {wal_id} created by {owners} of {[w.epoch for w in writers]}"
        out[wal_id] = owners[0]
    return out


def is_fence(store: ObjectStore, wal_id: int, path: str = "db") -> bool:
    """The object is SlateDB 0.17's fence: zero bytes."""
    return len(store.get(WalLog(store, path).path(wal_id)).data) == 0
