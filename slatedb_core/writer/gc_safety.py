"""How a writer keeps what it reads and writes safe from GC (used by
:class:`~slatedb_core.writer.engine.WriterEngine` and ``Db``):

* its *writer checkpoint* (SlateDB RFC 0004, "Writers"): every commit of the writer replaces it
  with one pinning the manifest being committed
  (:func:`~slatedb_core.checkpoints.writer_checkpoint`);
* the *pre-commit check* of the SSTs it is about to name (protocol in
  :mod:`slatedb_core.meta.compacted_boundary`): inside every commit attempt, after the attempt's
  base manifest is known and before its create, an SST whose creation time is at or behind the
  compacted boundary is rewritten under a newer id first (:class:`NewSsts`), so no manifest ever
  names an SST a GC pass may already have deleted;
* creating the writer's SSTs by create-if-absent (:mod:`slatedb_core.sst.create`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence

from ulid import ULID

from slatedb_core.errors import DatabaseDeleted
from slatedb_core.layout import sst_path
from slatedb_core.manifest.model import (
    CompactedSst,
    Manifest,
)
from slatedb_core.meta.boundary import ULID_MS_TOMBSTONE, BoundaryObject
from slatedb_core.sst.create import create_sst
from slatedb_core.store.objectstore import ObjectStore

log = logging.getLogger(__name__)


class NewSsts:
    """SSTs a writer has uploaded and is about to commit, with the means to re-home them.

    :meth:`secure` runs inside each commit attempt (the change function calls it): it reads the
    compacted boundary and rewrites every SST at or behind it under a fresh id above it. A GC pass
    deletes an unreferenced SST only after advancing the boundary over it *and* committing a
    barrier manifest (:meth:`~slatedb_core.gc.collector.Collector.run`), so an attempt whose
    create succeeds either read the boundary after that advance (and re-homed) or committed
    before the barrier (and the pass sees the reference).
    """

    def __init__(
        self,
        store: ObjectStore,
        db_path: str,
        boundary: BoundaryObject,
        ssts: Sequence[CompactedSst],
        datas: Sequence[Callable[[], bytes]],
    ) -> None:
        if len(ssts) != len(datas):
            raise ValueError("one data source per SST")
        self._store = store
        self._db_path = db_path
        self._boundary = boundary
        self._ssts = list(ssts)
        self._datas = list(datas)
        self._ids = {s.id for s in ssts}

    @property
    def ssts(self) -> tuple[CompactedSst, ...]:
        """The SSTs as last secured (oldest first, as given)."""
        return tuple(self._ssts)

    def committed_in(self, m: Manifest) -> bool:
        """True if ``m`` names any id these SSTs ever had (an earlier attempt's commit landed)."""
        return any(m.sst(i) is not None for i in self._ids)

    def secure(self) -> tuple[CompactedSst, ...]:
        """Re-home every SST at or behind the compacted boundary; returns the SSTs to name."""
        behind = self._boundary.read()
        if behind >= ULID_MS_TOMBSTONE:
            raise DatabaseDeleted(f"database {self._db_path!r} was destroyed")
        for i, sst in enumerate(self._ssts):
            if sst.id.milliseconds > behind:
                continue
            fresh = dataclasses.replace(
                sst, id=ULID.from_timestamp(max(time.time(), (behind + 1.5) / 1000))
            )
            log.warning(
                "SST %s is behind the GC boundary %d; re-homing it as %s before committing it",
                sst.id,
                behind,
                fresh.id,
            )
            create_sst(self._store, sst_path(self._db_path, fresh.id), self._datas[i]())
            self._ssts[i] = fresh
            self._ids.add(fresh.id)
        return tuple(self._ssts)
