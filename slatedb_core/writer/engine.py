"""The writer's machinery behind ``Db``: its state and locks, the three background threads, the
WAL flush and dispatch to the parallel WAL window, memtable freeze and L0 flush, and manifest
polling. ``Db`` (in :mod:`slatedb_core.writer.db`) adds the public API.

The steps of the protocol that need no writer state live beside it:

* :mod:`slatedb_core.writer.recovery`: recovery at open (epoch bump, fencing, GC repair, WAL replay),
  run in order by :meth:`WriterEngine._recover`;
* :mod:`slatedb_core.wal.pipeline`: the WAL buffer of a generation and the bookkeeping of which
  generations are durable (:class:`~slatedb_core.wal.pipeline.WalAcks`);
* :mod:`slatedb_core.writer.l0_flush`: the steps of a memtable flush to L0 and the manifest changes it
  commits (run by :meth:`WriterEngine._flush_one`);
* :mod:`slatedb_core.writer.gc_safety`: the writer checkpoint and the post-commit GC check of the
  writer's own SSTs;
* :mod:`slatedb_core.writer.types`: ``DbClosed``, ``BulkIngestStats``, ``KV_SCHEMA`` (re-exported
  here and by :mod:`slatedb_core.writer.db`).

See :mod:`slatedb_core.writer.db` for the write path as a whole.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ulid import ULID

from slatedb_core.checkpoints import writer_checkpoint_change
from slatedb_core.errors import (
    BackgroundThreadDied,
    DatabaseDestroyed,
    DbClosed,
    Fenced,
    SlateDBError,
    StoreError,
    WalEpochConflict,
    WalWindowClosed,
)
from slatedb_core.keys import KeyRange
from slatedb_core.lsm.dbstate import DbState, SstHandle, build_handles
from slatedb_core.lsm.memtable import ImmutableMemtable, Memtable
from slatedb_core.manifest.model import CompactedSst, Manifest, SstInfo
from slatedb_core.manifest.store import FencedManifest, IdChange, ManifestStore, StoredManifest
from slatedb_core.meta.compacted_boundary import compacted_boundary
from slatedb_core.options import DbOptions
from slatedb_core.sst import BlockCache, SstOptions, encode_sst
from slatedb_core.sst.create import write_new_sst
from slatedb_core.store.objectstore import ObjectStore, validate_relative_path
from slatedb_core.wal import WalLog, WalWindow, WalWriter
from slatedb_core.wal.pipeline import WalAcks, WalBuffer
from slatedb_core.writer.gc_safety import NewSsts
from slatedb_core.writer.l0_flush import (
    l0_flush_change,
    replay_point_change,
    resident_bytes,
)
from slatedb_core.writer.recovery import (
    bump_epoch,
    fence_older_writers,
    replay_wal,
)

log = logging.getLogger(__name__)


def _sst_views(m: Manifest) -> tuple[object, ...]:
    return (
        tuple(v.view_id for v in m.l0),
        tuple((r.id, tuple(v.view_id for v in r.views)) for r in m.compacted),
    )


class WriterEngine:
    """State and background work of a writer; not used directly (see ``Db``)."""

    def __init__(self, path: str, store: ObjectStore, options: DbOptions) -> None:
        validate_relative_path(path, what="database path")
        self.path = path
        self.store = store
        self.options = options
        self._sst_options = SstOptions(
            options.block_size, options.bloom_bits_per_key, options.compression
        )
        self._cache = BlockCache(options.block_cache_bytes) if options.block_cache_bytes else None
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._flush_lock = threading.Lock()  # one WAL writer at a time
        self._l0_lock = threading.Lock()  # one memtable flush at a time
        self._error: BaseException | None = None
        self._closed = False
        self._seq = 0
        self._gen = 1  # generation of the current WAL buffer
        self._buf = WalBuffer()
        # sealed generations and which of them are durable (under _lock); parallel WAL writes
        # (max_parallel_writes > 1, see _dispatch_wal) go through _window
        self._acks = WalAcks()
        self._window: WalWindow | None = None
        self._imm_gen: dict[int, int] = {}  # id(ImmutableMemtable) -> last WAL generation
        # id(ImmutableMemtable) -> its uploaded L0 SST, kept until the flush is installed
        self._imm_sst: dict[int, NewSsts] = {}
        # Highest WAL id whose rows are in an L0 SST that is safe from GC (see _flush_one): the
        # replay point never moves past it.
        self._confirmed_wal_id = 0
        self._handles: dict[tuple[ULID, ULID], SstHandle] = {}
        self._wake = threading.Event()
        self._l0_wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._compactor: Any = None
        # hot-path copies of options and of the unflushed-bytes total
        self._max_key = options.max_key_bytes
        self._max_value = options.max_value_bytes
        self._wal_size = options.wal_sst_size_bytes
        self._l0_size = options.l0_sst_size_bytes
        self._max_unflushed = options.max_unflushed_bytes
        self._mem_budget = options.memtable_memory_bytes
        self._imm_bytes = 0
        self._range: KeyRange | None = None  # the manifest's key_range (projected databases)
        self._compacted_boundary = compacted_boundary(store, path)
        self.manifests = ManifestStore(store, path, format_version=options.manifest_format_version)
        self.wal = WalLog(store, path)
        self._fm: FencedManifest
        self._wal_writer: WalWriter
        self._state: DbState

    def _recover(self) -> None:
        """Recovery at open, the steps of :mod:`slatedb_core.writer.recovery` in order."""
        own = self.options.max_parallel_writes
        # 1. bump the writer epoch together with our writer checkpoint (seed 003)
        self._fm = bump_epoch(self.manifests, own)
        epoch = self._fm.epoch
        m = self._fm.stored.manifest
        # 2. fence older writers (seed 001)
        fence_id = fence_older_writers(self._fm, self.manifests, self.wal, self._sst_options)
        # 3. replay every WAL SST after replay_after_wal_id up to our fence. No L0 SST needs a
        #    repair: every commit checked its new SSTs against the GC boundary before naming them
        #    (slatedb_core.writer.gc_safety), so a missing or damaged one is damage, reported by the reads
        #    that need it, never silently dropped.
        memtable = replay_wal(self.path, self.wal, m, fence_id)
        top = memtable.max_seq
        self._seq = max(m.last_l0_seq, top if top is not None else 0)
        self._acks.last_wal_id = fence_id
        self._confirmed_wal_id = m.replay_after_wal_id
        self._wal_writer = WalWriter(self.wal, epoch, fence_id + 1, self._sst_options)
        if own > 1:
            self._window = WalWindow(self._wal_writer, own, name=f"slatedb-wal-{self.path}")
        stored = self._fm.stored
        l0, runs, handles = build_handles(self.store, self.path, stored.manifest, self._cache)
        self._handles = handles
        self._state = DbState(stored, memtable, (), l0, runs)
        self._set_range(stored.manifest)
        if not memtable.is_empty():
            # replayed entries are durable already: they live in WAL SSTs <= fence_id
            self._acks.wal_id_of_gen[0] = fence_id

    def _guarded(self, name: str, loop: Callable[[], None]) -> Callable[[], None]:
        """``loop`` as a thread target that fails the writer with BackgroundThreadDied if it dies
        on an unexpected error: every waiter and every later call raises it, none hangs (issue 19
        item 15). A loop that stops on a protocol error (Fenced) has failed the writer itself. A
        BaseException that is no Exception (a simulated kill -9) is not handled: it ends the
        thread as the process would end."""

        def run() -> None:
            try:
                loop()
            except Exception as e:
                log.exception("%s thread of %r died", name, self.path)
                err = BackgroundThreadDied(f"{name} of {self.path!r}", e)
                err.__cause__ = e
                self._fail(err)

        return run

    def _start(self) -> None:
        if self.options.compactor is not None:
            from slatedb_core.compactor import Compactor

            self._compactor = Compactor(self.path, self.store, self.options.compactor).start()
        for name, target in (
            ("wal-flusher", self._wal_loop),
            ("l0-flusher", self._l0_loop),
            ("manifest-poller", self._poll_loop),
        ):
            t = threading.Thread(
                target=self._guarded(name, target), name=f"slatedb-{name}-{self.path}", daemon=True
            )
            t.start()
            self._threads.append(t)

    # ---- durability ------------------------------------------------------------------------
    @property
    def _durable_gen(self) -> int:
        """Every generation <= this one is in the WAL (read under _lock)."""
        return self._acks.durable_gen

    def _await_durable(self, gen: int) -> None:
        with self._lock:
            while not self._acks.acknowledged(gen, self._error):
                if self._closed and not self._threads:
                    raise DbClosed("database closed before the write became durable")
                self._wake.set()
                self._cv.wait(0.05)

    def _seal_locked(self) -> None:
        if not self._buf.empty():
            self._acks.seal(self._gen, self._buf)
            self._buf = WalBuffer()
            self._gen += 1

    def flush(self) -> None:
        """Write everything buffered to the WAL now and wait until it is durable."""
        self._check_usable()
        self._flush_wal()
        self._check_usable()

    def _flush_wal(self) -> None:
        if self._window is not None:
            since = self._acks.failure_serial
            self._wait_durable_upto(self._dispatch_wal(None, since), since)
            return
        with self._flush_lock:
            with self._lock:
                self._seal_locked()
                pending = list(self._acks.sealed)
            for gen, buf in pending:
                try:
                    wal_id = self._wal_writer.write(buf.to_batch())
                except Fenced as e:
                    self._fail(e)
                    raise
                except StoreError as e:
                    with self._lock:
                        self._acks.write_failed(gen, e)
                        self._cv.notify_all()
                    raise
                with self._lock:
                    self._acks.written(gen, wal_id)
                    self._cv.notify_all()

    # ---- parallel WAL writes (seed 001, "Parallel Writes") ---------------------------------------
    def _dispatch_wal(self, limit: int | None, since: int = 0) -> int:
        """Issue sealed generations to the WAL window in order, one SST each, waiting for room
        in the window before each. ``limit`` None (a flush): everything buffered now, sealed at
        once; returns that last generation. Else (the flusher) at most ``limit`` SSTs, the
        buffer sealed only once the window has room, so writes that arrive while it is full go
        out together. While waiting for room, a create that failed after failure number
        ``since`` is raised (it keeps being retried at its id)."""
        window = self._window
        assert window is not None
        acks = self._acks
        with self._flush_lock:
            with self._lock:
                if limit is None:
                    self._seal_locked()
                target = self._gen - 1
            issued = 0
            while limit is None or issued < limit:
                with self._lock:
                    todo = acks.next_unissued()
                    idle = todo is None and (limit is None or self._buf.empty())
                if idle or (todo is not None and limit is None and todo[0] > target):
                    break
                self._wait_for_room(window, since)
                if todo is None:
                    with self._lock:
                        self._seal_locked()
                        todo = acks.next_unissued()
                    if todo is None:
                        break
                gen, buf = todo
                data = self._wal_writer.encode(buf.to_batch())
                with self._lock:
                    acks.issued.add(gen)
                try:
                    window.submit(data, functools.partial(self._on_wal_done, gen))
                except BaseException:
                    with self._lock:
                        acks.issued.discard(gen)
                    raise
                issued += 1
            return target

    def _wait_for_room(self, window: WalWindow, since: int) -> None:
        while not window.wait_for_room(0.05):
            # a window stalled on a failing create must not hold _flush_lock forever: report
            # the failure (the create keeps being retried at its id)
            with self._lock:
                if self._error is not None:
                    raise self._error
                failure = self._acks.failure(since)
                if failure is not None:
                    raise failure

    def _on_wal_done(self, gen: int, wal_id: int, err: BaseException | None) -> None:
        """A window thread's report on generation ``gen`` at ``wal_id``."""
        final = err is not None and (
            isinstance(err, (Fenced, WalEpochConflict, BackgroundThreadDied))
            or not isinstance(err, SlateDBError)
        )
        with self._lock:
            if err is None:
                self._acks.landed_at(gen, wal_id)
            else:
                self._acks.create_failed(gen, err, final)
            self._cv.notify_all()
        if final:
            assert err is not None
            self._fail(err)

    def _failure_locked(self, since: int, upto: int | None = None) -> BaseException | None:
        """The failure of the oldest generation (<= ``upto``) not landed whose last attempt
        failed after failure number ``since``."""
        return self._acks.failure(since, upto)

    def _wait_durable_upto(self, target: int, since: int = 0) -> None:
        """Wait until every generation <= ``target`` is durable (contiguously in the WAL); raise
        a failure of one of them reported after failure number ``since`` (an older one is being
        retried: its outcome is awaited)."""
        with self._lock:
            while self._acks.durable_gen < target:
                if self._error is not None:
                    raise self._error
                failure = self._acks.failure(since, target)
                if failure is not None:
                    raise failure
                if self._closed and not self._threads:
                    raise DbClosed("database closed before the write became durable")
                self._cv.wait(0.05)

    def _fail(self, err: BaseException) -> None:
        with self._lock:
            if self._error is None:
                self._error = err
                log.error("database %r stops: %s", self.path, err)
            self._cv.notify_all()
        self._stop.set()
        self._wake.set()
        self._l0_wake.set()

    def _wal_loop(self) -> None:
        interval = self.options.flush_interval.total_seconds()
        while not self._stop.is_set():
            self._wake.wait(interval)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                if self._window is not None:
                    self._dispatch_wal(self._window.size, self._acks.failure_serial)
                else:
                    self._flush_wal()
            except WalWindowClosed:
                return
            except (Fenced, WalEpochConflict) as e:
                self._fail(e)  # durable puts waiting on this flusher must not hang
                return
            except SlateDBError as e:
                log.warning("WAL flush of %r failed, retrying: %s", self.path, e)
                time.sleep(min(interval, 0.5))

    # ---- memtable flush --------------------------------------------------------------------
    def _freeze_locked(self) -> ImmutableMemtable | None:
        state = self._state
        if state.memtable.is_empty():
            return None
        imm = state.memtable.freeze()
        self._seal_locked()  # the frozen memtable's last writes are in generation _gen - 1
        self._imm_gen[id(imm)] = self._gen - 1
        self._state = dataclasses.replace(state, memtable=Memtable(), imm=(imm, *state.imm))
        self._imm_bytes += resident_bytes(imm)
        self._l0_wake.set()
        return imm

    def flush_memtable(self) -> None:
        """Flush the memtable to an L0 SST and record it in the manifest now, with the WAL
        replay point past its rows."""
        self._check_usable()
        with self._lock:
            self._freeze_locked()
        with self._l0_lock:
            self._flush_imms_locked()
            self._advance_replay_point()
        self._check_usable()

    def _advance_replay_point(self) -> None:
        """Commit the replay point up to the last WAL id whose L0 SST is committed (a memtable
        flush's own commit carries only the previous flushes', see slatedb_core.writer.l0_flush)."""
        confirmed = self._confirmed_wal_id
        if self._error is not None or confirmed <= self._fm.stored.manifest.replay_after_wal_id:
            return
        change = replay_point_change(confirmed, self._fm.epoch)
        stored = self._commit(change)
        with self._lock:
            self._install_locked(stored, self._state.imm)

    def _flush_imms(self) -> None:
        with self._l0_lock:
            self._flush_imms_locked()

    def _flush_imms_locked(self) -> None:
        while True:
            with self._lock:
                imms = self._state.imm
            if not imms or self._error is not None:
                return
            self._flush_one(imms[-1])

    def _flush_one(self, imm: ImmutableMemtable) -> None:
        gen = self._imm_gen.get(id(imm), 0)
        if gen:
            self._await_wal(gen)
        acks = self._acks
        wal_id = acks.wal_id_of_gen.get(gen, acks.last_wal_id if gen == 0 else 0)
        self._await_l0_room()
        # A retry of this flush reuses the SST (and any re-homed copy) of the failed attempt:
        # that attempt's commit may have landed (an ambiguous answer), and a fresh SST would name
        # the same rows twice.
        pending = self._imm_sst.get(id(imm))
        if pending is None:
            data, info = encode_sst(imm.batch, self._sst_options)
            sst = self._write_sst(data, info)
            pending = self._imm_sst[id(imm)] = self._new_ssts([sst], [lambda: data])
        # the replay point moves past this flush's WAL SSTs only in a later commit (see
        # slatedb_core.writer.l0_flush)
        change = l0_flush_change(
            pending,
            epoch=self._fm.epoch,
            confirmed_wal_id=self._confirmed_wal_id,
            last_wal_id=lambda: acks.last_wal_id,
            max_parallel_writes=self.options.max_parallel_writes,
            max_seq=imm.max_seq or 0,
        )
        stored = self._commit(change)
        self._confirmed_wal_id = max(self._confirmed_wal_id, wal_id)
        with self._lock:
            state = self._state
            imms = tuple(i for i in state.imm if i is not imm)
            self._install_locked(stored, imms)
            self._imm_bytes = sum(map(resident_bytes, imms))
            self._imm_gen.pop(id(imm), None)
            self._imm_sst.pop(id(imm), None)
            acks.forget_before(gen)
            self._cv.notify_all()

    def _await_wal(self, gen: int) -> None:
        while True:
            with self._lock:
                if self._acks.durable_gen >= gen or self._error is not None:
                    break
            try:
                self._flush_wal()
            except Fenced:
                break
            except StoreError as e:
                log.warning("WAL flush before memtable flush failed, retrying: %s", e)
                time.sleep(0.1)
        if self._error is not None:
            raise self._error

    def _await_l0_room(self) -> None:
        """Stall while L0 is full, until a compactor (another process) shrinks it."""
        warned = False
        while len(self._state.manifest.manifest.l0) >= self.options.l0_max_ssts:
            if self._stop.is_set() or self._error is not None:
                return
            if not warned:
                log.warning(
                    "%r: L0 holds %d SSTs (l0_max_ssts); memtable flushes wait for a compactor",
                    self.path,
                    len(self._state.manifest.manifest.l0),
                )
                warned = True
            self._refresh()
            time.sleep(self.options.manifest_poll_interval.total_seconds())

    def _new_ssts(
        self, ssts: list[CompactedSst], datas: list[Callable[[], bytes]]
    ) -> NewSsts:
        """Uploaded SSTs about to be committed, checked against the GC boundary inside each
        commit attempt (:class:`~slatedb_core.writer.gc_safety.NewSsts`)."""
        return NewSsts(self.store, self.path, self._compacted_boundary, ssts, datas)

    def _write_sst(self, data: bytes, info: SstInfo) -> CompactedSst:
        return write_new_sst(self.store, self.path, data, info)

    def _commit(self, change: IdChange) -> StoredManifest:
        try:
            return self._fm.update_at(change)
        except (Fenced, DatabaseDestroyed) as e:
            self._fail(e)
            raise

    def _install_locked(self, stored: StoredManifest, imms: tuple[ImmutableMemtable, ...]) -> None:
        state = self._state
        if stored.id < state.manifest.id:
            stored = state.manifest
        l0, runs, handles = build_handles(
            self.store, self.path, stored.manifest, self._cache, self._handles
        )
        self._handles = handles
        self._state = DbState(stored, state.memtable, imms, l0, runs)
        self._set_range(stored.manifest)

    def _l0_loop(self) -> None:
        while not self._stop.is_set():
            self._l0_wake.wait(0.5)
            self._l0_wake.clear()
            if self._stop.is_set():
                break
            try:
                self._flush_imms()
            except Fenced as e:
                self._fail(e)
                return
            except SlateDBError as e:
                log.warning("memtable flush of %r failed, retrying: %s", self.path, e)
                time.sleep(0.5)

    # ---- manifest polling ------------------------------------------------------------------
    def _refresh(self) -> None:
        """Pick up manifests written by others (compactor, checkpoint makers); if they changed the
        set of SSTs we read, move our writer checkpoint to pin the new set (seed 003)."""
        try:
            latest = self._fm.refresh()
        except Fenced as e:
            self._fail(e)
            return
        with self._lock:
            previous = self._state.manifest
        if latest.id <= previous.id:
            return
        if _sst_views(latest.manifest) != _sst_views(previous.manifest):
            epoch = self._fm.epoch
            try:
                latest = self._commit(writer_checkpoint_change(epoch))
            except Fenced:
                return
        with self._lock:
            if latest.id > self._state.manifest.id:
                self._install_locked(latest, self._state.imm)

    def _poll_loop(self) -> None:
        interval = self.options.manifest_poll_interval.total_seconds()
        while not self._stop.wait(interval):
            try:
                self._refresh()
            except SlateDBError as e:
                log.warning("manifest poll of %r failed: %s", self.path, e)

    def _set_range(self, m: Manifest) -> None:
        self._range = None if m.key_range is None else KeyRange.of(m.key_range)

    def _check_usable(self) -> None:
        if self._closed:
            raise DbClosed(f"database {self.path!r} is closed")
        if self._error is not None:
            raise self._error
