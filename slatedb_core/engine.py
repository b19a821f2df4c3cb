"""The writer's machinery behind ``Db``: WAL buffer and flusher, memtable freeze and L0 flush,
manifest polling, recovery at open. ``Db`` (in :mod:`slatedb_core.db`) adds the public API.

See :mod:`slatedb_core.db` for the write path as a whole.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from ulid import ULID

from slatedb_core.dbstate import DbState, SstHandle, build_handles, resolve_sst_path, sst_path
from slatedb_core.entries import ENTRY_SCHEMA, batch_from_lists, sort_dedup
from slatedb_core.errors import (
    Fenced,
    ManifestVersionExists,
    ObjectAlreadyExists,
    ObjectNotFound,
    SlateDBError,
    StoreError,
)
from slatedb_core.keys import KeyRange
from slatedb_core.manifest.model import (
    Checkpoint,
    CompactedSst,
    Manifest,
    SortedRun,
    SstInfo,
    SstView,
)
from slatedb_core.manifest.store import FencedManifest, IdChange, ManifestStore, StoredManifest
from slatedb_core.memtable import ImmutableMemtable, Memtable
from slatedb_core.meta.compacted_boundary import compacted_boundary
from slatedb_core.options import (
    DbOptions,
)
from slatedb_core.sst import BlockCache, SstOptions, encode_sst
from slatedb_core.store.objectstore import ObjectStore, validate_relative_path
from slatedb_core.wal import WalLog, WalWindow, WalWriter, fence_wal, first_open_slot
from slatedb_core.wal.writer import WalEpochConflict, WalWindowClosed

log = logging.getLogger(__name__)

KV_SCHEMA = pa.schema(
    [pa.field("key", pa.binary(), nullable=False), pa.field("value", pa.binary())]
)


class DbClosed(SlateDBError):
    """The Db was closed; open it again to use it."""


@dataclass(frozen=True, slots=True)
class BulkIngestStats:
    rows: int
    ssts: int
    bytes_written: int
    manifest_id: int


@dataclass
class _Buffer:
    """Writes not yet in a WAL SST, for one generation."""

    keys: list[bytes] = dataclasses.field(default_factory=list)
    seqs: list[int] = dataclasses.field(default_factory=list)
    values: list[bytes | None] = dataclasses.field(default_factory=list)
    batches: list[pa.RecordBatch] = dataclasses.field(default_factory=list)
    nbytes: int = 0

    def empty(self) -> bool:
        return not self.keys and not self.batches

    def to_batch(self) -> pa.RecordBatch:
        parts: list[pa.RecordBatch] = list(self.batches)
        if self.keys:
            kinds = [1 if v is None else 0 for v in self.values]
            vals = [b"" if v is None else v for v in self.values]
            parts.append(batch_from_lists(self.keys, self.seqs, kinds, vals))
        if len(parts) == 1:
            return sort_dedup(parts[0])
        return sort_dedup(pa.Table.from_batches(parts, schema=ENTRY_SCHEMA))


# Measured RSS of a dict memtable entry beyond its key and value bytes (dict slot, tuple, int and
# bytes headers, WAL buffer copy): ~320 bytes against the 16 that size_bytes counts toward the SST size.
_RESIDENT_OVERHEAD_PER_ENTRY = 320


def _resident_bytes(imm: ImmutableMemtable) -> int:
    """What a frozen memtable really holds in memory, for backpressure (not for SST sizing)."""
    return int(imm.size_bytes + imm.entry_count * _RESIDENT_OVERHEAD_PER_ENTRY)


def _sst_views(m: Manifest) -> tuple[object, ...]:
    return (
        tuple(v.view_id for v in m.l0),
        tuple((r.id, tuple(v.view_id for v in r.views)) for r in m.compacted),
    )


def replace_sst(m: Manifest, old_id: ULID, new: CompactedSst) -> Manifest | None:
    """``m`` with every reference to SST ``old_id`` pointing at ``new`` instead (views whose id
    was the SST's id take the new id too); None if ``m`` does not reference ``old_id``."""
    if m.sst(old_id) is None:
        return None

    def view(v: SstView) -> SstView:
        if v.sst_id != old_id:
            return v
        return SstView(new.id if v.view_id == old_id else v.view_id, new.id, v.visible_range)

    return dataclasses.replace(
        m,
        ssts=tuple(new if s.id == old_id else s for s in m.ssts),
        l0=tuple(view(v) for v in m.l0),
        compacted=tuple(SortedRun(r.id, tuple(view(v) for v in r.views)) for r in m.compacted),
    )


def writer_checkpoint(m: Manifest, manifest_id: int, epoch: int) -> Manifest:
    """Replace any writer checkpoint with one of ``epoch`` pinning ``manifest_id`` (seed 003)."""
    others = tuple(c for c in m.checkpoints if c.writer_epoch is None)
    cp = Checkpoint(
        id=uuid.uuid4(),
        manifest_id=manifest_id,
        create_time_s=int(time.time()),
        expire_time_s=None,
        writer_epoch=epoch,
    )
    return dataclasses.replace(m, checkpoints=(*others, cp))


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
        self._buf = _Buffer()
        self._sealed: list[tuple[int, _Buffer]] = []
        self._durable_gen = 0
        self._flush_failure: tuple[int, BaseException] | None = None
        self._wal_id_of_gen: dict[int, int] = {}
        # Parallel WAL writes (max_parallel_writes > 1, see _dispatch_wal): generations landed
        # ahead of _durable_gen (which stays the contiguous watermark), generations issued to
        # the window and not yet landed, and the last failure of each generation not landed.
        self._window: WalWindow | None = None
        self._landed_gens: set[int] = set()
        self._issued_gens: set[int] = set()
        self._gen_failures: dict[int, tuple[int, BaseException]] = {}  # gen -> (serial, error)
        self._failure_serial = 0
        self._imm_gen: dict[int, int] = {}  # id(ImmutableMemtable) -> last WAL generation
        # id(ImmutableMemtable) -> its uploaded L0 SST, kept until the flush is installed
        self._imm_sst: dict[int, tuple[CompactedSst, bytes]] = {}
        self._last_wal_id = 0
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
        if self.manifests.try_read_latest() is None:
            try:
                self.manifests.create_initial(Manifest())
            except ManifestVersionExists:
                pass  # another opener created it first
        # 1. bump the writer epoch together with our writer checkpoint (seed 003); the manifest's
        #    max_parallel_writes becomes max(previous writer's, ours) until our fence is complete
        #    (lowered to ours by our first memtable flush), so that a writer opening after us
        #    while we fence still covers the previous writer's window
        own = self.options.max_parallel_writes

        def bump(m: Manifest, next_id: int) -> Manifest:
            m = writer_checkpoint(m, next_id, m.writer_epoch)
            return dataclasses.replace(m, max_parallel_writes=max(m.max_parallel_writes, own))

        self._fm = FencedManifest.init_writer(self.manifests, extra=bump)
        epoch = self._fm.epoch
        m = self._fm.stored.manifest
        # 2. fence older writers (seed 001): max_parallel_writes consecutive empty WAL SSTs from
        #    the first open slot, which fills any hole an older writer may still be writing
        existing = self.wal.list_ids(after=m.replay_after_wal_id)
        start = first_open_slot(existing, m.replay_after_wal_id, m.next_wal_sst_id)
        # An opener that bumped before a newer writer and lists the WAL after that writer began
        # writing would otherwise put its fencing SSTs into the holes of the newer writer's
        # in-flight window; re-reading the manifest here makes it stop first.
        self._fm.fence.check(self.manifests.read_latest().manifest)
        fence_id = fence_wal(self.wal, epoch, start, self._sst_options, m.max_parallel_writes)
        # A newer writer that bumped its epoch and fenced while we were between our bump and our
        # listing sits *below* our fence SST, so fence_wal never met it; the manifest still
        # tells. Without this check we would run as a second writer (seed 001's fence is only
        # sound once no newer epoch exists when our fence lands).
        self._fm.fence.check(self.manifests.read_latest().manifest)
        # 3. an earlier writer may have died between committing an L0 SST and making sure no GC
        #    pass had already decided to delete it: finish that check for it
        self._repair_l0_behind_gc_boundary()
        # 4. replay every WAL SST after replay_after_wal_id up to our fence (listed again: older
        #    writers may have taken slots while we were fencing). The fence left no holes below
        #    it; an older writer's SST that landed after a lost one of its window is replayed
        #    (seed 001: it may have been acknowledged).
        memtable = Memtable()
        max_seq = m.last_l0_seq
        expect = m.replay_after_wal_id + 1
        for wal_id in self.wal.list_ids(after=m.replay_after_wal_id):
            if wal_id >= fence_id:
                break
            if wal_id != expect and expect >= m.next_wal_sst_id:
                log.warning("%r: WAL ids %d..%d are missing below our fence", self.path, expect,
                            wal_id - 1)
            expect = wal_id + 1
            for batch in self.wal.read(wal_id).entries.to_batches():
                memtable.put_batch(batch)
        top = memtable.max_seq
        max_seq = max(max_seq, top if top is not None else 0)
        self._seq = max_seq
        self._last_wal_id = fence_id
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
            self._wal_id_of_gen[0] = fence_id

    def _repair_l0_behind_gc_boundary(self) -> None:
        """Re-run the post-commit GC check (:meth:`_secure_from_gc`) for our own L0 SSTs that a
        GC pass may have been allowed to delete, i.e. those at or behind the compacted boundary.

        A writer that died between committing an L0 SST and that check leaves an SST that a
        concurrent GC pass may delete (or already has). One still present is re-homed under a
        fresh id; one already gone is dropped from the manifest. Dropping loses nothing
        acknowledged: a memtable flush moves the replay point past its WAL SSTs only in a later
        commit, once the check has passed (see :meth:`_flush_one`), so the rows of an unchecked
        SST are still in the WAL we replay next; and a bulk ingest returns only after the check.
        SSTs newer than the boundary are safe from every GC pass and cost nothing here.
        """
        m = self._fm.stored.manifest
        boundary = self._compacted_boundary.read()
        at_risk: list[CompactedSst] = []
        for view in m.l0:
            sst = m.sst(view.sst_id)
            if sst is None or sst.id.milliseconds > boundary or sst in at_risk:
                continue
            own = sst_path(self.path, sst.original_id or sst.id)
            if resolve_sst_path(self.path, m, sst) == own:  # not another database's SST
                at_risk.append(sst)
        missing: set[ULID] = set()
        for sst in at_risk:
            path = resolve_sst_path(self.path, m, sst)
            try:
                self._secure_from_gc(sst, functools.partial(self._read_object, path))
            except ObjectNotFound:
                missing.add(sst.id)
        if not missing:
            return
        log.warning(
            "%r: dropping %d L0 SST(s) a GC pass deleted before their writer had checked them "
            "(their rows are replayed from the WAL): %s",
            self.path,
            len(missing),
            ", ".join(map(str, sorted(missing))),
        )
        epoch = self._fm.epoch

        def change(m: Manifest, next_id: int) -> Manifest | None:
            if not any(m.sst(i) is not None for i in missing):
                return None
            l0 = tuple(v for v in m.l0 if v.sst_id not in missing)
            used = {v.sst_id for v in l0} | {v.sst_id for r in m.compacted for v in r.views}
            ssts = tuple(s for s in m.ssts if s.id not in missing or s.id in used)
            return writer_checkpoint(dataclasses.replace(m, l0=l0, ssts=ssts), next_id, epoch)

        self._commit(change)

    def _read_object(self, path: str) -> bytes:
        return self.store.get(path).data

    def _start(self) -> None:
        if self.options.compactor is not None:
            from slatedb_core.compactor import Compactor

            self._compactor = Compactor(self.path, self.store, self.options.compactor).start()
        for name, target in (
            ("wal-flusher", self._wal_loop),
            ("l0-flusher", self._l0_loop),
            ("manifest-poller", self._poll_loop),
        ):
            t = threading.Thread(target=target, name=f"slatedb-{name}-{self.path}", daemon=True)
            t.start()
            self._threads.append(t)

    # ---- durability ------------------------------------------------------------------------
    def _await_durable(self, gen: int) -> None:
        with self._lock:
            while self._durable_gen < gen:
                if gen in self._landed_gens:
                    return  # landed ahead of an earlier generation (parallel WAL writes)
                lost = self._gen_failures.get(gen)
                if lost is not None:
                    raise lost[1]
                # a fenced writer still acknowledges what it had in flight once it lands
                if self._error is not None and gen not in self._issued_gens:
                    raise self._error
                failure = self._flush_failure
                if failure is not None and failure[0] >= gen:
                    raise failure[1]
                if self._closed and not self._threads:
                    raise DbClosed("database closed before the write became durable")
                self._wake.set()
                self._cv.wait(0.05)

    def _seal_locked(self) -> None:
        if not self._buf.empty():
            self._sealed.append((self._gen, self._buf))
            self._buf = _Buffer()
            self._gen += 1

    def flush(self) -> None:
        """Write everything buffered to the WAL now and wait until it is durable."""
        self._check_usable()
        self._flush_wal()
        self._check_usable()

    def _flush_wal(self) -> None:
        if self._window is not None:
            since = self._failure_serial
            self._wait_durable_upto(self._dispatch_wal(None, since), since)
            return
        with self._flush_lock:
            with self._lock:
                self._seal_locked()
                pending = list(self._sealed)
            for gen, buf in pending:
                try:
                    wal_id = self._wal_writer.write(buf.to_batch())
                except Fenced as e:
                    self._fail(e)
                    raise
                except StoreError as e:
                    with self._lock:
                        self._flush_failure = (gen, e)
                        self._cv.notify_all()
                    raise
                with self._lock:
                    self._sealed.pop(0)
                    self._wal_id_of_gen[gen] = wal_id
                    self._last_wal_id = wal_id
                    self._durable_gen = gen
                    if self._flush_failure is not None and self._flush_failure[0] <= gen:
                        self._flush_failure = None
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
        with self._flush_lock:
            with self._lock:
                if limit is None:
                    self._seal_locked()
                target = self._gen - 1
            issued = 0
            while limit is None or issued < limit:
                with self._lock:
                    todo = self._next_unissued_locked()
                    idle = todo is None and (limit is None or self._buf.empty())
                if idle or (todo is not None and limit is None and todo[0] > target):
                    break
                self._wait_for_room(window, since)
                if todo is None:
                    with self._lock:
                        self._seal_locked()
                        todo = self._next_unissued_locked()
                    if todo is None:
                        break
                gen, buf = todo
                data = self._wal_writer.encode(buf.to_batch())
                with self._lock:
                    self._issued_gens.add(gen)
                try:
                    window.submit(data, functools.partial(self._on_wal_done, gen))
                except BaseException:
                    with self._lock:
                        self._issued_gens.discard(gen)
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
                failure = self._failure_locked(since)
                if failure is not None:
                    raise failure

    def _next_unissued_locked(self) -> tuple[int, _Buffer] | None:
        """The oldest sealed generation not yet given to the window (landed ones leave _sealed)."""
        for gen, buf in self._sealed:
            if gen not in self._issued_gens:
                return gen, buf
        return None

    def _on_wal_done(self, gen: int, wal_id: int, err: BaseException | None) -> None:
        """A window thread's report on generation ``gen`` at ``wal_id``."""
        final = err is not None and (
            isinstance(err, (Fenced, WalEpochConflict)) or not isinstance(err, SlateDBError)
        )
        with self._lock:
            if err is None:
                self._issued_gens.discard(gen)
                self._gen_failures.pop(gen, None)
                self._wal_id_of_gen[gen] = wal_id
                self._landed_gens.add(gen)
                self._sealed = [(g, b) for g, b in self._sealed if g != gen]
                while self._durable_gen + 1 in self._landed_gens:
                    self._durable_gen += 1
                    self._landed_gens.discard(self._durable_gen)
                    self._last_wal_id = self._wal_id_of_gen[self._durable_gen]
            else:
                self._failure_serial += 1
                self._gen_failures[gen] = (self._failure_serial, err)
                if final:
                    self._issued_gens.discard(gen)
            self._cv.notify_all()
        if final:
            assert err is not None
            self._fail(err)

    def _failure_locked(self, since: int, upto: int | None = None) -> BaseException | None:
        """The failure of the oldest generation (<= ``upto``) not landed whose last attempt
        failed after failure number ``since``."""
        failed = [
            (g, err) for g, (serial, err) in self._gen_failures.items()
            if serial > since and (upto is None or g <= upto)
        ]
        return min(failed, key=lambda f: f[0])[1] if failed else None

    def _wait_durable_upto(self, target: int, since: int = 0) -> None:
        """Wait until every generation <= ``target`` is durable (contiguously in the WAL); raise
        a failure of one of them reported after failure number ``since`` (an older one is being
        retried: its outcome is awaited)."""
        with self._lock:
            while self._durable_gen < target:
                if self._error is not None:
                    raise self._error
                failure = self._failure_locked(since, target)
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
                    self._dispatch_wal(self._window.size, self._failure_serial)
                else:
                    self._flush_wal()
            except (Fenced, WalEpochConflict, WalWindowClosed):
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
        self._imm_bytes += _resident_bytes(imm)
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
        """Commit the replay point up to the last WAL id whose L0 SST has passed its GC check
        (a memtable flush's own commit carries only the previous flushes', see _flush_one)."""
        confirmed = self._confirmed_wal_id
        if self._error is not None or confirmed <= self._fm.stored.manifest.replay_after_wal_id:
            return
        epoch = self._fm.epoch

        def change(m: Manifest, next_id: int) -> Manifest | None:
            if m.replay_after_wal_id >= confirmed:
                return None
            m = dataclasses.replace(m, replay_after_wal_id=confirmed)
            return writer_checkpoint(m, next_id, epoch)

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
        wal_id = self._wal_id_of_gen.get(gen, self._last_wal_id if gen == 0 else 0)
        self._await_l0_room()
        # A retry of this flush reuses the SST of the failed attempt: that attempt's commit may
        # have landed (an ambiguous answer, or a failure after it such as the GC-boundary
        # read), and a fresh SST would name the same rows twice and leave the first one never
        # checked against the GC boundary (it could be deleted while the manifest names it).
        pending = self._imm_sst.get(id(imm))
        if pending is None:
            data, info = encode_sst(imm.batch, self._sst_options)
            pending = self._imm_sst[id(imm)] = (self._write_sst(data, info), data)
        sst, data = pending
        epoch = self._fm.epoch
        max_seq = imm.max_seq or 0

        # The replay point moves past this flush's WAL SSTs only in a later commit, after the GC
        # check below: a writer that dies between this commit and that check may leave an SST
        # that a concurrent GC pass deletes, and its rows must then still be in the replayed WAL
        # (the next writer drops the SST, see _repair_l0_behind_gc_boundary).
        confirmed = self._confirmed_wal_id

        def change(m: Manifest, next_id: int) -> Manifest | None:
            if m.sst(sst.id) is not None:
                return None  # committed by an earlier attempt of this flush
            view = SstView(view_id=sst.id, sst_id=sst.id)
            m = dataclasses.replace(
                m,
                ssts=(*m.ssts, sst),
                l0=(view, *m.l0),
                replay_after_wal_id=max(m.replay_after_wal_id, confirmed),
                # only the contiguous prefix: ids past it may be holes a next writer must fence
                next_wal_sst_id=max(m.next_wal_sst_id, self._last_wal_id + 1),
                # our fence is complete: the next writer need only cover our own window
                max_parallel_writes=self.options.max_parallel_writes,
                last_l0_seq=max(m.last_l0_seq, max_seq),
            )
            return writer_checkpoint(m, next_id, epoch)

        stored = self._commit(change)
        self._secure_from_gc(sst, lambda: data)
        self._confirmed_wal_id = max(self._confirmed_wal_id, wal_id)
        with self._lock:
            state = self._state
            imms = tuple(i for i in state.imm if i is not imm)
            self._install_locked(stored, imms)
            self._imm_bytes = sum(map(_resident_bytes, imms))
            self._imm_gen.pop(id(imm), None)
            self._imm_sst.pop(id(imm), None)
            for g in [g for g in self._wal_id_of_gen if g < gen]:
                del self._wal_id_of_gen[g]
            self._cv.notify_all()

    def _await_wal(self, gen: int) -> None:
        while True:
            with self._lock:
                if self._durable_gen >= gen or self._error is not None:
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

    def _secure_from_gc(self, sst: CompactedSst, data: Callable[[], bytes]) -> None:
        """After committing ``sst``, make sure no GC pass can have decided to delete it
        (protocol in :mod:`slatedb_core.meta.compacted_boundary`): if its creation time is at or
        behind the compacted boundary, rewrite it under a newer id and swap the reference."""
        current = sst
        epoch = self._fm.epoch
        while True:
            boundary = self._compacted_boundary.read()
            if current.id.milliseconds > boundary:
                return
            fresh = dataclasses.replace(
                current, id=ULID.from_timestamp(max(time.time(), (boundary + 1.5) / 1000))
            )
            log.warning(
                "SST %s is behind the GC boundary %d; re-homing it as %s",
                current.id,
                boundary,
                fresh.id,
            )
            self._create_sst(sst_path(self.path, fresh.id), data())
            old_id = current.id

            def change(
                m: Manifest, next_id: int, old_id: ULID = old_id, fresh: CompactedSst = fresh
            ) -> Manifest | None:
                swapped = replace_sst(m, old_id, fresh)
                return None if swapped is None else writer_checkpoint(swapped, next_id, epoch)

            stored = self._commit(change)
            if stored.manifest.sst(fresh.id) is None:
                return  # the old id was compacted away meanwhile: nothing references it
            current = fresh

    def _write_sst(self, data: bytes, info: SstInfo) -> CompactedSst:
        sst_id = ULID()
        self._create_sst(sst_path(self.path, sst_id), data)
        return CompactedSst(id=sst_id, info=info)

    def _create_sst(self, path: str, data: bytes) -> None:
        """Create-if-absent under a fresh ULID. "Already exists" with our bytes is our own
        earlier attempt (obstore retries a 5xx that came after the write landed, and the
        retry meets it), so it is success."""
        try:
            self.store.put_if_absent(path, data)
        except ObjectAlreadyExists:
            if self.store.get(path).data != data:
                raise

    def _commit(self, change: IdChange) -> StoredManifest:
        try:
            return self._fm.update_at(change)
        except Fenced as e:
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
            except Fenced:
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
                latest = self._commit(lambda m, next_id: writer_checkpoint(m, next_id, epoch))
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
