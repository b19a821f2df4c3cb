"""How a :class:`~slatedb_core.reader.reader.DbReader` builds the state it serves and keeps it current
(the protocol is in :mod:`slatedb_core.reader.reader`'s docstring): opening on a checkpoint, following
the latest manifest, establishing and re-establishing the MANAGED checkpoint (and refreshing or
deleting the checkpoints it holds), and replaying the WAL after the manifest's replay point.

:class:`Refresher` owns everything that changes when the state is refreshed and publishes each
new state as one immutable :class:`~slatedb_core.reader.view.View` (``view``). It takes no
lock: the reader calls it only under its ``_refresh_lock``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Sequence

import pyarrow as pa
from ulid import ULID

from slatedb_core.checkpoints import (
    check_live,
    checked_wal_run,
    drop_pins_change,
    expire_time_s,
    extend_pins_change,
    pin_change,
)
from slatedb_core.errors import (
    CheckpointNotFound,
    DatabaseDestroyed,
    DatabaseNotFound,
    ObjectNotFound,
    SstMissing,
)
from slatedb_core.lsm.dbstate import DbState, SstHandle, build_handles
from slatedb_core.lsm.merge_operator import resolve_merge_operator
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore, StoredManifest
from slatedb_core.options import DbReaderOptions
from slatedb_core.reader.view import Pin, View, sst_set
from slatedb_core.reader.wal_tables import NO_MEMTABLE, WalTables, fetch_wal
from slatedb_core.sst import BlockCache
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.wal import WalLog
from slatedb_core.wal.location import WalLocation

log = logging.getLogger(__name__)

_RELOAD_ATTEMPTS = 5  # WAL vanishing between manifest read and WAL read means the manifest moved


class Refresher:
    """The state a reader serves and what keeps it current; see the module docstring."""

    def __init__(self, path: str, store: ObjectStore, options: DbReaderOptions) -> None:
        self.path = path
        self.store = store
        self.options = options
        self._manifests = ManifestStore(store, path)
        # the one store of the WAL objects (SlateDB RFC 0009: maybe a separate one)
        self._wal = WalLog(WalLocation.open(store, options.wal_url), path)
        self._cache = BlockCache(options.block_cache_bytes) if options.block_cache_bytes else None
        self._handles: dict[tuple[ULID, ULID], SstHandle] = {}
        self._tables = WalTables(options.max_memtable_bytes)
        self.view: View | None = None  # the state published last
        self.pin: Pin | None = None  # MANAGED: the checkpoint of the current state
        self._retired: list[Pin] = []  # MANAGED: older checkpoints kept for open scans
        self._latest_seen = 0  # id of the newest manifest looked at

    @property
    def current(self) -> View:
        view = self.view
        assert view is not None, "a DbReader is only handed out once opened"
        return view

    # ---- CHECKPOINT ------------------------------------------------------------------------
    def open_checkpoint(self, checkpoint_id: uuid.UUID) -> None:
        """Serve the manifest ``checkpoint_id`` pins and the WAL SSTs that manifest names."""
        latest = self._manifests.read_latest()
        self._latest_seen = latest.id
        cp = latest.manifest.checkpoint(checkpoint_id)
        if cp is None or cp.is_expired(time.time()):
            raise CheckpointNotFound(checkpoint_id)
        try:
            stored = latest if cp.manifest_id == latest.id else self._manifests.read(cp.manifest_id)
        except ObjectNotFound:
            # GC collects a pinned manifest only once its checkpoint is gone: it expired just now
            again = self._manifests.read_latest().manifest.checkpoint(checkpoint_id)
            if again is None or again.is_expired(time.time()):
                raise CheckpointNotFound(checkpoint_id) from None
            raise
        m = stored.manifest
        self._install(stored)
        ids = range(m.replay_after_wal_id + 1, m.wal_id_last_seen + 1)
        try:
            self._replay(ids)
        except ObjectNotFound as e:
            if e.path == self._wal.path(ids[0]):  # none of them here: the WAL store missing?
                self._wal.check_present(m, self._wal.list_ids(after=m.replay_after_wal_id))
            raise SstMissing(e.path, f"WAL SST pinned by checkpoint {checkpoint_id}") from e

    # ---- state -----------------------------------------------------------------------------
    def _install(self, stored: StoredManifest) -> None:
        """Make ``stored`` the manifest served: new SST handles, WAL tables now in L0 dropped."""
        m = stored.manifest
        self._tables.purge(m.replay_after_wal_id, m.last_l0_seq)
        l0, runs, self._handles = build_handles(
            self.store, self.path, stored.manifest, self._cache, self._handles
        )
        t = self._tables
        op = resolve_merge_operator(self.options.merge_operator)
        state = DbState(stored, NO_MEMTABLE, t.imms(), l0, runs, merge_operator=op)
        self.view = View(state, self.pin, t.last_wal_id)

    def _republish(self, stored: StoredManifest | None = None) -> None:
        """Publish the current tables (and optionally a manifest with the same SST set)."""
        view = self.current
        t = self._tables
        state = dataclasses.replace(
            view.state, manifest=stored or view.state.manifest, imm=t.imms()
        )
        self.view = View(state, self.pin, t.last_wal_id)

    def _replay(self, ids: Sequence[int]) -> None:
        """Apply WAL SSTs (contiguous, after the last applied); ObjectNotFound if one is gone,
        after applying those before it. SSTs are applied in groups of about ``max_bytes``, each
        made visible in one step (a new table in a newly published state)."""
        max_bytes = self._tables.max_bytes
        group: list[tuple[int, pa.RecordBatch]] = []
        size = 0
        try:
            for wal_id, entries in fetch_wal(self._wal, ids):
                if group and size + entries.nbytes > max_bytes:
                    self._apply(group)
                    group, size = [], 0
                group.append((wal_id, entries))
                size += entries.nbytes
        except ObjectNotFound:
            self._apply(group)  # keep the SSTs before the missing one
            raise
        self._apply(group)

    def _apply(self, group: Sequence[tuple[int, pa.RecordBatch]]) -> None:
        if group:
            self._tables.add(group)
            self._republish()

    def _checked_run(self, listed: Sequence[int], after: int, m: Manifest) -> list[int]:
        """The unbroken run of ``listed`` after ``after``, or WalSstMissing for a hole no writer
        can have left (:func:`~slatedb_core.checkpoints.checked_wal_run`, the one check a
        checkpoint's WAL passes too)."""
        return checked_wal_run(
            self._wal, listed, after, m, lambda: self._manifests.read_latest().manifest
        )

    def _replay_new_wal(self, *, at_open: bool = False) -> bool:
        """Poll the WAL directory; False when an SST vanished (its manifest moved on).
        ``at_open``: the first poll after the latest manifest was installed, whose LIST also
        checks that the WAL is in this store (``WalStoreMissing``, SlateDB RFC 0009)."""
        after = self._tables.last_wal_id
        m = self.current.state.manifest.manifest
        if at_open and after == m.replay_after_wal_id:
            listed = self._wal.list_live(m)
        else:
            listed = self._wal.list_ids(after=after)
        ids = self._checked_run(listed, after, m)
        try:
            self._replay(ids)
        except ObjectNotFound:
            return False
        return True

    def _read_latest_if_changed(self) -> StoredManifest | None:
        """The latest manifest, or None when it is the one seen last (2 requests, not 3)."""
        latest_id = self._manifests.latest_id()
        if latest_id is None:
            raise DatabaseNotFound(f"no manifest under {self.path!r} in {self.store.url}")
        if latest_id == self._latest_seen:
            return None
        try:
            stored = self._manifests.read(latest_id)
        except ObjectNotFound:  # superseded and collected meanwhile
            stored = self._manifests.read_latest()
        self._latest_seen = stored.id
        return stored

    # ---- FOLLOW_LATEST ---------------------------------------------------------------------
    def follow(self, latest: StoredManifest | None = None) -> None:
        """Serve ``latest`` (or the latest manifest) and the WAL after it."""
        for _ in range(_RELOAD_ATTEMPTS):
            if latest is None:
                latest = self._manifests.read_latest()
                self._latest_seen = latest.id
            check_live(self.path, latest.manifest)
            self._follow_to(latest)
            if self._replay_new_wal(at_open=True):
                return
            latest = None  # a WAL SST went into L0 and was collected: look again
        raise SstMissing(
            self._wal.dir, f"WAL SSTs kept disappearing over {_RELOAD_ATTEMPTS} manifest reloads"
        )

    def _follow_to(self, latest: StoredManifest) -> None:
        view = self.view
        if view is None or sst_set(latest.manifest) != sst_set(view.state.manifest.manifest):
            self._install(latest)
        else:
            self._republish(latest)

    def poll_follow(self) -> None:
        latest = self._read_latest_if_changed()
        if latest is not None:
            m = latest.manifest
            if m.destroyed_at_s is not None or not m.initialized:
                log.warning("reader of %r: database destroyed or uninitialized", self.path)
            self._follow_to(latest)
        if not self._replay_new_wal():
            self.follow()

    # ---- MANAGED ---------------------------------------------------------------------------
    def _pins(self) -> list[Pin]:
        return [p for p in (self.pin, *self._retired) if p is not None]

    def establish(self, base: StoredManifest | None = None) -> None:
        """SlateDB RFC 0004 "Establishing the Checkpoint", also used to re-establish it."""
        for _ in range(_RELOAD_ATTEMPTS):
            if base is None:
                base = self._manifests.read_latest()
            check_live(self.path, base.manifest)
            after = base.manifest.replay_after_wal_id
            listed = self._checked_run(self._wal.list_live(base.manifest), after, base.manifest)
            stored = self._commit_checkpoint(base, listed[-1] if listed else after)
            self._install(stored)
            try:
                self._replay([i for i in listed if i > self._tables.last_wal_id])
                return
            except ObjectNotFound:
                base = None  # GC won a race against the new pin: establish again
        raise SstMissing(
            self._wal.dir, f"WAL SSTs kept disappearing over {_RELOAD_ATTEMPTS} checkpoints"
        )

    def _commit_checkpoint(self, base: StoredManifest, last_seen: int) -> StoredManifest:
        """One update: our new checkpoint, ``wal_id_last_seen``, and deletion of our older
        checkpoints that no open scan still reads."""
        now = time.time()
        lifetime = self.options.checkpoint_lifetime
        expire = expire_time_s(now, lifetime)
        new_id = uuid.uuid4()
        old = self._pins()

        drop = {p.id for p in old if not p.scans}
        change = pin_change(self.path, new_id, int(now), expire, drop, last_seen)
        stored = self._manifests.update_at(change, base=base)
        self._latest_seen = stored.id
        self._retired = [p for p in old if stored.manifest.checkpoint(p.id) is not None]
        self.pin = Pin(new_id, expire)
        return stored

    def _maintain(self) -> None:
        """Refresh expiries with less than half the lifetime left; delete retired checkpoints
        whose scans have finished. Raises CheckpointNotFound when GC removed our checkpoint, and
        DatabaseDestroyed instead of extending a checkpoint of a soft-destroyed database (SlateDB
        RFC 0004: the GC waits for every checkpoint to expire; the retired ones still go)."""
        lifetime = self.options.checkpoint_lifetime
        now = time.time()
        stale: set[uuid.UUID] = set()
        if lifetime is not None:
            half = lifetime.total_seconds() / 2
            stale = {
                p.id
                for p in self._pins()
                if p.expire_time_s is not None and p.expire_time_s - now < half
            }
        done = {p.id for p in self._retired if not p.scans}
        if not stale and not done:
            return
        expire = expire_time_s(now, lifetime)
        assert self.pin is not None
        ours = self.pin.id

        change = extend_pins_change(ours, done, stale, expire)
        try:
            stored = self._manifests.update_at(change)
        except DatabaseDestroyed:
            if done:
                self._manifests.update_at(drop_pins_change(done))
                self._retired = [p for p in self._retired if p.id not in done]
            raise
        self._latest_seen = stored.id
        for p in self._pins():
            c = stored.manifest.checkpoint(p.id)
            if c is not None:
                p.expire_time_s = c.expire_time_s
        self._retired = [p for p in self._retired if p.id not in done]

    def poll_managed(self) -> None:
        latest = self._read_latest_if_changed()
        if latest is not None:
            # destroyed: say so (DbReader's poll reports it), whether or not the SSTs changed
            check_live(self.path, latest.manifest)
            pinned = self.current.state.manifest.manifest
            if (
                self.pin is None
                or latest.manifest.checkpoint(self.pin.id) is None
                or sst_set(latest.manifest) != sst_set(pinned)
            ):
                self.establish(latest)
                return
        try:
            self._maintain()
        except CheckpointNotFound:  # our checkpoint expired and GC removed it
            self.establish()
            return
        if not self._replay_new_wal():
            self.establish()

    def drop_checkpoints(self) -> None:
        """Delete every checkpoint this reader created (close, failed open); none is left to
        delete when the database itself is gone (destroyed and collected)."""
        doomed = {p.id for p in self._pins()}
        self.pin = None
        self._retired = []
        if not doomed:
            return

        change = drop_pins_change(doomed)
        try:
            self._manifests.update_at(change)
        except DatabaseNotFound:  # DatabaseDeleted included: its checkpoints went with it
            pass
