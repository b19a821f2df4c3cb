"""The compacted SSTs a garbage-collection pass collects: those under this database's
``compacted/`` that no live manifest references (by id, ``original_id`` or view), no compaction
has in flight, past ``min_age`` and at or behind ``gc/compacted.boundary``
(SlateDB RFC 0004; docs/gc-and-boundaries.md).

SSTs of other databases (a clone's parents, a union's sources) are never listed, so never
deleted. The in-flight set covers a compactor's outputs; a writer's own L0 and ingested SSTs have
no such record, and the compacted boundary covers them at any ``min_age``, 0 included
(:mod:`slatedb_core.meta.compacted_boundary` has the protocol, :mod:`slatedb_core.writer.gc_safety`
the writer's side): before deciding, the pass *declares* its candidates by moving the boundary
over them (:meth:`CompactedSstGc.declare`) and, if one is unreferenced, commits a *barrier*: a
manifest with the same content on top of the latest, so every writer commit after it re-homes an
SST the boundary covers. The manifests that decide are read from the barrier or later. While a
SlateDB writer or compactor may hold the database, SlateDB's own cutoff applies too
(:mod:`slatedb_core.gc.cutoffs`): its actors write an SST before the manifest names it and follow
none of the boundary protocol.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ulid import ULID

from slatedb_core.compactor.compactions import read_latest_state
from slatedb_core.gc.cutoffs import referenced, slatedb_cutoff_ms
from slatedb_core.gc.deletes import Deleter
from slatedb_core.gc.stats import GcStats
from slatedb_core.layout import SST_SUFFIX, compacted_dir
from slatedb_core.manifest.model import Manifest
from slatedb_core.meta.compacted_boundary import compacted_boundary
from slatedb_core.store.objectstore import ObjectMeta, ObjectStore

log = logging.getLogger(__name__)

_ULID_LEN = 26


class CompactedSstGc:
    """The ``compacted/`` directory of one database and its boundary, kept across passes so
    boundary reads reuse cached e-tags and a barrier is committed once per boundary value."""

    def __init__(self, path: str, store: ObjectStore) -> None:
        self.path = path
        self.store = store
        self.dir = compacted_dir(path)
        self.boundary = compacted_boundary(store, path)
        self.barrier_at = -1
        """The compacted boundary value a barrier of this collector was last committed after:
        up to there, the manifests a pass reads already postdate a barrier."""

    def list_ssts(self) -> list[ObjectMeta]:
        """LIST ``compacted/``."""
        return list(self.store.list(self.dir))

    def parse(self, path: str) -> ULID | None:
        """The id of ``<db>/compacted/<ULID>.sst``; None for anything else, which GC leaves be."""
        prefix = self.dir + "/"
        if not path.startswith(prefix) or not path.endswith(SST_SUFFIX):
            return None
        stem = path[len(prefix) : -len(SST_SUFFIX)]
        if len(stem) != _ULID_LEN:
            return None
        try:
            sst_id = ULID.from_str(stem)
        except ValueError:
            return None
        return sst_id if str(sst_id) == stem else None

    def declare(self, listing: Sequence[ObjectMeta], *, min_age_s: float, now_s: float) -> int:
        """Move ``gc/compacted.boundary`` (ULID milliseconds) up to the newest listed SST old
        enough to be a deletion candidate; returns the durable value. No write when nothing new
        is old enough, so a quiet database costs nothing here."""
        now_ms = int(now_s * 1000)
        target = None
        for meta in listing:
            sst_id = self.parse(meta.path)
            if sst_id is not None and now_s - meta.last_modified.timestamp() >= min_age_s:
                ms = sst_id.milliseconds
                if ms > now_ms:
                    # A ULID from the future (a stray object, a skewed clock): covering it would
                    # push the boundary past every id a writer can make, and it never moves back.
                    log.warning(
                        "GC of %r: %s has a future ULID; not covering it", self.path, meta.path
                    )
                    continue
                target = ms if target is None else max(target, ms)
        if target is None or target <= self.boundary.cached:
            return self.boundary.cached
        return self.boundary.advance(target)

    def unreferenced(
        self,
        listing: Sequence[ObjectMeta],
        active: Sequence[Manifest],
        in_flight: set[ULID],
        limit: int,
    ) -> list[ObjectMeta]:
        """The listed SSTs at or behind ``limit`` that none of ``active`` references and no
        compaction has in flight. If there are any, this pass may delete something, so it needs
        a barrier first; :meth:`collect` deletes those past ``min_age``."""
        live = set(in_flight).union(*(referenced(m) for m in active))
        ids = ((self.parse(meta.path), meta) for meta in listing)
        return [m for i, m in ids if i is not None and i not in live and i.milliseconds <= limit]

    def collect(
        self,
        listing: Sequence[ObjectMeta],
        latest: Manifest,
        active: Sequence[Manifest],
        in_flight: set[ULID],
        limit: int,
        *,
        has_records: bool,
        min_age_s: float,
        now_s: float,
        deleter: Deleter,
        stats: GcStats,
    ) -> None:
        """Delete the unreferenced SSTs at or behind ``limit`` (the boundary a barrier covers)
        and SlateDB's cutoff, past ``min_age_s``. ``latest`` is the latest manifest (the first of ``active``);
        ``has_records``: ``compactions/`` listed something, so a record may hold SSTs back."""
        held = latest.our_compactor_epoch != latest.compactor_epoch
        record = read_latest_state(self.store, self.path) if has_records and held else None
        limit = min(limit, slatedb_cutoff_ms(latest, record))
        unreferenced = self.unreferenced(listing, active, in_flight, limit)
        age_ok = [m for m in unreferenced if now_s - m.last_modified.timestamp() >= min_age_s]
        deleter.delete([(m.path, m.size) for m in age_ok], stats.compacted)
