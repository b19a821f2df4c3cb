"""The WAL SSTs a garbage-collection pass collects: those behind every live manifest's replay
point and past ``min_age``, once ``gc/wal.boundary`` covers them and its lease has passed
(SlateDB RFC 0001 and RFC 0026; docs/gc-and-boundaries.md, "The boundary lease").

Every id >= the smallest ``replay_after_wal_id`` of the manifests that decide (the latest and
every manifest an unexpired checkpoint pins) is kept. SlateDB RFC 0001 keeps the SST *at* the
replay point (``>= wal_id_last_compacted``) so the last writer's epoch stays readable. Our writer
does not need it (``next_wal_sst_id`` is in the manifest), but it costs one small object and
covers a manifest whose replay point was set from an id it never wrote, so we keep it too.

Collection has two halves. :meth:`WalSstGc.advance` moves the boundary over the older WAL SSTs
before any of them is deleted, so a zombie writer that then creates one of those ids is fenced.
:meth:`WalSstGc.delete` deletes them once the boundary's lease has passed
(:mod:`slatedb_core.meta.lease`): a writer's boundary read made before the advance vouches for
its creates for one lease, so the slots must outlive it. The collector runs the other kinds in
between, so the wait overlaps them instead of adding to them.
"""

from __future__ import annotations

from collections.abc import Sequence

from slatedb_core.errors import WalStoreMissing
from slatedb_core.gc.deletes import Deleter
from slatedb_core.gc.stats import GcStats
from slatedb_core.manifest.model import Manifest
from slatedb_core.store.objectstore import ObjectMeta, ObjectStore
from slatedb_core.wal.location import WalLocation, check_wal_present
from slatedb_core.wal.log import WalLog
from slatedb_core.wal.writer import wal_boundary

WalCandidates = list[tuple[int, ObjectMeta]]
"""WAL SSTs a pass declared (the boundary covers them), by id, in id order."""


class WalSstGc:
    """The WAL of one database (in its own store if it has one, SlateDB RFC 0009) and its
    boundary, kept across passes so boundary reads can reuse cached e-tags."""

    def __init__(self, path: str, store: ObjectStore, wal_url: str | None) -> None:
        self.path = path
        self.wal = WalLog(WalLocation.open(store, wal_url), path)
        self.boundary = wal_boundary(self.wal)

    def list_ssts(self) -> list[ObjectMeta]:
        """LIST ``wal/`` (in the WAL's store)."""
        return list(self.wal.store.list(self.wal.dir))

    def check_present(self, m: Manifest, listing: Sequence[ObjectMeta]) -> None:
        """Before anything is written: the WAL of ``m`` (the latest manifest) is where this pass
        looks (``WalStoreMissing`` otherwise, SlateDB RFC 0009); ``listing`` answers. That LIST
        precedes the manifest read, so a writer that opened or flushed in between can make it
        look missing: only a second LIST, made after ``m`` was read, decides."""
        r = m.replay_after_wal_id
        ids = [i for i in (self.wal.parse(meta.path) for meta in listing) if i is not None]
        try:
            check_wal_present(
                self.path,
                self.wal.where,
                m,
                [i for i in ids if i > r],
                at_replay_point=r in ids,
            )
        except WalStoreMissing:
            self.wal.list_live(m)

    def advance(
        self,
        listing: Sequence[ObjectMeta],
        active: Sequence[Manifest],
        *,
        min_age_s: float,
        now_s: float,
        stats: GcStats,
    ) -> WalCandidates:
        """The first half: durably move the boundary over the WAL SSTs this pass may delete and
        return them (none: no request, so a quiet database pays for no boundary GET)."""
        floor = min(m.replay_after_wal_id for m in active)
        parsed = ((self.wal.parse(meta.path), meta) for meta in listing)
        old = [
            (i, meta)
            for i, meta in parsed
            if i is not None and i < floor and now_s - meta.last_modified.timestamp() >= min_age_s
        ]
        if not old:
            return []
        old.sort(key=lambda item: item[0])
        boundary = self.boundary.advance(old[-1][0])
        stats.wal_boundary = boundary
        return [(i, m) for i, m in old if i <= boundary]

    def delete(self, doomed: WalCandidates, deleter: Deleter, stats: GcStats) -> None:
        """The second half: wait until the boundary covering ``doomed`` has been known for its
        lease, then delete them from the WAL's store."""
        if doomed:
            self.boundary.wait_settled(doomed[-1][0])
            deleter.delete([(m.path, m.size) for _, m in doomed], stats.wal, self.wal.store)
