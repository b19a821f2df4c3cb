"""One garbage-collection pass over one database: the order in which it collects each kind of
object, and why (SlateDB RFC 0004 "Garbage Collector", SlateDB RFC 0026; docs/gc-and-boundaries.md).

Each kind has a module that owns its listing, its cutoff and its deletion:
:mod:`~slatedb_core.gc.destroyed`, :mod:`~slatedb_core.gc.expired_checkpoints`,
:mod:`~slatedb_core.gc.manifests`, :mod:`~slatedb_core.gc.wal_ssts`,
:mod:`~slatedb_core.gc.compacted_ssts`, :mod:`~slatedb_core.gc.compactions_records`,
:mod:`~slatedb_core.gc.detach`, :mod:`~slatedb_core.gc.twophase` and
:mod:`~slatedb_core.gc.staged`; deletes go through
:mod:`~slatedb_core.gc.deletes`. This module decides the order:

1. LIST ``compacted/``, ``wal/`` and ``compactions/``, then read the compactor's in-flight output
   ids, then LIST ``manifest/`` and GET the listed latest manifest. Listing the SSTs *before*
   reading the in-flight set and the manifest is what makes an SST that a compactor is still
   committing safe: an SST seen by the LIST was written before it, its in-flight record was
   written before the SST, and that record is only cleared after the manifest naming the SST is
   committed, so whichever of the two reads comes later sees the SST. The writer's own L0 and
   ingested SSTs have no such record; the compacted boundary and the barrier of step 7 cover
   them at any ``min_age``, 0 included.
2. A soft-destroyed database is deleted once its grace period is over (tombstone first), and a
   path holding only a tombstone is swept; nothing else happens to it.
3. Expired checkpoints are dropped in one manifest update, before anything is collected, so what
   only they pinned goes in this same pass.
4. Manifests: the boundary is advanced *before* any delete; then the old manifests no unexpired
   checkpoint pins are deleted, never the latest (the listed latest counts once step 3 or the
   barrier committed a newer one).
5. M = the latest manifest and every manifest an unexpired checkpoint pins, each read once. If
   one of them is unreadable, the live set of WAL and compacted SSTs is unknown and none of them
   may be deleted this pass (``GcStats.data_gc_skipped``).
6. WAL: ``gc/wal.boundary`` is advanced over the WAL SSTs behind every replay point of M here,
   before any delete; they are deleted last, after step 8, once the boundary's lease has passed
   (:mod:`slatedb_core.meta.lease`): the wait overlaps steps 4, 7 and 8 instead of adding to
   them. They go even if one of those steps raises: M alone decided them, and a step failing
   every pass must not stop WAL collection for good. Not on ``BoundaryMissing``, though: GC
   never deletes boundary files, so the store is not what we think it is (gc/service.py).
7. Compacted SSTs no manifest of M references. Before M is read, the pass declares its
   candidates by moving ``gc/compacted.boundary`` over them and, if one is unreferenced, commits
   a barrier and reads M again from it.
8. Compactions records: the same boundary-first procedure as manifests, never the latest.
9. Detach: external databases no manifest of M uses any SST of are released and dropped.
10. Two-phase CAS (only over a :class:`~slatedb_core.store.twophase.TwoPhaseStore`): SlateDB RFC
    0001's transactional-store deletion, recovery of unfinished writes, orphaned temporary
    objects.
11. Staged files crashed local-disk writes left (:mod:`~slatedb_core.gc.staged`), also once a
    destroyed database is deleted; no request on stores that stage nothing.

The sequence of store requests is part of the contract: the simulation pins schedules by seed
(tests/sim/test_found_seeds.py), so a change here that reorders requests shifts the seeds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from slatedb_core.compactor.compactions import compactions_seq, in_flight_output_ids
from slatedb_core.errors import BoundaryMissing, ObjectNotFound
from slatedb_core.gc.compacted_ssts import CompactedSstGc
from slatedb_core.gc.compactions_records import collect_compactions_records
from slatedb_core.gc.deletes import DELETE_CONCURRENCY, Deleter
from slatedb_core.gc.destroyed import collect_destroyed, sweep_tombstone
from slatedb_core.gc.detach import detach
from slatedb_core.gc.expired_checkpoints import remove_expired_checkpoints
from slatedb_core.gc.manifests import collect_manifests
from slatedb_core.gc.staged import sweep_staged
from slatedb_core.gc.stats import GcStats, Kind
from slatedb_core.gc.twophase import GcWindow
from slatedb_core.gc.twophase import collect_garbage as collect_two_phase_garbage
from slatedb_core.gc.wal_ssts import WalSstGc
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore, StoredManifest
from slatedb_core.meta.sequenced import SequencedEntry
from slatedb_core.options import GarbageCollectorOptions, check_optional
from slatedb_core.store.objectstore import (
    ObjectMeta,
    ObjectStore,
    check_store,
    validate_relative_path,
)
from slatedb_core.store.twophase import two_phase_of

log = logging.getLogger(__name__)

Clock = Callable[[], float]

Active = list[Manifest] | None
"""M of the module docstring, the latest manifest first; None if a pinned manifest is unreadable."""


class Collector:
    """The stores of one database, kept across passes so boundary reads can reuse cached e-tags."""

    def __init__(
        self,
        path: str,
        store: ObjectStore,
        options: GarbageCollectorOptions | None = None,
        *,
        delete_concurrency: int = DELETE_CONCURRENCY,
        wal_url: str | None = None,
    ) -> None:
        """``wal_url``: the database's separate WAL store, if it has one (SlateDB RFC 0009);
        its WAL SSTs are listed and collected there."""
        validate_relative_path(path, what="database path")
        check_store(store)
        check_optional("options", options, GarbageCollectorOptions)  # RELIABILITY.md, bad input
        self.path = path
        self.store = store
        self.options = options or GarbageCollectorOptions()
        self.manifests = ManifestStore(store, path)
        self.compactions = compactions_seq(store, path)
        self.wal_ssts = WalSstGc(path, store, wal_url)
        self.compacted_ssts = CompactedSstGc(path, store)
        self.deleter = Deleter(path, store, delete_concurrency)

    def _min_age_s(self, kind: Kind) -> float:
        return self.options.min_age_for(kind).total_seconds()

    def run(self, now: Clock = time.time) -> GcStats:
        """One pass at ``now()``; what it did, with the store requests it made."""
        stats = GcStats(self.path)
        started = time.monotonic()
        before = self.store.counters.snapshot()
        try:
            self._run(stats, now())
        finally:
            after = self.store.counters.snapshot()
            stats.requests = {op: after[op] - before.get(op, 0) for op in after}
            stats.duration_s = time.monotonic() - started
        busy = stats.deleted or stats.failed or stats.staged.deleted
        log.log(logging.INFO if busy else logging.DEBUG, stats.summary())
        return stats

    def _run(self, stats: GcStats, now_s: float) -> None:
        wal_ssts, compacted_ssts, deleter = self.wal_ssts, self.compacted_ssts, self.deleter
        # Step 1; the order of these reads matters (module docstring).
        compacted = compacted_ssts.list_ssts()
        wal = wal_ssts.list_ssts()
        compactions = self.compactions.list()
        # No compactions record at all (listed after compacted/) means no compactor announced an
        # output before our SST listing, so the in-flight read (three requests) can be skipped.
        in_flight = in_flight_output_ids(self.store, self.path) if compactions else set()
        entries = self.manifests.list()
        if not entries:
            sweep_tombstone(
                self.manifests, wal_ssts.wal.where, concurrency=deleter.concurrency, stats=stats
            )
            return
        latest = self._read_listed_latest(entries)
        stats.latest_manifest_id = latest.id
        if latest.manifest.destroyed_at_s is not None:
            self._destroyed(latest.manifest, now_s, stats)
            return
        wal_ssts.check_present(latest.manifest, wal)
        latest = remove_expired_checkpoints(self.manifests, latest, now_s=now_s, stats=stats)
        stats.latest_manifest_id = latest.id
        if latest.manifest.destroyed_at_s is not None:
            self._destroyed(latest.manifest, now_s, stats)  # destroyed while removing checkpoints
            return
        # Declare which SSTs this pass may delete, then commit the barrier that makes every
        # writer commit after it see the declaration, BEFORE reading the manifests that decide
        # (slatedb_core.meta.compacted_boundary has the protocol, gc_safety the writer's side).
        compacted_min_age = self._min_age_s("compacted")
        limit = compacted_ssts.declare(compacted, min_age_s=compacted_min_age, now_s=now_s)
        pinned, active = self._read_active(latest, now_s, stats)
        if limit > compacted_ssts.barrier_at:
            if active is not None and compacted_ssts.unreferenced(
                compacted, active, in_flight, limit
            ):
                latest = self.manifests.update(lambda m: m, base=latest, force=True)
                compacted_ssts.barrier_at = limit
                stats.latest_manifest_id = latest.id
                pinned, active = self._read_active(latest, now_s, stats)
            else:
                limit = compacted_ssts.barrier_at  # nothing to delete: no barrier, no deletes
        # Step 6's first half: the WAL boundary moves now and its WAL SSTs go last, so the lease
        # it must outlive (slatedb_core.meta.lease) runs while the other kinds are collected.
        wal_doomed = (
            []
            if active is None
            else wal_ssts.advance(
                wal, active, min_age_s=self._min_age_s("wal"), now_s=now_s, stats=stats
            )
        )
        try:
            collect_manifests(
                self.manifests,
                entries,
                latest.id,
                pinned,
                min_age_s=self._min_age_s("manifest"),
                now_s=now_s,
                deleter=deleter,
                stats=stats,
            )
            if active is not None:
                compacted_ssts.collect(
                    compacted,
                    latest.manifest,
                    active,
                    in_flight,
                    limit,
                    has_records=bool(compactions),
                    min_age_s=compacted_min_age,
                    now_s=now_s,
                    deleter=deleter,
                    stats=stats,
                )
            collect_compactions_records(
                self.compactions,
                compactions,
                min_age_s=self._min_age_s("compactions"),
                now_s=now_s,
                deleter=deleter,
                stats=stats,
            )
        except Exception as e:
            # M alone decided the WAL SSTs (step 6): unless the store is not what we think it is
            if not isinstance(e, BoundaryMissing):
                wal_ssts.delete(wal_doomed, deleter, stats)
            raise
        wal_ssts.delete(wal_doomed, deleter, stats)
        if active is not None:
            # a separate WAL store's temporary objects are not the main store's to collect
            separate = wal_ssts.wal.where.separate is not None
            listed = compacted if separate else [*wal, *compacted]
            self._collect_two_phase(latest.id, pinned, active, listed, now_s, stats)
            if latest.manifest.external_dbs and latest.manifest.initialized:
                detach(self.path, self.store, self.manifests, active, stats)
        self._sweep_staged(now_s, stats)

    def _destroyed(self, m: Manifest, now_s: float, stats: GcStats) -> None:
        collect_destroyed(
            self.path,
            self.store,
            self.manifests,
            self.wal_ssts.wal.where,
            m,
            grace_s=self.options.db_delete_grace.total_seconds(),
            now_s=now_s,
            concurrency=self.deleter.concurrency,
            stats=stats,
        )
        if stats.database_deleted:
            self._sweep_staged(now_s, stats)

    def _sweep_staged(self, now_s: float, stats: GcStats) -> None:
        """Step 11: staged files crashed local-disk writes left under the database's folders."""
        wal = self.wal_ssts.wal
        stores = [(self.store, self.path)]
        if wal.where.separate is not None:
            stores.append((wal.store, wal.dir))
        sweep_staged(stores, min_age_s=self._min_age_s("compacted"), now_s=now_s, stats=stats)

    def _read_listed_latest(self, entries: Sequence[SequencedEntry]) -> StoredManifest:
        """The listing already names the latest; one GET instead of the pointer lookup's three.
        If it vanished, a newer one exists and a concurrent GC collected it: look it up."""
        try:
            return self.manifests.read(entries[-1].id)
        except ObjectNotFound:
            return self.manifests.read_latest()

    def _read_active(
        self, latest: StoredManifest, now_s: float, stats: GcStats
    ) -> tuple[set[int], Active]:
        """The ids unexpired checkpoints pin, and M of step 5."""
        pinned = {c.manifest_id for c in latest.manifest.checkpoints if not c.is_expired(now_s)}
        active = [latest.manifest]
        for manifest_id in sorted(pinned - {latest.id}):
            try:
                active.append(self.manifests.read(manifest_id).manifest)
            except ObjectNotFound:
                stats.data_gc_skipped = f"checkpointed manifest {manifest_id} is missing"
                log.error("gc %r: %s; no WAL or SST deleted", self.path, stats.data_gc_skipped)
                return pinned, None
        return pinned, active

    def _collect_two_phase(
        self,
        latest_id: int,
        pinned: set[int],
        active: Sequence[Manifest],
        listed: Sequence[ObjectMeta],
        now_s: float,
        stats: GcStats,
    ) -> None:
        """Step 10, when the store is two-phase CAS: the intents of manifests at or behind the
        manifest boundary that nothing pins, of WAL SSTs below the replay point and at or behind
        the WAL boundary this process has known for its lease; orphaned temporary objects
        (:func:`slatedb_core.gc.twophase.collect_garbage`)."""
        two_phase = two_phase_of(self.store)
        if two_phase is None:
            return
        window = GcWindow(
            manifest_boundary=stats.manifest_boundary or 0,
            keep_manifests=pinned | {latest_id},
            wal_boundary=self.wal_ssts.boundary.settled(),
            wal_floor=min(m.replay_after_wal_id for m in active),
            listed=listed,
            now_s=now_s,
        )
        stats.two_phase = collect_two_phase_garbage(two_phase, self.path, window)
