"""One garbage-collection pass over one database (SlateDB RFC 0004 "Garbage Collector", SlateDB
RFC 0026; docs/gc-and-boundaries.md).

Order of a pass, and why:

1. LIST ``compacted/``, ``wal/`` and ``compactions/``, then read the compactor's in-flight output
   ids, then LIST ``manifest/`` and GET the listed latest manifest. Listing the SSTs *before*
   reading the in-flight set and the manifest is what makes an SST that a compactor is still
   committing safe: an SST seen by the LIST was written before it, its in-flight record was
   written before the SST, and that record is only cleared after the manifest naming the SST is
   committed, so whichever of the two reads comes later sees the SST. The writer's own L0 and
   ingested SSTs have no such record; the compacted boundary and the barrier of step 7 cover
   them at any ``min_age``, 0 included.
2. A soft-destroyed database (``destroyed_at_s``) is deleted once ``db_delete_grace`` has passed
   and no checkpoint is active (a clone first releases its final checkpoints in its parents),
   tombstone first (:func:`~slatedb_core.lifecycle.destroy.delete_database_objects`). A path
   holding only a tombstone is swept of the strays a stalled writer may have left.
3. Expired checkpoints are dropped in one manifest update; the change is re-applied on conflict,
   so a checkpoint refreshed meanwhile is no longer expired and survives.
4. Manifests: the boundary target is the largest listed id older than ``min_age`` except the
   latest (SlateDB RFC 0026; the listed latest counts once step 3 committed a newer one). The
   boundary is advanced *before* any delete; then the old manifests no unexpired checkpoint pins
   are deleted (:func:`~slatedb_core.meta.versioned.collect_old_versions`, shared with the
   shard map).
5. M = the latest manifest and every manifest an unexpired checkpoint pins, each read once.
6. WAL: every id >= min over M of ``replay_after_wal_id`` is kept (RFC 0001 keeps the SST *at*
   the replay point; so do we: one small object). ``gc/wal.boundary`` is advanced over the older
   WAL SSTs past ``min_age`` here, before any delete; they are deleted last, after step 8, once
   the boundary's lease has passed (:mod:`slatedb_core.meta.lease`): the wait overlaps steps 4,
   7 and 8 instead of adding to them. They go even if one of those steps raises.
7. Compacted SSTs under this database's ``compacted/`` that no manifest in M references (by id,
   ``original_id`` or view), not in flight, past ``min_age``. Before deciding, the pass moves
   ``gc/compacted.boundary`` over the candidates and, if one is unreferenced, commits a barrier
   (same content, on top of the latest; :mod:`slatedb_core.meta.compacted_boundary`) and reads
   M again from it. While a SlateDB writer or compactor may hold the database, SlateDB's own
   cutoff applies too (:mod:`slatedb_core.gc.cutoffs`).
8. Compactions records: the same boundary-first procedure as manifests, never the latest.
9. Detach (RFC 0004, GC step 8): an ``external_dbs`` entry whose ``sst_ids`` is empty in every
   manifest of M has its final checkpoint deleted in that database, then is dropped.
10. Two-phase CAS (only over a :class:`~slatedb_core.store.twophase.TwoPhaseStore`): RFC 0001's
    transactional-store deletion, recovery of unfinished writes, orphaned temporary objects.

Deletes go straight to the object store (``SequencedStore.delete`` would re-read facts the pass
has just established once, two requests per object).
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from ulid import ULID

from slatedb_core.checkpoints import expire_change
from slatedb_core.compactor.compactions import (
    compactions_seq,
    in_flight_output_ids,
    read_latest_state,
)
from slatedb_core.errors import BoundaryMissing, ObjectNotFound, StoreError, WalStoreMissing
from slatedb_core.gc.cutoffs import referenced, slatedb_cutoff_ms
from slatedb_core.gc.stats import GcStats, Kind, KindStats
from slatedb_core.gc.twophase import GcWindow
from slatedb_core.gc.twophase import collect_garbage as collect_two_phase_garbage
from slatedb_core.layout import SST_SUFFIX, compacted_dir
from slatedb_core.lifecycle.destroy import delete_database_objects
from slatedb_core.lifecycle.external import release_external_checkpoints
from slatedb_core.manifest.model import ExternalDb, Manifest
from slatedb_core.manifest.store import ManifestStore, StoredManifest
from slatedb_core.meta.compacted_boundary import compacted_boundary
from slatedb_core.meta.sequenced import SequencedEntry
from slatedb_core.meta.versioned import collect_old_versions
from slatedb_core.options import GarbageCollectorOptions, check_optional
from slatedb_core.store.objectstore import (
    ObjectMeta,
    ObjectStore,
    check_store,
    validate_relative_path,
)
from slatedb_core.store.twophase import two_phase_of
from slatedb_core.wal.location import WalLocation, check_wal_present
from slatedb_core.wal.log import WalLog
from slatedb_core.wal.writer import wal_boundary

log = logging.getLogger(__name__)

Clock = Callable[[], float]

DELETE_CONCURRENCY = 16
"""Deletes are independent once the boundary is durable; issuing them in parallel turns a pass
over thousands of objects from minutes into seconds on S3."""

_ULID_LEN = 26


def _age_s(last_modified: datetime, now_s: float) -> float:
    return now_s - last_modified.timestamp()


Active = list[Manifest] | None


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
        self.wal = WalLog(WalLocation.open(store, wal_url), path)
        self.wal_boundary = wal_boundary(self.wal)
        self.compacted_dir = compacted_dir(path)
        self.compacted_boundary = compacted_boundary(store, path)
        self._delete_concurrency = max(1, delete_concurrency)
        self._barrier_at = -1  # the compacted boundary our last barrier was committed after

    def _min_age_s(self, kind: Kind) -> float:
        return self.options.min_age_for(kind).total_seconds()

    # ---- the pass --------------------------------------------------------------------------
    def run(self, now: Clock = time.time) -> GcStats:
        stats = GcStats(self.path)
        started = time.monotonic()
        before = self.store.counters.snapshot()
        try:
            self._run(stats, now())
        finally:
            after = self.store.counters.snapshot()
            stats.requests = {op: after[op] - before.get(op, 0) for op in after}
            stats.duration_s = time.monotonic() - started
        log.log(logging.INFO if stats.deleted or stats.failed else logging.DEBUG, stats.summary())
        return stats

    def _run(self, stats: GcStats, now_s: float) -> None:
        # Step 1; the order of these reads matters (module docstring).
        compacted = list(self.store.list(self.compacted_dir))
        wal = list(self.wal.store.list(self.wal.dir))
        compactions = self.compactions.list()
        # No compactions record at all (listed after compacted/) means no compactor announced an
        # output before our SST listing, so the in-flight read (three requests) can be skipped.
        in_flight = in_flight_output_ids(self.store, self.path) if compactions else set()
        entries = self.manifests.list()
        if not entries:
            self._sweep_tombstone(stats)
            return
        latest = self._read_listed_latest(entries)
        stats.latest_manifest_id = latest.id
        if latest.manifest.destroyed_at_s is not None:
            self._destroyed(latest, now_s, stats)
            return
        self._check_wal_present(latest.manifest, wal)
        latest = self._remove_expired_checkpoints(latest, now_s, stats)
        stats.latest_manifest_id = latest.id
        if latest.manifest.destroyed_at_s is not None:
            self._destroyed(latest, now_s, stats)  # destroyed while we were removing checkpoints
            return
        # Declare which SSTs this pass may delete, then commit the barrier that makes every
        # writer commit after it see the declaration, BEFORE reading the manifests that decide
        # (slatedb_core.meta.compacted_boundary has the protocol, gc_safety the writer's side).
        compacted_limit = self._advance_compacted_boundary(compacted, now_s)
        pinned, active = self._read_active(latest, now_s, stats)
        if compacted_limit > self._barrier_at:
            if active is not None and self._unreferenced(
                compacted, active, in_flight, compacted_limit
            ):
                latest = self.manifests.update(lambda m: m, base=latest, force=True)
                self._barrier_at = compacted_limit
                stats.latest_manifest_id = latest.id
                pinned, active = self._read_active(latest, now_s, stats)
            else:
                compacted_limit = self._barrier_at  # nothing to delete: no barrier, no deletes
        # The WAL boundary moves now and its WAL SSTs go last: the lease it must outlive
        # (slatedb_core.meta.lease) runs while the other kinds are collected.
        wal_doomed = [] if active is None else self._advance_wal_boundary(wal, active, now_s, stats)
        try:
            self._collect_manifests(entries, latest.id, pinned, now_s, stats)
            if active is not None:
                held = latest.manifest.our_compactor_epoch != latest.manifest.compactor_epoch
                record = read_latest_state(self.store, self.path) if compactions and held else None
                compacted_limit = min(compacted_limit, slatedb_cutoff_ms(latest.manifest, record))
                self._collect_compacted(compacted, active, in_flight, now_s, stats, compacted_limit)
            self._collect_compactions(compactions, now_s, stats)
        except Exception as e:
            # M alone decided the WAL SSTs: a step failing every pass must not stop their
            # collection; unless the store is not what we think it is (gc/service.py)
            if not isinstance(e, BoundaryMissing):
                self._delete_wal(wal_doomed, stats)
            raise
        self._delete_wal(wal_doomed, stats)
        if active is not None:
            # a separate WAL store's temporary objects are not the main store's to collect
            listed = compacted if self.wal.where.separate is not None else [*wal, *compacted]
            self._collect_two_phase(latest.id, pinned, active, listed, now_s, stats)
            if latest.manifest.external_dbs and latest.manifest.initialized:
                self._detach(active, stats)

    def _check_wal_present(self, m: Manifest, listing: Sequence[ObjectMeta]) -> None:
        """Before anything is written: the WAL of ``m`` (the latest manifest) is where this pass
        looks (``WalStoreMissing`` otherwise, SlateDB RFC 0009); step 1's LIST answers. That
        LIST precedes the manifest read, so a writer that opened or flushed in between can make
        it look missing: only a second LIST, made after ``m`` was read, decides."""
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

    def _unreferenced(
        self,
        listing: Sequence[ObjectMeta],
        active: Sequence[Manifest],
        in_flight: set[ULID],
        limit: int,
    ) -> list[ObjectMeta]:
        """The listed SSTs at or behind ``limit`` that none of ``active`` references and no
        compaction has in flight. If there are any, this pass may delete something, so it needs
        a barrier first; step 7 deletes those past ``min_age``."""
        live = set(in_flight).union(*(referenced(m) for m in active))
        ids = ((self._parse_sst(meta.path), meta) for meta in listing)
        return [m for i, m in ids if i is not None and i not in live and i.milliseconds <= limit]

    def _sweep_tombstone(self, stats: GcStats) -> None:
        """A path without manifests: if it holds a destroyed database's tombstone, delete what a
        writer that stalled through the destroy may have left (slatedb_core.lifecycle.destroy)."""
        if not self.manifests.is_tombstone():
            return
        stats.destroyed = True
        n, size = delete_database_objects(
            self.manifests, concurrency=self._delete_concurrency, wal=self.wal.where
        )
        stats.database_objects.deleted += n
        stats.database_objects.bytes_freed += size

    # ---- destroyed databases and clones (RFC 0004, GC steps 2 and 8) -----------------------
    def _destroyed(self, latest: StoredManifest, now_s: float, stats: GcStats) -> None:
        """Step 2: delete a soft-destroyed database once its grace period is over, no checkpoint
        is active and no SlateDB actor (which does not know it is destroyed) used it since. A
        destroyed database only admits (clones' final) checkpoints derived from an active one."""
        stats.destroyed = True
        m = latest.manifest
        assert m.destroyed_at_s is not None
        due = m.destroyed_at_s + self.options.db_delete_grace.total_seconds()
        if now_s < due:
            log.debug("gc %r: destroyed; deletable after %s", self.path, due)
            return
        if any(not c.is_expired(now_s) for c in m.checkpoints):
            log.info("gc %r: destroyed, but checkpoints are still active", self.path)
            return
        if (m.our_writer_epoch, m.our_compactor_epoch) != (m.writer_epoch, m.compactor_epoch):
            log.warning("gc %r: destroyed, but a SlateDB actor used it since: kept", self.path)
            return
        stats.external_checkpoints_released += release_external_checkpoints(
            self.store, self.path, m
        )
        n, size = delete_database_objects(
            self.manifests, concurrency=self._delete_concurrency, wal=self.wal.where
        )
        stats.database_objects.deleted += n
        stats.database_objects.bytes_freed += size
        stats.database_deleted = True

    def _detach(self, active: Sequence[Manifest], stats: GcStats) -> None:
        """Step 8: an external database none of M references any SST of is no longer needed:
        release its final checkpoint, then drop the entry (checkpoint first, so a crash in
        between leaves an entry whose checkpoint is already gone, which the next pass finishes).
        """

        def key(e: ExternalDb) -> tuple[str, uuid.UUID]:
            return e.path, e.source_checkpoint_id

        used = {key(e) for m in active for e in m.external_dbs if e.sst_ids}
        done = [e for e in active[0].external_dbs if key(e) not in used]
        if not done:
            return
        released = 0
        for entry in done:
            released += release_external_checkpoints(
                self.store, self.path, dataclasses.replace(active[0], external_dbs=(entry,))
            )
        gone = {key(e) for e in done}

        def change(m: Manifest) -> Manifest | None:
            if m.destroyed_at_s is not None:
                return None
            keep = tuple(e for e in m.external_dbs if key(e) not in gone or e.sst_ids)
            if len(keep) == len(m.external_dbs):
                return None
            return dataclasses.replace(m, external_dbs=keep)

        stored = self.manifests.update(change)
        stats.latest_manifest_id = stored.id
        stats.external_checkpoints_released += released
        stats.detached = tuple(e.path for e in done)
        log.info("gc %r: detached from %s", self.path, ", ".join(stats.detached))

    def _read_listed_latest(self, entries: Sequence[SequencedEntry]) -> StoredManifest:
        """The listing already names the latest; one GET instead of the pointer lookup's three.
        If it vanished, a newer one exists and a concurrent GC collected it: look it up."""
        try:
            return self.manifests.read(entries[-1].id)
        except ObjectNotFound:
            return self.manifests.read_latest()

    def _remove_expired_checkpoints(
        self, latest: StoredManifest, now_s: float, stats: GcStats
    ) -> StoredManifest:
        if not any(c.is_expired(now_s) for c in latest.manifest.checkpoints):
            return latest
        change = expire_change(now_s)
        stored = self.manifests.update(change, base=latest)
        stats.expired_checkpoints_removed = change.removed
        return stored

    def _read_active(
        self, latest: StoredManifest, now_s: float, stats: GcStats
    ) -> tuple[set[int], Active]:
        """The ids unexpired checkpoints pin, and M of the module docstring (None if a pinned
        manifest is unreadable: the live set is unknown, no WAL or compacted SST may go)."""
        pinned = {c.manifest_id for c in latest.manifest.checkpoints if not c.is_expired(now_s)}
        return pinned, self._read_pinned(latest, pinned, stats)

    def _read_pinned(self, latest: StoredManifest, pinned: set[int], stats: GcStats) -> Active:
        active = [latest.manifest]
        for manifest_id in sorted(pinned - {latest.id}):
            try:
                active.append(self.manifests.read(manifest_id).manifest)
            except ObjectNotFound:
                stats.data_gc_skipped = f"checkpointed manifest {manifest_id} is missing"
                log.error("gc %r: %s; no WAL or SST deleted", self.path, stats.data_gc_skipped)
                return None
        return active

    # ---- sequenced namespaces --------------------------------------------------------------
    def _delete_entries(self, into: KindStats) -> Callable[[Sequence[SequencedEntry]], None]:
        return lambda doomed: self._delete([(e.path, e.size) for e in doomed], into)

    def _collect_manifests(
        self,
        entries: Sequence[SequencedEntry],
        latest_id: int,
        pinned: set[int],
        now_s: float,
        stats: GcStats,
    ) -> None:
        # The listed latest stops being the latest once this pass committed a newer manifest
        # (checkpoint removal); it can then go in this same pass.
        latest_id = max(latest_id, entries[-1].id)
        boundary = self.manifests.seq.boundary
        durable = collect_old_versions(
            boundary,
            entries,
            latest_id,
            min_age_s=self._min_age_s("manifest"),
            now_s=now_s,
            delete=self._delete_entries(stats.manifest),
            keep=pinned,
        )
        stats.manifest_boundary = boundary.read() if durable is None else durable

    def _collect_compactions(
        self, entries: Sequence[SequencedEntry], now_s: float, stats: GcStats
    ) -> None:
        if not entries:
            return  # no compactor has run: no boundary to read or move
        boundary = self.compactions.boundary
        durable = collect_old_versions(
            boundary,
            entries,
            entries[-1].id,
            min_age_s=self._min_age_s("compactions"),
            now_s=now_s,
            delete=self._delete_entries(stats.compactions),
        )
        stats.compactions_boundary = boundary.read() if durable is None else durable

    # ---- data ------------------------------------------------------------------------------
    def _advance_wal_boundary(
        self,
        listing: Sequence[ObjectMeta],
        active: Sequence[Manifest],
        now_s: float,
        stats: GcStats,
    ) -> list[tuple[int, ObjectMeta]]:
        """Step 6's first half: durably move ``gc/wal.boundary`` over the WAL SSTs this pass may
        delete; returns them by id (none: no request, so a quiet database pays for no GET). They
        may only be deleted once the boundary's lease has passed: :meth:`_delete_wal`, after the
        other kinds are collected (or failed)."""
        floor = min(m.replay_after_wal_id for m in active)
        min_age = self._min_age_s("wal")
        parsed = ((self.wal.parse(meta.path), meta) for meta in listing)
        old = [
            (i, meta)
            for i, meta in parsed
            if i is not None and i < floor and _age_s(meta.last_modified, now_s) >= min_age
        ]
        if not old:
            return []
        old.sort(key=lambda item: item[0])
        boundary = self.wal_boundary.advance(old[-1][0])
        stats.wal_boundary = boundary
        return [(i, m) for i, m in old if i <= boundary]

    def _delete_wal(self, doomed: Sequence[tuple[int, ObjectMeta]], stats: GcStats) -> None:
        """Step 6's second half, once the boundary's lease has passed (slatedb_core.meta.lease)."""
        if doomed:
            self.wal_boundary.wait_settled(doomed[-1][0])
            self._delete([(m.path, m.size) for _, m in doomed], stats.wal, self.wal.store)

    def _advance_compacted_boundary(self, listing: Sequence[ObjectMeta], now_s: float) -> int:
        """Move ``gc/compacted.boundary`` (ULID milliseconds) up to the newest listed SST old
        enough to be a deletion candidate; returns the durable value. No write when nothing new
        is old enough, so a quiet database costs nothing here."""
        min_age = self._min_age_s("compacted")
        now_ms = int(now_s * 1000)
        target = None
        for meta in listing:
            sst_id = self._parse_sst(meta.path)
            if sst_id is not None and _age_s(meta.last_modified, now_s) >= min_age:
                ms = sst_id.milliseconds
                if ms > now_ms:
                    # A ULID from the future (a stray object, a skewed clock): covering it would
                    # push the boundary past every id a writer can make, and it never moves back.
                    log.warning(
                        "GC of %r: %s has a future ULID; not covering it", self.path, meta.path
                    )
                    continue
                target = ms if target is None else max(target, ms)
        if target is None or target <= self.compacted_boundary.cached:
            return self.compacted_boundary.cached
        return self.compacted_boundary.advance(target)

    def _collect_compacted(
        self,
        listing: Sequence[ObjectMeta],
        active: Sequence[Manifest],
        in_flight: set[ULID],
        now_s: float,
        stats: GcStats,
        limit: int,
    ) -> None:
        min_age = self._min_age_s("compacted")
        unreferenced = self._unreferenced(listing, active, in_flight, limit)
        doomed = [m for m in unreferenced if _age_s(m.last_modified, now_s) >= min_age]
        self._delete([(m.path, m.size) for m in doomed], stats.compacted)

    def _parse_sst(self, path: str) -> ULID | None:
        """The id of ``<db>/compacted/<ULID>.sst``; None for anything else, which GC leaves be."""
        prefix = self.compacted_dir + "/"
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

    def _collect_two_phase(
        self,
        latest_id: int,
        pinned: set[int],
        active: Sequence[Manifest],
        listed: Sequence[ObjectMeta],
        now_s: float,
        stats: GcStats,
    ) -> None:
        """SlateDB RFC 0001 "Transactional Store Deletion", when the store is two-phase CAS: the intents
        of manifests at or behind the manifest boundary that nothing pins, of WAL SSTs below the
        replay point and at or behind the WAL boundary this process last saw; orphaned
        temporary objects (:func:`slatedb_core.gc.twophase.collect_garbage`)."""
        two_phase = two_phase_of(self.store)
        if two_phase is None:
            return
        window = GcWindow(
            manifest_boundary=stats.manifest_boundary or 0,
            keep_manifests=pinned | {latest_id},
            wal_boundary=self.wal_boundary.settled(),
            wal_floor=min(m.replay_after_wal_id for m in active),
            listed=listed,
            now_s=now_s,
        )
        stats.two_phase = collect_two_phase_garbage(two_phase, self.path, window)

    # ---- deleting --------------------------------------------------------------------------
    def _delete(
        self, doomed: Sequence[tuple[str, int]], into: KindStats, store: ObjectStore | None = None
    ) -> None:
        """Delete everything in ``doomed`` (from ``store``, the main store by default); a failed
        delete is counted and left for the next pass (its object stays eligible), so one bad
        request does not stop the rest."""
        target = self.store if store is None else store

        def one(item: tuple[str, int]) -> tuple[int, StoreError | None]:
            path, size = item
            try:
                target.delete(path)
            except StoreError as e:
                log.warning("gc %r: could not delete %s: %s", self.path, path, e)
                return size, e
            return size, None

        if len(doomed) <= 1 or self._delete_concurrency == 1:
            results = [one(item) for item in doomed]
        else:
            workers = min(self._delete_concurrency, len(doomed))
            with ThreadPoolExecutor(workers, thread_name_prefix="slatedb-gc-delete") as pool:
                results = list(pool.map(one, doomed))
        for size, err in results:
            if err is None:
                into.deleted += 1
                into.bytes_freed += size
            else:
                into.failed += 1
