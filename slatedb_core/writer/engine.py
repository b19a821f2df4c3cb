"""The writer's machinery behind ``Db``: its state, the L0 and manifest-poller threads (the WAL
flusher's is run by the :class:`~slatedb_core.wal.flusher.WalFlusher` the engine holds, a part
with its own state that the engine calls through methods), seqs and the writes into the
memtable and the WAL buffer under its lock, memtable freeze and L0 flush, manifest commits and
polling, and the embedded compactor. ``Db`` (in :mod:`slatedb_core.writer.db`) holds an engine
and checks and delegates its public API to it; the bulk paths
(:class:`~slatedb_core.writer.ingest.WriterIngest`) are given the engine too. Both call only its
public methods.

The steps of the protocol that need no writer state live beside it:

* :mod:`slatedb_core.writer.recovery`: recovery at open (epoch bump, fencing, WAL replay), run in
  order by :meth:`WriterEngine.recover`;
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
from collections.abc import Callable, Iterator, Sequence
from time import time_ns

import pyarrow as pa
import pyarrow.compute as pc
from ulid import ULID

from slatedb_core.checkpoints import writer_checkpoint_change
from slatedb_core.compactor import Compactor
from slatedb_core.errors import (
    BackgroundThreadDied,
    DatabaseDestroyed,
    DbClosed,
    Fenced,
    InvalidArgument,
    ObjectNotFound,
    SlateDBError,
    SstMissing,
)
from slatedb_core.keys import KeyRange, check_in_range, outside_range
from slatedb_core.lsm.arrow_rows import seq_range
from slatedb_core.lsm.dbstate import DbState, SstHandle, build_handles
from slatedb_core.lsm.memtable import ImmutableMemtable, Memtable
from slatedb_core.lsm.memtable_fold import Entry
from slatedb_core.lsm.merge_operator import MergeOperator, resolve_merge_operator
from slatedb_core.lsm.row_model import (
    KIND_MERGE,
    KIND_TOMBSTONE,
    KIND_VALUE,
    ROW_SCHEMA,
    Version,
    now_ms,
)
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
from slatedb_core.wal.writer import WalWindow
from slatedb_core.writer.gc_safety import NewSsts
from slatedb_core.writer.hooks import WriterSteps
from slatedb_core.writer.l0_flush import (
    RESIDENT_OVERHEAD_PER_ENTRY,
    flush_clock_tick,
    l0_flush_change,
    l0_rows,
    replay_point_change,
    resident_bytes,
    write_l0_sst,
)
from slatedb_core.writer.poll_schedule import PollSchedule
from slatedb_core.writer.recovery import (
    bump_epoch,
    fence_older_writers,
    replay_wal,
)
from slatedb_core.writer.ttl import NoExpiry, expire_ts

log = logging.getLogger(__name__)


def _sst_views(m: Manifest) -> tuple[object, ...]:
    return (
        tuple(v.view_id for v in m.l0),
        tuple((r.id, tuple(v.view_id for v in r.views)) for r in m.compacted),
    )


class WriterEngine:
    """State and background work of a writer; not used directly (see ``Db``, which holds one)."""

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

    def recover(self, if_manifest_id: int | None = None) -> None:
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

    def check_usable(self) -> None:
        self._flusher.check_usable()

    def start(self) -> None:
        if self.options.compactor is not None:
            compactor = self.options.compactor.for_writer(self.options)
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
        self.check_usable()
        # frozen under the L0 lock: the background flusher, woken by the freeze, cannot take
        # this memtable first and commit it with the replay point lagging (a second update)
        with self._l0_lock:
            with self._lock:
                self._freeze_locked()
            self._flush_imms_locked(advance=True)
            self._advance_replay_point()  # (a commit only if a flush before this one lagged)
        self.check_usable()

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
        stored = self.commit(change)
        with self._lock:
            self._install_locked(stored, self._state.imm)

    def _flush_imms(self) -> None:
        with self._l0_lock:
            self._flush_imms_locked()

    def _flush_imms_locked(self, *, advance: bool = False) -> None:
        while True:
            with self._lock:
                imms = self._state.imm
            if not imms or self._flusher.error is not None:
                return
            self._flush_one(imms[-1], advance=advance)

    def _flush_one(self, imm: ImmutableMemtable, *, advance: bool = False) -> None:
        """Flush the oldest frozen memtable ``imm`` to L0 (steps of slatedb_core.writer.l0_flush).
        ``advance`` (an explicit ``flush_memtable``, which moves the replay point right after
        anyway): its commit moves the replay point past this flush's own WAL SSTs too, one
        manifest update instead of two (issue 42, goal 2); a background flush keeps the lag."""
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
            # encoded and written a slice of rows at a time; a re-homing (rare) encodes the
            # frozen rows again, to the same bytes, rather than holding them through the commit
            # (issue 42, goal 3)
            options = self._sst_options
            sst = write_l0_sst(self.store, self.path, imm, options)
            pending = self._imm_sst[id(imm)] = self.new_ssts(
                [sst], [lambda: encode_sst(l0_rows(imm), options)[0]]
            )
        # the replay point moves past this flush's WAL SSTs only in a later commit (see
        # slatedb_core.writer.l0_flush), or in this one for an explicit flush
        change = l0_flush_change(
            pending,
            epoch=self._fm.epoch,
            confirmed_wal_id=max(self._confirmed_wal_id, wal_id)
            if advance
            else self._confirmed_wal_id,
            last_wal_id=lambda: flusher.last_wal_id,
            max_parallel_writes=self.options.max_parallel_writes,
            max_seq=imm.max_seq or 0,
            clock_tick=flush_clock_tick(imm),
        )
        stored = self.commit(change)
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
        """Stall while L0 is full, until a compactor (the embedded one or another process)
        shrinks it. An embedded compactor that keeps failing on what retrying does not mend
        (:meth:`Compactor.stuck`) fails the writer with its error instead: the writers held back
        by this stall raise it rather than wait forever (docs/operations.md, "Write stalls")."""
        warned = False
        while len(self._state.manifest.manifest.l0) >= self.options.l0_max_ssts:
            if self._flusher.stopping.is_set() or self._flusher.error is not None:
                return
            if not warned:
                log.warning(
                    "%r: L0 holds %d SSTs (l0_max_ssts); memtable flushes wait for a compactor%s",
                    self.path,
                    len(self._state.manifest.manifest.l0),
                    "" if self._compactor is not None else _NO_COMPACTOR,
                )
                warned = True
            self._refresh()
            if len(self._state.manifest.manifest.l0) < self.options.l0_max_ssts:
                return  # a compaction this refresh saw made room: no stale verdict below
            stuck = self._compactor.stuck() if self._compactor is not None else None
            if stuck is not None:
                err = BackgroundThreadDied(f"compactor of {self.path!r}", stuck)
                err.__cause__ = stuck
                log.error("%r: L0 is full and its compactor keeps failing: %s", self.path, stuck)
                self._fail(err)
                raise err
            time.sleep(self.options.manifest_poll_interval.total_seconds())

    def new_ssts(self, ssts: list[CompactedSst], datas: list[Callable[[], bytes]]) -> NewSsts:
        """Uploaded SSTs about to be committed, checked against the GC boundary inside each
        commit attempt (:class:`~slatedb_core.writer.gc_safety.NewSsts`)."""
        return NewSsts(self.store, self.path, self._compacted_boundary, ssts, datas)

    def write_sst(self, data: bytes, info: SstInfo) -> CompactedSst:
        return write_new_sst(self.store, self.path, data, info)

    def commit(self, change: IdChange) -> StoredManifest:
        """Apply ``change`` to the manifest as this writer. Once the writer is shut down (closed,
        failed, crashed) it commits nothing more: each attempt checks, so an L0 flush or a
        poll that outlasted ``close()``'s join and lost its race to the close's own update
        retries into ``DbClosed`` instead of landing after it, the writer checkpoint with it
        (review54; the frozen rows are in the WAL, replayed by the next writer)."""
        flusher = self._flusher
        path = self.path

        def unless_closed(m: Manifest, next_id: int) -> Manifest | None:
            if flusher.closed:
                raise DbClosed(f"database {path!r} is closed: its writer commits nothing more")
            return change(m, next_id)

        try:
            return self._fm.update_at(unless_closed)
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
                if stopping.is_set():  # closed meanwhile: its commit was refused (commit)
                    return
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
                latest = self.commit(writer_checkpoint_change(epoch))
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
                if self._flusher.stopping.is_set():  # closed meanwhile: nothing more is committed
                    return
                log.warning("manifest poll of %r failed: %s", self.path, e)

    # ---- key range of a projected database --------------------------------------------------
    def _set_range(self, m: Manifest) -> None:
        self._range = None if m.key_range is None else KeyRange.of(m.key_range)

    def _outside(self, key: bytes) -> InvalidArgument:
        assert self._range is not None
        return outside_range(key, self._range)  # shared with DbReader (keys.py)

    def check_range_keys(self, keys: Sequence[bytes]) -> None:
        check_in_range(self._range, keys)

    def check_range_array(self, keys: pa.Array) -> None:
        rng = self._range
        if rng is None or len(keys) == 0:
            return
        lo, hi = pc.min_max(keys).values()
        for k in (lo.as_py(), hi.as_py()):
            if not rng.contains(k):
                raise self._outside(k)

    @property
    def key_range(self) -> KeyRange | None:
        """The manifest's key range (a projected database), or None."""
        return self._range

    # ---- what the writer's other parts read -------------------------------------------------
    @property
    def manifest(self) -> StoredManifest:
        """The manifest of the current state."""
        return self._state.manifest

    @property
    def state(self) -> DbState:
        """The current state (an immutable snapshot but for its active memtable)."""
        return self._state

    @property
    def epoch(self) -> int:
        return self._fm.epoch

    @property
    def seq(self) -> int:
        """The last seq given to a write or reserved by an ingest."""
        return self._seq

    @property
    def confirmed_wal_id(self) -> int:
        """The highest WAL id whose rows are in an L0 SST safe from GC (see :meth:`_flush_one`)."""
        return self._confirmed_wal_id

    @property
    def sst_options(self) -> SstOptions:
        return self._sst_options

    @property
    def l0_lock(self) -> threading.Lock:
        """Held by one memtable flush or ingest commit at a time (an ingest holds it from its
        seq reservation to its commit)."""
        return self._l0_lock

    @property
    def closed(self) -> bool:
        return self._flusher.closed

    def steps(self) -> WriterSteps:
        """The background work as steps, for a harness that runs it itself (writer/hooks.py)."""
        return WriterSteps(
            self._flusher,
            self._flush_imms,
            self._refresh,
            lambda: self._fm.stored.id,
            lambda: self._state,
        )

    def use_window(self, window: Callable[[WalWriter, int], WalWindow] | None) -> None:
        """Before any write: with parallel writes, put the WAL window ``window`` makes in place
        of the one with threads (a harness's, :class:`~slatedb_core.writer.hooks.WriterHooks`)."""
        if window is not None and self._flusher.window is not None:
            self._flusher.replace_window(window)

    # ---- writes: seqs, the memtable and the WAL buffer, under the lock ---------------------
    def await_durable(self, gen: int) -> None:
        """Wait until WAL generation ``gen`` (as a write returned it) is durable."""
        self._flusher.await_durable(gen)

    def put_value(self, key: bytes, value: bytes) -> int:
        """Apply a put of a checked ``key`` and ``value`` (no TTL); returns its WAL generation.

        The hottest path of the engine: checks and bookkeeping inlined (profiled: ~2x faster
        than going through :meth:`apply` with one-element lists)."""
        if self._range is not None and not self._range.contains(key):
            raise self._outside(key)
        wal = self._flusher
        with wal.lock:
            if wal.closed or wal.error is not None or self._imm_bytes >= self._max_unflushed:
                self._backpressure_locked()
            seq = self._seq = self._seq + 1
            memtable = self._state.memtable
            memtable.put(key, seq, value)
            buf = wal.buffer
            buf.keys.append(key)
            buf.seqs.append(seq)
            buf.values.append(value)
            buf.nbytes += len(key) + len(value) + 16
            gen = wal.wrote_locked(time_ns())  # the write's clock tick (SlateDB RFC 0003)
            if (
                memtable.size_bytes >= self._l0_size
                or memtable.size_bytes + memtable.entry_count * RESIDENT_OVERHEAD_PER_ENTRY
                >= self._mem_budget
            ):
                self._freeze_locked()
        return gen

    def apply(self, keys: Sequence[bytes], values: Sequence[bytes | None], nbytes: int) -> int:
        """Apply puts (deletes for a None value) of checked keys and values, ``nbytes`` their
        size, atomically; returns their WAL generation."""
        # Invariant readers rely on: seqs are assigned under the lock in the same order writes
        # enter the WAL buffer, so WAL ids and seqs increase together.
        with self._lock:
            self.check_usable()
            self._backpressure_locked()
            seq = self._seq
            memtable = self._state.memtable
            buf = self._flusher.buffer
            if len(keys) == 1:
                seq += 1
                memtable.put(keys[0], seq, values[0])
                buf.keys.append(keys[0])
                buf.seqs.append(seq)
                buf.values.append(values[0])
            else:
                seqs = list(range(seq + 1, seq + 1 + len(keys)))
                seq = seqs[-1]
                memtable.put_many(keys, seqs, values)
                buf.keys.extend(keys)
                buf.seqs.extend(seqs)
                buf.values.extend(values)
            self._seq = seq
            buf.nbytes += nbytes + 16 * len(keys)
            return self._after_write_locked(time_ns())  # the write's clock tick (RFC 0003)

    def apply_versions(
        self,
        keys: Sequence[bytes],
        values: Sequence[bytes | None],
        specials: dict[int, tuple[int, int | NoExpiry | None]],
        op: MergeOperator | None,
        default_ttl: int | None,
    ) -> int:
        """Apply checked writes of which some carry a TTL or are merges (``specials``, as
        ``Db._write_special`` takes them; ``op`` the merge operator, ``default_ttl`` the TTL of
        the others) atomically; returns their WAL generation. A row with an ``expire_ts`` or a
        merge operand becomes a :class:`~slatedb_core.lsm.row_model.Version` in the memtable
        and a ROW_SCHEMA row of the WAL, created at the write's clock tick (SlateDB RFC 0003)."""
        with self._lock:
            self.check_usable()
            self._backpressure_locked()
            now = now_ms()
            seq = self._seq
            memtable = self._state.memtable
            buf = self._flusher.buffer
            rows: list[tuple[bytes, Version]] = []
            nbytes = 0
            writes: list[tuple[bytes, Version]] = []
            for i, key in enumerate(keys):
                seq += 1
                value = values[i]
                kind, ttl = specials.get(i, (KIND_VALUE, None))
                if value is None:
                    kind = KIND_TOMBSTONE
                exp = None if kind == KIND_TOMBSTONE else expire_ts(ttl, default_ttl, now)
                nbytes += len(key) + (0 if value is None else len(value)) + 16
                writes.append((key, Version(seq, kind, value, exp, now)))
            if len(writes) > 1:
                _check_merge_ttls(writes)
            # the merge operator runs before anything is written: an operand it refuses
            # refuses the whole write, which leaves no row in the memtable (atomic batches)
            folds = memtable.fold_versions(writes, op) if op is not None else None
            for i, (key, version) in enumerate(writes):
                if version.kind != KIND_MERGE and version.expire_ts is None:
                    memtable.put(key, version.seq, version.value)
                    buf.keys.append(key)
                    buf.seqs.append(version.seq)
                    buf.values.append(version.value)
                else:
                    memtable.put_version(key, version, op, None if folds is None else folds[i])
                    rows.append((key, version))
            if rows:
                buf.batches.append(_rows_batch(rows))
            self._seq = seq
            buf.nbytes += nbytes
            return self._after_write_locked(now * 1_000_000, keep_newer=True)

    def apply_batch(self, entries: pa.RecordBatch) -> int:
        """Apply the rows of a checked batch (KV or ROW_SCHEMA; seqs given here, in row order)
        atomically; returns their WAL generation."""
        n = entries.num_rows
        with self._lock:
            self.check_usable()
            self._backpressure_locked()
            first = self._seq + 1
            self._seq += n
            batch = entries.set_column(1, "seq", seq_range(first, n))
            self._state.memtable.put_batch(batch)
            buf = self._flusher.buffer
            buf.batches.append(batch)
            buf.nbytes += batch.nbytes
            return self._after_write_locked(time_ns(), keep_newer=True)  # its clock tick

    def _after_write_locked(self, at_ns: int, keep_newer: bool = False) -> int:
        gen = self._flusher.wrote_locked(at_ns, keep_newer)
        memtable = self._state.memtable
        if (
            memtable.size_bytes >= self._l0_size
            or memtable.size_bytes + memtable.entry_count * RESIDENT_OVERHEAD_PER_ENTRY
            >= self._mem_budget
        ):
            self._freeze_locked()
        return gen

    def _backpressure_locked(self) -> None:
        """Block the writer while frozen memtables not yet in L0 exceed max_unflushed_bytes."""
        while (
            self._imm_bytes >= self._max_unflushed
            and self._state.imm
            and self._flusher.error is None
            and not self._flusher.closed
        ):
            self._l0_wake.set()
            self._cv.wait(0.05)
        self.check_usable()

    # ---- reads --------------------------------------------------------------------------------
    def readable_state(self) -> DbState:
        """The state a read answers from, after the check writes pass (see
        ``Db._readable_state``)."""
        self.check_usable()
        return self._state

    def get(self, key: bytes) -> bytes | None:
        """The latest value of a checked ``key``, or None (as ``Db.get``)."""
        state = self.readable_state()
        if self._range is not None and not self._range.contains(key):
            raise self._outside(key)
        try:
            return state.get(key)
        except ObjectNotFound as e:
            state = self.reload_after_missing(state, e)
        try:
            return state.get(key)
        except ObjectNotFound as e:
            raise still_missing(e) from e

    def reload_after_missing(self, failed: DbState, missing: ObjectNotFound) -> DbState:
        """The state to retry a read on after ``failed`` lost an SST under it, or SstMissing.

        GC collected an SST this writer still read: its writer checkpoint was deleted (by an
        operator, docs/operations.md, "A writer that did not close") or the database destroyed
        under it, and a compaction had replaced the SST. The latest manifest is picked up now, as
        the next poll would (moving the writer checkpoint); if it is the one that failed, the
        SST is gone from a manifest that still names it: SstMissing. Every read of the writer
        recovers here (``get``, ``get_many``; a scan raises SstMissing after it, see
        :meth:`scan_batches`), as ``DbReader._recover`` does for a reader. A writer that has
        failed or closed raises its error and commits nothing; the latest manifest is read even
        when the writer's state moved on since ``failed``: that state may name the SST too."""
        self.check_usable()
        self._refresh()
        state = self.readable_state()
        if state.manifest.id == failed.manifest.id:
            raise SstMissing(missing.path, "still named by the writer's latest manifest")
        return state

    def scan_batches(
        self, state: DbState, start: bytes | None, end: bytes | None, batch_size: int = 65536
    ) -> Iterator[pa.RecordBatch]:
        """``state.scan``, where an SST collected under the scan is :class:`SstMissing` after
        the writer reloaded its manifest (:meth:`reload_after_missing`): a scan started again
        reads the new one. A scan is not resumed on another state: rows written since it began
        would join it."""
        try:
            yield from state.scan(start, end, batch_size=batch_size)
        except ObjectNotFound as e:
            self.reload_after_missing(state, e)
            raise SstMissing(e.path, "collected under the scan; start the scan again") from e

    def active_entries(self, keys: Sequence[bytes]) -> tuple[DbState, list[Entry | None] | None]:
        """The readable state and, taken at the same instant under the lock, the active
        memtable's entry of each of ``keys`` (None for an empty memtable): the active memtable
        is the one part of a state that changes, always under the lock."""
        with self._lock:
            state = self.readable_state()
            # (an empty memtable, as after a flush, has nothing to look up)
            found = None if state.memtable.is_empty() else list(map(state.memtable.get, keys))
        return state, found

    # ---- ingest: seq reservations and commits in front of L0 ---------------------------------
    def reserve_seqs_and_freeze(self, n: int) -> tuple[int, tuple[ImmutableMemtable, ...]]:
        """Reserve ``n`` seqs for an ingest and freeze the memtable; returns the first seq and
        the frozen memtables older than the ingest. The caller holds :attr:`l0_lock` from here
        to its commit, which keeps any newer memtable from reaching L0 behind (i.e. older than)
        the ingested views."""
        with self._lock:
            self.check_usable()
            first = self._seq + 1
            self._seq += n
            # Writes before this point are older than the ingested rows: they go to L0 first,
            # so the new views can be put in front of them.
            self._freeze_locked()
            older = self._state.imm
        return first, older

    def reserve_through(self, lowest: int, highest: int) -> tuple[ImmutableMemtable, ...] | None:
        """For sources whose rows already carry seqs ``lowest..highest``: if every seq this
        writer gave is below ``lowest``, move its seq to ``highest`` and freeze the memtable
        (as :meth:`reserve_seqs_and_freeze`; :attr:`l0_lock` held) and return the frozen
        memtables older than the ingest; else None."""
        with self._lock:
            self.check_usable()
            if self._seq >= lowest:
                return None
            self._seq = highest
            self._freeze_locked()
            return self._state.imm

    def flush_older(self, older: tuple[ImmutableMemtable, ...]) -> None:
        """Flush the frozen memtables of ``older`` (:attr:`l0_lock` held), oldest first: those
        frozen since are newer than them and wait (a memtable flush takes the oldest first, so
        ``older`` is the tail of the frozen memtables until it is flushed)."""
        ids = {id(imm) for imm in older}  # ``older`` holds them: no id is reused meanwhile
        while True:
            with self._lock:
                imms = self._state.imm
            if not imms or self._flusher.error is not None or id(imms[-1]) not in ids:
                return
            self._flush_one(imms[-1])

    def install(self, stored: StoredManifest) -> None:
        """Install the manifest ``stored`` (committed by :meth:`commit`) as the current state's."""
        with self._lock:
            self._install_locked(stored, self._state.imm)

    def install_if_newer(self, stored: StoredManifest) -> None:
        """:meth:`install`, when ``stored`` is newer than the current state's manifest."""
        with self._lock:
            if stored.id > self._state.manifest.id:
                self._install_locked(stored, self._state.imm)

    # ---- closing ------------------------------------------------------------------------------
    def close(self) -> BaseException | None:
        """Stop the embedded compactor, flush buffered writes to the WAL unless the writer has
        failed, and stop background work either way; returns what kept buffered writes from
        becoming durable (see ``Db.close``), or None."""
        failure: BaseException | None = None
        try:
            if self._compactor is not None:
                self._compactor.stop()
            if self._flusher.error is None:
                self._flusher.refuse_writes()  # what is acknowledged from here is flushed below
                self._flusher.flush_wal()
        except Exception as e:
            failure = e
        finally:
            self._flusher.shut_down()
        return self._flusher.error or failure  # a fencing learned while flushing recorded it too

    def simulate_crash(self) -> None:
        """Stop as a killed process would: no flush, buffered writes lost (tests, simulation)."""
        if self._compactor is not None:
            self._compactor.stop()
        self._flusher.shut_down(DbClosed("crashed"))


