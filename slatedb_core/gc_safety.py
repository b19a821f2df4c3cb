"""How a writer keeps what it reads and writes safe from GC (used by
:class:`~slatedb_core.engine.WriterEngine`, :mod:`slatedb_core.recovery` and ``Db``):

* its *writer checkpoint* (seed 003): every commit of the writer replaces it with one pinning the
  manifest being committed (:func:`writer_checkpoint`);
* the *post-commit check* of each SST it wrote (protocol in
  :mod:`slatedb_core.meta.compacted_boundary`): an SST whose creation time is at or behind the
  compacted boundary may already have been judged garbage by a GC pass, so it is rewritten under a
  newer id and the manifest's references swapped (:func:`secure_from_gc`, :func:`replace_sst`);
* creating the writer's SSTs by create-if-absent (:func:`create_sst`, :func:`write_new_sst`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable

from ulid import ULID

from slatedb_core.dbstate import sst_path
from slatedb_core.errors import ObjectAlreadyExists
from slatedb_core.manifest.model import (
    Checkpoint,
    CompactedSst,
    Manifest,
    SortedRun,
    SstInfo,
    SstView,
)
from slatedb_core.manifest.store import IdChange, StoredManifest
from slatedb_core.meta.boundary import BoundaryObject
from slatedb_core.store.objectstore import ObjectStore

log = logging.getLogger(__name__)

Commit = Callable[[IdChange], StoredManifest]
"""A fenced manifest update of the writer (``WriterEngine._commit``)."""


def writer_checkpoint(m: Manifest, manifest_id: int, epoch: int) -> Manifest:
    """Replace any writer checkpoint with one of ``epoch`` pinning ``manifest_id`` (seed 003)."""
    others = tuple(c for c in m.checkpoints if c.writer_epoch is None)
    cp = Checkpoint(
        id=uuid.uuid4(),
        manifest_id=manifest_id,
        create_time_s=int(time.time()),
        expire_time_s=None,
        writer_epoch=epoch,
    )
    return dataclasses.replace(m, checkpoints=(*others, cp))


def replace_sst(m: Manifest, old_id: ULID, new: CompactedSst) -> Manifest | None:
    """``m`` with every reference to SST ``old_id`` pointing at ``new`` instead (views whose id
    was the SST's id take the new id too); None if ``m`` does not reference ``old_id``."""
    if m.sst(old_id) is None:
        return None

    def view(v: SstView) -> SstView:
        if v.sst_id != old_id:
            return v
        return SstView(new.id if v.view_id == old_id else v.view_id, new.id, v.visible_range)

    return dataclasses.replace(
        m,
        ssts=tuple(new if s.id == old_id else s for s in m.ssts),
        l0=tuple(view(v) for v in m.l0),
        compacted=tuple(SortedRun(r.id, tuple(view(v) for v in r.views)) for r in m.compacted),
    )


def create_sst(store: ObjectStore, path: str, data: bytes) -> None:
    """Create-if-absent under a fresh ULID. "Already exists" with our bytes is our own
    earlier attempt (obstore retries a 5xx that came after the write landed, and the
    retry meets it), so it is success."""
    try:
        store.put_if_absent(path, data)
    except ObjectAlreadyExists:
        if store.get(path).data != data:
            raise


def write_new_sst(store: ObjectStore, db_path: str, data: bytes, info: SstInfo) -> CompactedSst:
    """Create the encoded SST ``data`` under a fresh ULID in ``db_path``'s compacted directory."""
    sst_id = ULID()
    create_sst(store, sst_path(db_path, sst_id), data)
    return CompactedSst(id=sst_id, info=info)


def secure_from_gc(
    store: ObjectStore,
    db_path: str,
    boundary: BoundaryObject,
    epoch: int,
    commit: Commit,
    sst: CompactedSst,
    data: Callable[[], bytes],
) -> None:
    """After committing ``sst``, make sure no GC pass can have decided to delete it
    (protocol in :mod:`slatedb_core.meta.compacted_boundary`): if its creation time is at or
    behind the compacted boundary, rewrite it under a newer id and swap the reference (each swap
    a ``commit`` that also moves the writer checkpoint of ``epoch``)."""
    current = sst
    while True:
        behind = boundary.read()
        if current.id.milliseconds > behind:
            return
        fresh = dataclasses.replace(
            current, id=ULID.from_timestamp(max(time.time(), (behind + 1.5) / 1000))
        )
        log.warning(
            "SST %s is behind the GC boundary %d; re-homing it as %s",
            current.id,
            behind,
            fresh.id,
        )
        create_sst(store, sst_path(db_path, fresh.id), data())
        old_id = current.id

        def change(
            m: Manifest, next_id: int, old_id: ULID = old_id, fresh: CompactedSst = fresh
        ) -> Manifest | None:
            swapped = replace_sst(m, old_id, fresh)
            return None if swapped is None else writer_checkpoint(swapped, next_id, epoch)

        stored = commit(change)
        if stored.manifest.sst(fresh.id) is None:
            return  # the old id was compacted away meanwhile: nothing references it
        current = fresh
