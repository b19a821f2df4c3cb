"""The writer's machinery behind ``Db``: its state, the L0 and manifest-poller threads (the WAL
flusher's is run by the :class:`~slatedb_core.wal.flusher.WalFlusher` the engine holds, a part
with its own state that the engine calls through methods), memtable freeze
and L0 flush, manifest commits and polling, and the embedded compactor. ``Db`` (in
:mod:`slatedb_core.writer.db`) adds the public API, :mod:`slatedb_core.writer.ingest` the bulk
paths.

The steps of the protocol that need no writer state live beside it:

* :mod:`slatedb_core.writer.recovery`: recovery at open (epoch bump, fencing, WAL replay), run in
  order by :meth:`WriterEngine._recover`;
* :mod:`slatedb_core.wal.flusher` and :mod:`slatedb_core.wal.pipeline`: the WAL buffer of a
  generation, its flush, and the bookkeeping of which generations are durable;
* :mod:`slatedb_core.writer.l0_flush`: the steps of a memtable flush to L0 and the manifest changes
  it commits (run by :meth:`WriterEngine._flush_one`);
* :mod:`slatedb_core.writer.gc_safety`: the pre-commit GC check of the writer's own SSTs; the
  writer checkpoint is :func:`slatedb_core.checkpoints.writer_checkpoint`.

See :mod:`slatedb_core.writer.db` for the write path as a whole.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from ulid import ULID

from slatedb_core.checkpoints import writer_checkpoint_change
from slatedb_core.compactor import Compactor
from slatedb_core.errors import (
    BackgroundThreadDied,
    DatabaseDestroyed,
    Fenced,
    InvalidArgument,
    SlateDBError,
)
from slatedb_core.keys import KeyRange, check_in_range, outside_range
from slatedb_core.lsm.dbstate import DbState, SstHandle, build_handles
from slatedb_core.lsm.memtable import ImmutableMemtable, Memtable
from slatedb_core.lsm.merge_operator import resolve_merge_operator
from slatedb_core.manifest.model import CompactedSst, Manifest, SstInfo
from slatedb_core.manifest.store import FencedManifest, IdChange, ManifestStore, StoredManifest
from slatedb_core.meta.compacted_boundary import compacted_boundary
from slatedb_core.options import DbOptions
from slatedb_core.sst import BlockCache, SstOptions, encode_sst
from slatedb_core.sst.create import write_new_sst
from slatedb_core.store.objectstore import ObjectStore, validate_relative_path
from slatedb_core.wal import WalLog, WalWriter
from slatedb_core.wal.flusher import WalFlusher
from slatedb_core.wal.location import WalLocation
from slatedb_core.writer.gc_safety import NewSsts
from slatedb_core.writer.l0_flush import (
    flush_clock_tick,
    l0_flush_change,
    l0_rows,
    replay_point_change,
    resident_bytes,
)
from slatedb_core.writer.poll_schedule import PollSchedule
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

    def __init__(
        self,
        path: str,
        store: ObjectStore,
        options: DbOptions,
        flusher: type[WalFlusher] = WalFlusher,
    ) -> None:
        validate_relative_path(path, what="database path")
        self.path = path
        self._l0_wake = threading.Event()
        # the WAL side, and the lock and failure state every part of the writer shares
        self._flusher = flusher(
            path, options.flush_interval, options.wal_sst_size_bytes, self._l0_wake.set
        )
        self._lock = self._flusher.lock
        self._cv = self._flusher.cv
        self.store = store
        self.options = options
        self._sst_options = SstOptions(
            options.block_size, options.bloom_bits_per_key, options.compression
        )
        self._cache = BlockCache(options.block_cache_bytes) if options.block_cache_bytes else None
        self._l0_lock = threading.Lock()  # one memtable flush at a time
        self._seq = 0
        self._imm_gen: dict[int, int] = {}  # id(ImmutableMemtable) -> last WAL generation
        # id(ImmutableMemtable) -> its uploaded L0 SST, kept until the flush is installed
        self._imm_sst: dict[int, NewSsts] = {}
        # Highest WAL id whose rows are in an L0 SST that is safe from GC (see _flush_one): the
        # replay point never moves past it.
        self._confirmed_wal_id = 0
        self._handles: dict[tuple[ULID, ULID], SstHandle] = {}
        self._compactor: Compactor | None = None
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
        # the one store of this database's WAL objects (SlateDB RFC 0009: maybe a separate one)
        self.wal = WalLog(WalLocation.open(store, options.wal_url), path)
        self._fm: FencedManifest
        self._state: DbState

    def _recover(self, if_manifest_id: int | None = None) -> None:
        """Recovery at open, the steps of :mod:`slatedb_core.writer.recovery` in order."""
        own = self.options.max_parallel_writes
        # 1. bump the writer epoch together with our writer checkpoint (SlateDB RFC 0004)
        self._fm = bump_epoch(self.manifests, own, if_manifest_id, self.wal)
        epoch = self._fm.epoch
        m = self._fm.stored.manifest
        # 2. fence older writers (SlateDB RFC 0001)
        fence_id = fence_older_writers(self._fm, self.manifests, self.wal)
        # 3. replay every WAL SST after replay_after_wal_id up to our fence. No L0 SST needs a
        #    repair: every commit checked its new SSTs against the GC boundary before naming them
        #    (slatedb_core.writer.gc_safety), so a missing or damaged one is damage, reported by the reads
        #    that need it, never silently dropped.
        merge_op = resolve_merge_operator(self.options.merge_operator)
        replayed = replay_wal(self.path, self.wal, m, fence_id, merge_op)
        memtable = replayed.memtable
        top = memtable.max_seq
        self._seq = max(m.last_l0_seq, top if top is not None else 0)
        self._confirmed_wal_id = replayed.in_l0_upto
        writer = WalWriter(self.wal, epoch, fence_id + 1, self._sst_options)
        # replayed entries are durable already: they live in WAL SSTs <= fence_id
        self._flusher.start(writer, own, fence_id, replayed=not memtable.is_empty())
        stored = self._fm.stored
        l0, runs, handles = build_handles(self.store, self.path, stored.manifest, self._cache)
        self._handles = handles
        self._state = DbState(stored, memtable, (), l0, runs, merge_operator=merge_op)
        self._set_range(stored.manifest)

    def _guarded(self, name: str, loop: Callable[[], None]) -> Callable[[], None]:
        """``loop`` as a thread target that fails the writer with BackgroundThreadDied if it dies on
        an unexpected error: every waiter and every later call raises it, none hangs (review finding
        15 in RELIABILITY.md). A loop that stops on a protocol error (Fenced) has failed the writer
        itself. A BaseException that is no Exception (a simulated kill -9) is not handled: it ends
        the thread as the process would end."""

        def run() -> None:
            try:
                loop()
            except Exception as e:
                log.exception("%s thread of %r died", name, self.path)
                err = BackgroundThreadDied(f"{name} of {self.path!r}", e)
                err.__cause__ = e
                self._fail(err)

        return run

    def _fail(self, err: BaseException) -> None:
        self._flusher.fail(err)

    def _check_usable(self) -> None:
        self._flusher.check_usable()

    def _start(self) -> None:
        if self.options.compactor is not None:
            compactor = self.options.compactor
            if compactor.merge_operator is None and self.options.merge_operator is not None:
                # the embedded compactor folds operands with the writer's operator (issue 38)
                compactor = dataclasses.replace(
                    compactor, merge_operator=self.options.merge_operator
                )
            self._compactor = Compactor(self.path, self.store, compactor).start()
        for name, target in (
            ("wal-flusher", self._flusher.run),
            ("l0-flusher", self._l0_loop),
            ("manifest-poller", self._poll_loop),
        ):
            t = threading.Thread(
                target=self._guarded(name, target), name=f"slatedb-{name}-{self.path}", daemon=True
            )
            t.start()
            self._flusher.add_thread(t)

    # ---- memtable flush --------------------------------------------------------------------
    def _freeze_locked(self) -> ImmutableMemtable | None:
        state = self._state
        if state.memtable.is_empty():
            return None
        imm = state.memtable.freeze(self._flusher.last_write_ms())
        # the frozen memtable's last writes are in the newest sealed generation
        self._imm_gen[id(imm)] = self._flusher.seal_locked()
        self._state = dataclasses.replace(state, memtable=Memtable(), imm=(imm, *state.imm))
        self._imm_bytes += resident_bytes(imm)
        self._l0_wake.set()
        return imm

    def flush(self) -> None:
        """Write everything buffered to the WAL now and wait until it is durable."""
        self._flusher.flush()

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
        if (
            self._flusher.error is not None
            or confirmed <= self._fm.stored.manifest.replay_after_wal_id
        ):
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
            if not imms or self._flusher.error is not None:
                return
            self._flush_one(imms[-1])

    def _flush_one(self, imm: ImmutableMemtable) -> None:
        gen = self._imm_gen.get(id(imm), 0)
        flusher = self._flusher
        if gen:
            flusher.await_wal(gen)
        wal_id = flusher.wal_id_of(gen)
        self._await_l0_room()
        # A retry of this flush reuses the SST (and any re-homed copy) of the failed attempt:
        # that attempt's commit may have landed (an ambiguous answer), and a fresh SST would name
        # the same rows twice.
        pending = self._imm_sst.get(id(imm))
        if pending is None:
            data, info = encode_sst(l0_rows(imm), self._sst_options)
            sst = self._write_sst(data, info)
            pending = self._imm_sst[id(imm)] = self._new_ssts([sst], [lambda: data])
        # the replay point moves past this flush's WAL SSTs only in a later commit (see
        # slatedb_core.writer.l0_flush)
        change = l0_flush_change(
            pending,
            epoch=self._fm.epoch,
            confirmed_wal_id=self._confirmed_wal_id,
            last_wal_id=lambda: flusher.last_wal_id,
            max_parallel_writes=self.options.max_parallel_writes,
            max_seq=imm.max_seq or 0,
            clock_tick=flush_clock_tick(imm),
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
            flusher.forget_before_locked(gen)
            self._cv.notify_all()

    def _await_l0_room(self) -> None:
        """Stall while L0 is full, until a compactor (another process) shrinks it."""
        warned = False
        while len(self._state.manifest.manifest.l0) >= self.options.l0_max_ssts:
            if self._flusher.stopping.is_set() or self._flusher.error is not None:
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

    def _new_ssts(self, ssts: list[CompactedSst], datas: list[Callable[[], bytes]]) -> NewSsts:
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
        self._state = DbState(
            stored, state.memtable, imms, l0, runs, merge_operator=state.merge_operator
        )
        self._set_range(stored.manifest)

    def _l0_loop(self) -> None:
        stopping = self._flusher.stopping
        while not stopping.is_set():
            self._l0_wake.wait(0.5)
            self._l0_wake.clear()
            if stopping.is_set():
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
        set of SSTs we read, move our writer checkpoint to pin the new set (SlateDB RFC 0004)."""
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
        o = self.options
        schedule = PollSchedule(o.manifest_poll_interval, o.manifest_poll_idle_interval)
        while not self._flusher.stopping.wait(schedule.next_wait(self._state.manifest.id)):
            try:
                self._refresh()
            except SlateDBError as e:
                log.warning("manifest poll of %r failed: %s", self.path, e)

    # ---- key range of a projected database --------------------------------------------------
    def _set_range(self, m: Manifest) -> None:
        self._range = None if m.key_range is None else KeyRange.of(m.key_range)

    def _outside(self, key: bytes) -> InvalidArgument:
        assert self._range is not None
        return outside_range(key, self._range)  # shared with DbReader (keys.py)

    def _check_range_keys(self, keys: Sequence[bytes]) -> None:
        check_in_range(self._range, keys)

    def _check_range_array(self, keys: pa.Array) -> None:
        rng = self._range
        if rng is None or len(keys) == 0:
            return
        lo, hi = pc.min_max(keys).values()
        for k in (lo.as_py(), hi.as_py()):
            if not rng.contains(k):
                raise self._outside(k)