def _check_merge_ttls(writes: Sequence[tuple[bytes, Version]]) -> None:
    """Refuse a batch in which a key's merge operands cannot fold into one row: their
    ``expire_ts`` differ from each other's or from the put's or delete's before them (a later
    put or delete of the key replaces what came before). SlateDB 0.17 refuses the same batch
    (``IncompatibleMergeTtls``, its write batches fold each key's operands into one row)."""
    chains: dict[bytes, tuple[bool, set[int | None]]] = {}
    for key, v in writes:
        if v.kind != KIND_MERGE:
            chains[key] = (False, {v.expire_ts})
        else:
            _, seen = chains.get(key, (False, set()))
            chains[key] = (True, seen | {v.expire_ts})
    for key, (merged, seen) in chains.items():
        if merged and len(seen) > 1:
            raise InvalidArgument(
                f"the merge operands of one key in a write batch must share one TTL with each "
                f"other and with the key's put or delete before them (key {key!r}); SlateDB "
                f"refuses such a batch too"
            )


def _rows_batch(rows: Sequence[tuple[bytes, Version]]) -> pa.RecordBatch:
    """The WAL rows of writes with a TTL or a merge operand, in seq order (ROW_SCHEMA)."""
    vs = [v for _, v in rows]
    return pa.RecordBatch.from_arrays(
        [
            pa.array([k for k, _ in rows], pa.binary()),
            pa.array([v.seq for v in vs], pa.uint64()),
            pa.array([v.kind for v in vs], pa.uint8()),
            pa.array([b"" if v.value is None else v.value for v in vs], pa.binary()),
            pa.array([v.expire_ts for v in vs], pa.int64()),
            pa.array([v.create_ts for v in vs], pa.int64()),
        ],
        schema=ROW_SCHEMA,
    )


_NO_COMPACTOR = (
    ", and no compactor runs in this process: run one elsewhere (`slatedb compact`, the Dagster "
    "compaction asset) or open the writer with DbOptions(compactor=CompactorOptions()) "
    '(docs/operations.md, "Write stalls")'
)


def still_missing(e: ObjectNotFound) -> SstMissing:
    """The error of a read whose retry on the reloaded state lost an SST again."""
    return SstMissing(e.path, "still missing after reloading the writer's manifest")
