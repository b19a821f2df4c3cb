"""``DbReader``: a read-only client of a database, usually in another process than its writer
(seed 003 "Readers", seed 001 "Reader Protocol"). It takes no lock of the writer; all it shares
with the writer is the object store.

What a reader serves is always one *prefix of the write history*::

    L0 views + sorted runs of one manifest M   +   WAL SSTs (M.replay_after_wal_id, N], no gaps

Everything up to ``replay_after_wal_id`` is in M's SSTs; the WAL SSTs after it are replayed in id
order into immutable in-memory tables (:class:`~slatedb_core.memtable.ImmutableMemtable`, a new
one per group of whole WAL SSTs, size-tiered up to ``max_memtable_bytes``, see
:class:`~slatedb_core.reader_wal._WalTables`), so reads go through the writer's own
:class:`~slatedb_core.dbstate.DbState` with an empty, frozen active memtable. WAL SSTs are only
ever taken in unbroken id order: with a gap the reader waits for it to fill (seed 001 "Parallel
Writes"), since serving SST n+1 without n would not be a prefix.

Modes (:class:`~slatedb_core.options.ReaderMode`):

* ``CHECKPOINT``: the manifest a given checkpoint pins, plus the WAL SSTs that manifest names:
  ``(replay_after_wal_id, wal_id_last_seen]``. ``wal_id_last_seen`` is what a reader wrote when it
  established that checkpoint; for checkpoints made otherwise it is stale or 0, and then the range
  is short or empty and the reader serves L0 + sorted runs (plus that older WAL prefix). Replaying
  every WAL SST present instead would mix in writes made after the checkpoint. Never refreshed,
  never writes.
* ``MANAGED``: at open, read the latest manifest V, list the WAL for the last contiguous id N,
  and commit V+1 with a new checkpoint (pinning V+1, expiring after ``checkpoint_lifetime``) and
  ``wal_id_last_seen = N`` in one update; then replay ``(replay_after_wal_id, N]``. A poll thread
  re-establishes the checkpoint whenever the latest L0/sorted-run set differs from the pinned one
  (new checkpoint and deletion of the old one in one update), otherwise refreshes the expiry once
  less than half the lifetime is left, and replays new WAL SSTs. ``close()`` deletes the
  checkpoint.
* ``FOLLOW_LATEST``: the same following without any checkpoint, so the reader never writes (read
  only credentials, many readers). Its SSTs are unprotected from GC; see "missing SSTs" below.

Re-establishing drops the in-memory tables of WAL SSTs that are now in L0. A table that spans the
new ``replay_after_wal_id`` keeps only entries with a seq above the largest seq of the WAL SSTs it
drops: a writer hands out seqs in WAL order, and an entry of a dropped WAL SST must not shadow a
newer value that reached L0 another way (a bulk ingest puts its rows straight into L0).

Scans hold their checkpoint: when the checkpoint is re-established while a scan of the old state is
still open, the old checkpoint is kept (and refreshed) until the scan finishes, and deleted by the
next poll after that (seed 003: "removes the previous checkpoint once any ongoing reads have
completed"). Point reads are too short to be worth a reference.

Missing SSTs: a read that finds an SST gone (``ObjectNotFound``: GC removed it after compaction)
reloads the latest manifest (MANAGED: re-establishes) and retries once; a scan resumes after the last
key it returned, on the newer state (so such a scan is not one point-in-time view: each key still
comes once, in order, from a state at least as new as the one the scan began on). In CHECKPOINT
mode, or when the retry fails too, the read raises :class:`SstMissing` rather than answer from an
incomplete state.

Threading: one lock (``_refresh_lock``) serialises everything that changes the reader's state (the
poll thread, :meth:`DbReader.refresh`, recovery from a missing SST, close). What readers share is
an immutable snapshot, a :class:`_View`, swapped in as one reference under that lock; nothing a
view reaches is ever changed afterwards (replay builds new tables, it never adds to a published
one). A read (``get``, ``get_many``, ``scan``, ``scan_arrow``) takes no lock: it takes the view
published last once, at its start, and reads only from it, so it sees a prefix of the write
history with every write batch whole, however replay interleaves with it. (Until 2026-11 the
active replay table was shared with the published state and grew in place: a ``get_many``
running across a replay saw half of a write batch.)
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import TypeVar

import pyarrow as pa
from ulid import ULID

from slatedb_core.db import KV_SCHEMA
from slatedb_core.dbstate import DbState, SstHandle, build_handles
from slatedb_core.errors import (
    CheckpointNotFound,
    DatabaseNotFound,
    InvalidArgument,
    ObjectNotFound,
    SlateDBError,
)
from slatedb_core.iterators import iter_rows
from slatedb_core.manifest.store import ManifestStore, StoredManifest
from slatedb_core.options import DbReaderOptions, ReaderMode
from slatedb_core.sst import BlockCache
from slatedb_core.store.objectstore import ObjectStore, validate_relative_path
from slatedb_core.wal import WalLog

log = logging.getLogger(__name__)

T = TypeVar("T")

_RELOAD_ATTEMPTS = 5  # WAL vanishing between manifest read and WAL read means the manifest moved
_scan_tokens = itertools.count(1)


from slatedb_core.reader_types import (  # noqa: E402
    ReaderClosed,
    ReaderStats,
    SstMissing,
    _as_key,
    _check_live,
    _CheckpointLost,
    _Pin,
    _sst_set,
    _View,
    drop_change,
    pin_change,
    refresh_change,
)
from slatedb_core.reader_wal import (  # noqa: E402
    NO_MEMTABLE,
    _contiguous,
    _fetch_wal,
    _WalTables,
)


class DbReader:
    """A read-only view of a database; see the module docstring. Use :meth:`open`; thread-safe."""

    def __init__(
        self,
        path: str,
        store: ObjectStore,
        mode: ReaderMode,
        options: DbReaderOptions,
        checkpoint: uuid.UUID | None,
    ) -> None:
        validate_relative_path(path, what="database path")
        self.path = path
        self.store = store
        self.options = options
        self._mode = mode
        self._given_checkpoint = checkpoint
        self._manifests = ManifestStore(store, path)
        self._wal = WalLog(store, path)
        self._cache = BlockCache(options.block_cache_bytes) if options.block_cache_bytes else None
        self._handles: dict[tuple[ULID, ULID], SstHandle] = {}
        self._tables = _WalTables(options.max_memtable_bytes)
        self._view: _View | None = None
        self._pin: _Pin | None = None  # MANAGED: the checkpoint of the current state
        self._retired: list[_Pin] = []  # MANAGED: older checkpoints kept for open scans
        self._latest_seen = 0  # id of the newest manifest looked at
        self._refresh_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._last_poll_error: str | None = None

    # ---- opening ---------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: str,
        store: ObjectStore,
        checkpoint: uuid.UUID | None = None,
        options: DbReaderOptions | None = None,
    ) -> DbReader:
        """Open a reader. Raises DatabaseNotFound / DatabaseNotInitialized / DatabaseDestroyed
        (MANAGED, FOLLOW_LATEST), CheckpointNotFound (CHECKPOINT) or SstMissing."""
        options = options or DbReaderOptions()
        if checkpoint is not None and not isinstance(checkpoint, uuid.UUID):
            raise InvalidArgument(
                f"checkpoint must be a uuid.UUID, got {type(checkpoint).__name__}"
            )
        mode = options.mode or (ReaderMode.MANAGED if checkpoint is None else ReaderMode.CHECKPOINT)
        if mode is ReaderMode.CHECKPOINT and checkpoint is None:
            raise InvalidArgument("ReaderMode.CHECKPOINT needs the id of a checkpoint")
        if mode is not ReaderMode.CHECKPOINT and checkpoint is not None:
            raise InvalidArgument(f"a checkpoint id was given but the mode is {mode.name}")
        reader = cls(path, store, mode, options, checkpoint)
        with reader._refresh_lock:
            if mode is ReaderMode.CHECKPOINT:
                assert checkpoint is not None
                reader._open_checkpoint(checkpoint)
            elif mode is ReaderMode.MANAGED:
                try:
                    reader._establish()
                except BaseException:
                    try:
                        reader._drop_checkpoints()
                    except SlateDBError as e:  # it expires with its lifetime anyway
                        log.warning("reader of %r: could not delete its checkpoint: %s", path, e)
                    raise
            else:
                reader._follow()
        if mode is not ReaderMode.CHECKPOINT:
            reader._start()
        return reader

    def _open_checkpoint(self, checkpoint_id: uuid.UUID) -> None:
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
            raise SstMissing(e.path, f"WAL SST pinned by checkpoint {checkpoint_id}") from e

    def _start(self) -> None:
        self._thread = threading.Thread(
            target=self._poll_loop, name=f"slatedb-reader-{self.path}", daemon=True
        )
        self._thread.start()

    # ---- state -----------------------------------------------------------------------------
    @property
    def _current(self) -> _View:
        view = self._view
        assert view is not None, "a DbReader is only handed out once opened"
        return view

    def _install(self, stored: StoredManifest) -> None:
        """Make ``stored`` the manifest served: new SST handles, WAL tables now in L0 dropped."""
        m = stored.manifest
        self._tables.purge(m.replay_after_wal_id, m.last_l0_seq)
        l0, runs, self._handles = build_handles(
            self.store, self.path, stored.manifest, self._cache, self._handles
        )
        t = self._tables
        state = DbState(stored, NO_MEMTABLE, t.imms(), l0, runs)
        self._view = _View(state, self._pin, t.last_wal_id)

    def _republish(self, stored: StoredManifest | None = None) -> None:
        """Publish the current tables (and optionally a manifest with the same SST set)."""
        view = self._current
        t = self._tables
        state = dataclasses.replace(
            view.state, manifest=stored or view.state.manifest, imm=t.imms()
        )
        self._view = _View(state, self._pin, t.last_wal_id)

    def _replay(self, ids: Sequence[int]) -> None:
        """Apply WAL SSTs (contiguous, after the last applied); ObjectNotFound if one is gone,
        after applying those before it. SSTs are applied in groups of about ``max_bytes``, each
        made visible in one step (a new table in a newly published state)."""
        max_bytes = self._tables.max_bytes
        group: list[tuple[int, pa.RecordBatch]] = []
        size = 0
        try:
            for wal_id, entries in _fetch_wal(self._wal, ids):
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

    def _replay_new_wal(self) -> bool:
        """Poll the WAL directory; False when an SST vanished (its manifest moved on)."""
        after = self._tables.last_wal_id
        ids = _contiguous(self._wal.list_ids(after=after), after)
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
    def _follow(self, latest: StoredManifest | None = None) -> None:
        """Serve ``latest`` (or the latest manifest) and the WAL after it."""
        for _ in range(_RELOAD_ATTEMPTS):
            if latest is None:
                latest = self._manifests.read_latest()
                self._latest_seen = latest.id
            _check_live(self.path, latest.manifest)
            self._follow_to(latest)
            if self._replay_new_wal():
                return
            latest = None  # a WAL SST went into L0 and was collected: look again
        raise SstMissing(
            self._wal.dir, f"WAL SSTs kept disappearing over {_RELOAD_ATTEMPTS} manifest reloads"
        )

    def _follow_to(self, latest: StoredManifest) -> None:
        view = self._view
        if view is None or _sst_set(latest.manifest) != _sst_set(view.state.manifest.manifest):
            self._install(latest)
        else:
            self._republish(latest)

    def _poll_follow(self) -> None:
        latest = self._read_latest_if_changed()
        if latest is not None:
            m = latest.manifest
            if m.destroyed_at_s is not None or not m.initialized:
                log.warning("reader of %r: database destroyed or uninitialized", self.path)
            self._follow_to(latest)
        if not self._replay_new_wal():
            self._follow()

    # ---- MANAGED ---------------------------------------------------------------------------
    def _pins(self) -> list[_Pin]:
        return [p for p in (self._pin, *self._retired) if p is not None]

    def _establish(self, base: StoredManifest | None = None) -> None:
        """Seed 003 "Establishing the Checkpoint", also used to re-establish it."""
        for _ in range(_RELOAD_ATTEMPTS):
            if base is None:
                base = self._manifests.read_latest()
            _check_live(self.path, base.manifest)
            after = base.manifest.replay_after_wal_id
            listed = _contiguous(self._wal.list_ids(after=after), after)
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
        expire = None if lifetime is None else math.ceil(now + lifetime.total_seconds())
        new_id = uuid.uuid4()
        old = self._pins()

        drop = {p.id for p in old if not p.scans}
        change = pin_change(self.path, new_id, int(now), expire, drop, last_seen)
        stored = self._manifests.update_at(change, base=base)
        self._latest_seen = stored.id
        self._retired = [p for p in old if stored.manifest.checkpoint(p.id) is not None]
        self._pin = _Pin(new_id, expire)
        return stored

    def _maintain(self) -> None:
        """Refresh expiries with less than half the lifetime left; delete retired checkpoints
        whose scans have finished. Raises _CheckpointLost."""
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
        expire = None if lifetime is None else math.ceil(now + lifetime.total_seconds())
        assert self._pin is not None
        ours = self._pin.id

        change = refresh_change(ours, done, stale, expire)
        stored = self._manifests.update_at(change)
        self._latest_seen = stored.id
        for p in self._pins():
            c = stored.manifest.checkpoint(p.id)
            if c is not None:
                p.expire_time_s = c.expire_time_s
        self._retired = [p for p in self._retired if p.id not in done]

    def _poll_managed(self) -> None:
        latest = self._read_latest_if_changed()
        if latest is not None:
            pinned = self._current.state.manifest.manifest
            if (
                self._pin is None
                or latest.manifest.checkpoint(self._pin.id) is None
                or _sst_set(latest.manifest) != _sst_set(pinned)
            ):
                self._establish(latest)
                return
        try:
            self._maintain()
        except _CheckpointLost:
            self._establish()
            return
        if not self._replay_new_wal():
            self._establish()

    def _drop_checkpoints(self) -> None:
        """Delete every checkpoint this reader created (close, failed open)."""
        doomed = {p.id for p in self._pins()}
        self._pin = None
        self._retired = []
        if not doomed:
            return

        change = drop_change(doomed)
        self._manifests.update_at(change)

    # ---- polling ---------------------------------------------------------------------------
    def _poll(self) -> None:
        if self._mode is ReaderMode.MANAGED:
            self._poll_managed()
        elif self._mode is ReaderMode.FOLLOW_LATEST:
            self._poll_follow()

    def _poll_loop(self) -> None:
        interval = self.options.manifest_poll_interval.total_seconds()
        while not self._stop.wait(interval):
            try:
                with self._refresh_lock:
                    if self._closed:
                        return
                    self._poll()
                self._last_poll_error = None
            except SlateDBError as e:
                text = f"{type(e).__name__}: {e}"
                if text != self._last_poll_error:  # once per distinct failure, not every poll
                    log.warning(
                        "reader of %r: poll failed, serving the last state: %s", self.path, text
                    )
                self._last_poll_error = text
            except Exception:
                log.exception("reader of %r: poll failed unexpectedly", self.path)

    def refresh(self) -> None:
        """Poll now instead of waiting for the next poll (a no-op in CHECKPOINT mode)."""
        with self._refresh_lock:
            self._check_open()
            self._poll()

    def _recover(self, failed: _View) -> _View:
        """After ``failed`` lost an SST: a state built from the latest manifest."""
        with self._refresh_lock:
            self._check_open()
            if self._view is failed:
                if self._mode is ReaderMode.MANAGED:
                    self._establish()
                else:
                    self._follow()
            return self._current

    # ---- reads -----------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ReaderClosed(f"reader of {self.path!r} is closed")

    def _read(self, fn: Callable[[DbState], T]) -> T:
        self._check_open()
        view = self._current
        try:
            return fn(view.state)
        except ObjectNotFound as e:
            if self._mode is ReaderMode.CHECKPOINT:
                raise SstMissing(e.path, f"checkpoint {self._given_checkpoint}") from e
            missing = e
        try:
            view = self._recover(view)
            return fn(view.state)
        except ObjectNotFound as e:
            raise SstMissing(e.path, "still missing after reloading the manifest") from e
        except ReaderClosed:
            raise
        except SlateDBError as e:
            raise SstMissing(missing.path, f"reloading the manifest failed: {e}") from e

    def get(self, key: bytes) -> bytes | None:
        """The value of ``key`` in the reader's state, or None."""
        k = _as_key(key)
        return self._read(lambda s: s.get(k))

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """Values of ``keys``, all from one state."""
        ks = [_as_key(k) for k in keys]
        return self._read(lambda s: [s.get(k) for k in ks])

    def _check_range(self, start: bytes | None, end: bytes | None) -> None:
        self._check_open()
        for name, b in (("start", start), ("end", end)):
            if b is not None and not isinstance(b, bytes):
                raise InvalidArgument(f"scan {name} must be bytes or None")
        if start is not None and end is not None and end < start:
            raise InvalidArgument(f"scan end {end!r} is before start {start!r}")

    def scan(
        self, start: bytes | None = None, end: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs with ``start <= key < end`` in key order (None = unbounded), from
        the state current when iteration begins."""
        self._check_range(start, end)
        return iter_rows(self._scan_batches(start, end, 65536))

    def scan_arrow(
        self, start: bytes | None = None, end: bytes | None = None, batch_size: int = 65536
    ) -> pa.RecordBatchReader:
        """The same as :meth:`scan`, as Arrow record batches of (key, value)."""
        self._check_range(start, end)
        if batch_size <= 0:
            raise InvalidArgument("batch_size must be > 0")
        return pa.RecordBatchReader.from_batches(
            KV_SCHEMA,
            (
                pa.RecordBatch.from_arrays([b.column(0), b.column(3)], schema=KV_SCHEMA)
                for b in self._scan_batches(start, end, batch_size)
            ),
        )

    def _scan_batches(
        self, start: bytes | None, end: bytes | None, batch_size: int
    ) -> Iterator[pa.RecordBatch]:
        """Live ENTRY_SCHEMA batches; holds the state's checkpoint until closed or exhausted."""
        if start is not None and end is not None and start >= end:
            return
        token = next(_scan_tokens)
        view = self._current
        if view.pin is not None:
            view.pin.scans.add(token)
        try:
            resume = start
            retried = False
            while True:
                try:
                    for b in view.state.scan(resume, end, batch_size=batch_size):
                        if b.num_rows:
                            resume = b.column(0)[b.num_rows - 1].as_py() + b"\x00"
                            yield b
                    return
                except ObjectNotFound as e:
                    if self._mode is ReaderMode.CHECKPOINT:
                        raise SstMissing(e.path, f"checkpoint {self._given_checkpoint}") from e
                    if retried:
                        raise SstMissing(
                            e.path, "still missing after reloading the manifest"
                        ) from e
                    retried = True
                    if resume is not None and end is not None and resume >= end:
                        return
                    try:
                        fresh = self._recover(view)
                    except ReaderClosed:
                        raise
                    except SlateDBError as err:
                        raise SstMissing(e.path, f"reloading the manifest failed: {err}") from err
                    if fresh.pin is not None:
                        fresh.pin.scans.add(token)
                    if view.pin is not None:
                        view.pin.scans.discard(token)
                    view = fresh
        finally:
            if view.pin is not None:
                view.pin.scans.discard(token)

    # ---- introspection ---------------------------------------------------------------------
    @property
    def mode(self) -> ReaderMode:
        return self._mode

    @property
    def manifest_id(self) -> int:
        """The manifest the reader's SSTs come from (MANAGED: the one its checkpoint pins)."""
        return self._current.state.manifest.id

    @property
    def checkpoint_id(self) -> uuid.UUID | None:
        """The checkpoint read (CHECKPOINT) or held (MANAGED); None for FOLLOW_LATEST."""
        if self._mode is ReaderMode.CHECKPOINT:
            return self._given_checkpoint
        pin = self._pin
        return None if pin is None else pin.id

    def stats(self) -> ReaderStats:
        """Figures of one published state."""
        view = self._current
        imms = view.state.imm
        return ReaderStats(
            mode=self._mode,
            manifest_id=view.state.manifest.id,
            checkpoint_id=self.checkpoint_id,
            last_wal_id=view.last_wal_id,
            memtables=len(imms),
            memtable_bytes=sum(i.size_bytes for i in imms),
            l0_views=len(view.state.l0),
            sorted_runs=len(view.state.runs),
        )

    # ---- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        """Stop polling and delete the reader's checkpoints (MANAGED). Idempotent. Scans still
        open keep reading, without a checkpoint protecting their SSTs from GC."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=30)
        self._thread = None
        with self._refresh_lock:
            self._drop_checkpoints()

    def __enter__(self) -> DbReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        view = self._view
        mid = None if view is None else view.state.manifest.id
        return f"DbReader({self.path!r}, mode={self._mode.name}, manifest={mid})"


__all__ = ["DbReader", "ReaderClosed", "ReaderStats", "SstMissing"]
