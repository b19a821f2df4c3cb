"""``Db``: the writer of one database.

Write path (seed 001 "Writes", "Acknowledgements"; seed 003 "Writers")::

    put -> memtable (visible to reads at once) + WAL buffer (generation g)
        -> WAL flusher: seal buffer g, write wal/{id}.sst by create-if-absent, mark g durable
        -> put(await_durable=True) returns once g is durable
    memtable full -> freeze (under the write lock, together with sealing its WAL buffer)
        -> L0 flusher: encode compacted/{ulid}.sst, then ONE fenced manifest update that adds the L0
           view, advances replay_after_wal_id to the WAL id holding the memtable's last entries,
           raises last_l0_seq and re-establishes the writer checkpoint

State shared with readers is an immutable :class:`~slatedb_core.dbstate.DbState` swapped under
``_lock``. Three background threads: WAL flusher, L0 flusher, manifest poller. Any of them that
learns this writer is fenced records it; every later write raises ``Fenced`` and nothing more is
acknowledged.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import pyarrow as pa
from ulid import ULID

from slatedb_core.bulk import arrow_entries, split_for_ssts
from slatedb_core.checkpoints import checkpoint_change
from slatedb_core.dbstate import DbState, SstHandle, build_handles, sst_path
from slatedb_core.entries import ENTRY_SCHEMA, batch_from_lists, sort_dedup
from slatedb_core.errors import (
    Fenced,
    InvalidArgument,
    ManifestVersionExists,
    ObjectAlreadyExists,
    SlateDBError,
    StoreError,
)
from slatedb_core.iterators import iter_rows
from slatedb_core.manifest.model import Checkpoint, CompactedSst, Manifest, SstInfo, SstView
from slatedb_core.manifest.store import FencedManifest, IdChange, ManifestStore, StoredManifest
from slatedb_core.memtable import ImmutableMemtable, Memtable
from slatedb_core.options import (
    CheckpointCreateResult,
    CheckpointOptions,
    CheckpointScope,
    DbOptions,
)
from slatedb_core.sst import BlockCache, SstOptions, encode_sst
from slatedb_core.store.objectstore import ObjectStore, validate_relative_path
from slatedb_core.wal import WalLog, WalWriter, fence_wal
from slatedb_core.writebatch import WriteBatch

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
# bytes headers): ~250 bytes against the 16 that size_bytes counts toward the SST size.
_RESIDENT_OVERHEAD_PER_ENTRY = 250


def _resident_bytes(imm: ImmutableMemtable) -> int:
    """What a frozen memtable really holds in memory, for backpressure (not for SST sizing)."""
    return int(imm.size_bytes + imm.entry_count * _RESIDENT_OVERHEAD_PER_ENTRY)


def _sst_views(m: Manifest) -> tuple[object, ...]:
    return (
        tuple(v.view_id for v in m.l0),
        tuple((r.id, tuple(v.view_id for v in r.views)) for r in m.compacted),
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


class Db:
    """The single writer of a database. Use :meth:`open`; thread-safe."""

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
        self._imm_gen: dict[int, int] = {}  # id(ImmutableMemtable) -> last WAL generation
        self._last_wal_id = 0
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
        self._imm_bytes = 0
        self.manifests = ManifestStore(store, path, format_version=options.manifest_format_version)
        self.wal = WalLog(store, path)
        self._fm: FencedManifest
        self._wal_writer: WalWriter
        self._state: DbState

    # ---- opening ---------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str, store: ObjectStore, options: DbOptions | None = None) -> Db:
        """Open (creating if absent) the database at ``path`` as its writer, fencing older ones."""
        db = cls(path, store, options or DbOptions())
        db._recover()
        db._start()
        return db

    def _recover(self) -> None:
        if self.manifests.try_read_latest() is None:
            try:
                self.manifests.create_initial(Manifest())
            except ManifestVersionExists:
                pass  # another opener created it first
        # 1. bump the writer epoch together with our writer checkpoint (seed 003)
        self._fm = FencedManifest.init_writer(
            self.manifests, extra=lambda m, next_id: writer_checkpoint(m, next_id, m.writer_epoch)
        )
        epoch = self._fm.epoch
        m = self._fm.stored.manifest
        # 2. fence older writers with an empty WAL SST at the next free id (seed 001)
        existing = self.wal.list_ids(after=m.replay_after_wal_id)
        start = max([m.next_wal_sst_id, m.replay_after_wal_id + 1, *(i + 1 for i in existing[-1:])])
        fence_id = fence_wal(self.wal, epoch, start, self._sst_options)
        # 3. replay every WAL SST after replay_after_wal_id up to our fence (listed again: older
        #    writers may have taken slots while we were fencing)
        memtable = Memtable()
        max_seq = m.last_l0_seq
        for wal_id in self.wal.list_ids(after=m.replay_after_wal_id):
            if wal_id >= fence_id:
                break
            for batch in self.wal.read(wal_id).entries.to_batches():
                memtable.put_batch(batch)
        top = memtable.max_seq
        max_seq = max(max_seq, top if top is not None else 0)
        self._seq = max_seq
        self._last_wal_id = fence_id
        self._wal_writer = WalWriter(self.wal, epoch, fence_id + 1, self._sst_options)
        stored = self._fm.stored
        l0, runs, handles = build_handles(self.store, self.path, stored.manifest, self._cache)
        self._handles = handles
        self._state = DbState(stored, memtable, (), l0, runs)
        if not memtable.is_empty():
            # replayed entries are durable already: they live in WAL SSTs <= fence_id
            self._wal_id_of_gen[0] = fence_id

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

    # ---- checks ----------------------------------------------------------------------------
    def _check_usable(self) -> None:
        if self._closed:
            raise DbClosed(f"database {self.path!r} is closed")
        if self._error is not None:
            raise self._error

    def _check_key(self, key: object) -> bytes:
        if type(key) is not bytes:
            if isinstance(key, bytes | bytearray | memoryview):
                key = bytes(key)
            else:
                raise InvalidArgument(f"keys must be bytes, got {type(key).__name__}")
        assert isinstance(key, bytes)
        if not 0 < len(key) <= self.options.max_key_bytes:
            raise InvalidArgument(
                f"key length {len(key)} outside 1..{self.options.max_key_bytes} bytes"
            )
        return key

    def _check_value(self, value: object) -> bytes:
        if type(value) is not bytes:
            if isinstance(value, bytes | bytearray | memoryview):
                value = bytes(value)
            else:
                raise InvalidArgument(f"values must be bytes, got {type(value).__name__}")
        assert isinstance(value, bytes)
        if len(value) > self.options.max_value_bytes:
            raise InvalidArgument(
                f"value length {len(value)} exceeds {self.options.max_value_bytes} bytes"
            )
        return value

    # ---- writes ----------------------------------------------------------------------------
    def put(self, key: bytes, value: bytes, *, await_durable: bool = True) -> None:
        """Write ``key``; by default returns once the write is durable in a WAL SST."""
        # The hottest path of the engine: checks and bookkeeping inlined (profiled: ~2x faster
        # than going through _apply with one-element lists).
        if type(key) is not bytes or not 0 < len(key) <= self._max_key:
            key = self._check_key(key)
        if type(value) is not bytes or len(value) > self._max_value:
            value = self._check_value(value)
        with self._lock:
            if self._closed or self._error is not None or self._imm_bytes >= self._max_unflushed:
                self._backpressure_locked()
            seq = self._seq = self._seq + 1
            memtable = self._state.memtable
            memtable.put(key, seq, value)
            buf = self._buf
            buf.keys.append(key)
            buf.seqs.append(seq)
            buf.values.append(value)
            buf.nbytes += len(key) + len(value) + 16
            gen = self._gen
            if buf.nbytes >= self._wal_size and not self._wake.is_set():
                self._wake.set()
            if memtable.size_bytes >= self._l0_size:
                self._freeze_locked()
        if await_durable:
            self._await_durable(gen)

    def delete(self, key: bytes, *, await_durable: bool = True) -> None:
        key = self._check_key(key)
        gen = self._apply([key], [None], len(key))
        if await_durable:
            self._await_durable(gen)

    def write(self, batch: WriteBatch, *, await_durable: bool = True) -> None:
        """Apply a WriteBatch atomically: readers and recovery see all of it or none of it."""
        if not isinstance(batch, WriteBatch):
            raise InvalidArgument(f"write() takes a WriteBatch, got {type(batch).__name__}")
        if not batch.keys:
            return
        # WriteBatch already guarantees bytes; only lengths are left to check, in bulk.
        keys, values = batch.keys, batch.values
        klens = list(map(len, keys))
        if min(klens) == 0 or max(klens) > self._max_key:
            raise InvalidArgument(f"key lengths must be 1..{self._max_key} bytes")
        present = [v for v in values if v is not None]
        vbytes = sum(map(len, present))
        if present and max(map(len, present)) > self._max_value:
            raise InvalidArgument(f"a value exceeds {self._max_value} bytes")
        gen = self._apply(keys, values, sum(klens) + vbytes)
        if await_durable:
            self._await_durable(gen)

    def _apply(self, keys: Sequence[bytes], values: Sequence[bytes | None], nbytes: int) -> int:
        # Invariant readers rely on: seqs are assigned under the lock in the same order writes
        # enter the WAL buffer, so WAL ids and seqs increase together.
        with self._lock:
            self._check_usable()
            self._backpressure_locked()
            seq = self._seq
            memtable = self._state.memtable
            buf = self._buf
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
            return self._after_write_locked()

    def _after_write_locked(self) -> int:
        gen = self._gen
        if self._buf.nbytes >= self._wal_size and not self._wake.is_set():
            self._wake.set()
        if self._state.memtable.size_bytes >= self.options.l0_sst_size_bytes:
            self._freeze_locked()
        return gen

    def _backpressure_locked(self) -> None:
        """Block the writer while frozen memtables not yet in L0 exceed max_unflushed_bytes."""
        while (
            self._imm_bytes >= self._max_unflushed
            and self._state.imm
            and self._error is None
            and not self._closed
        ):
            self._l0_wake.set()
            self._cv.wait(0.05)
        self._check_usable()

    def put_arrow(
        self,
        data: pa.Table | pa.RecordBatch,
        key_column: str = "key",
        value_column: str = "value",
        *,
        await_durable: bool = True,
    ) -> int:
        """Write every row of an Arrow table (binary key and value columns; a null value deletes
        its key). Atomic like a WriteBatch; later rows win over earlier rows with the same key.
        Returns the number of rows written."""
        entries = arrow_entries(data, key_column, value_column, self.options)
        n: int = entries.num_rows
        if n == 0:
            return 0
        with self._lock:
            self._check_usable()
            self._backpressure_locked()
            first = self._seq + 1
            self._seq += n
            batch = entries.set_column(1, "seq", pa.array(range(first, first + n), pa.uint64()))
            self._state.memtable.put_batch(batch)
            self._buf.batches.append(batch)
            self._buf.nbytes += batch.nbytes
            gen = self._after_write_locked()
        if await_durable:
            self._await_durable(gen)
        return n

    # ---- durability ------------------------------------------------------------------------
    def _await_durable(self, gen: int) -> None:
        with self._lock:
            while self._durable_gen < gen:
                if self._error is not None:
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
                self._flush_wal()
            except Fenced:
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
        """Flush the memtable to an L0 SST and record it in the manifest now."""
        self._check_usable()
        with self._lock:
            self._freeze_locked()
        self._flush_imms()
        self._check_usable()

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
        data, info = encode_sst(imm.batch, self._sst_options)
        sst = self._write_sst(data, info)
        epoch = self._fm.epoch
        max_seq = imm.max_seq or 0

        def change(m: Manifest, next_id: int) -> Manifest:
            view = SstView(view_id=sst.id, sst_id=sst.id)
            m = dataclasses.replace(
                m,
                ssts=(*m.ssts, sst),
                l0=(view, *m.l0),
                replay_after_wal_id=max(m.replay_after_wal_id, wal_id),
                next_wal_sst_id=max(m.next_wal_sst_id, self._wal_writer.next_id),
                last_l0_seq=max(m.last_l0_seq, max_seq),
            )
            return writer_checkpoint(m, next_id, epoch)

        stored = self._commit(change)
        with self._lock:
            state = self._state
            imms = tuple(i for i in state.imm if i is not imm)
            self._install_locked(stored, imms)
            self._imm_bytes = sum(map(_resident_bytes, imms))
            self._imm_gen.pop(id(imm), None)
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
                log.warning("%r: L0 holds %d SSTs (l0_max_ssts); memtable flushes wait for a "
                            "compactor", self.path, len(self._state.manifest.manifest.l0))
                warned = True
            self._refresh()
            time.sleep(self.options.manifest_poll_interval.total_seconds())

    def _write_sst(self, data: bytes, info: SstInfo) -> CompactedSst:
        sst_id = ULID()
        path = sst_path(self.path, sst_id)
        try:
            self.store.put_if_absent(path, data)
        except ObjectAlreadyExists:
            if self.store.get(path).data != data:
                raise
        return CompactedSst(id=sst_id, info=info)

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

    # ---- bulk ingest -----------------------------------------------------------------------
    def bulk_ingest(
        self, data: pa.Table | pa.RecordBatch, key_column: str = "key", value_column: str = "value"
    ) -> BulkIngestStats:
        """Sort ``data``, write it as SSTs directly and commit them with one fenced manifest
        update (no WAL). For large inputs; a fenced writer's ingest fails and leaves nothing
        visible (its SSTs are unreferenced garbage for GC)."""
        entries = arrow_entries(data, key_column, value_column, self.options)
        if entries.num_rows == 0:
            return BulkIngestStats(0, 0, 0, self._state.manifest.id)
        # Holding the L0 lock from the reservation to the commit keeps any newer memtable from
        # reaching L0 behind (i.e. older than) the ingested views.
        with self._l0_lock:
            return self._bulk_ingest_locked(entries)

    def _bulk_ingest_locked(self, entries: pa.RecordBatch) -> BulkIngestStats:
        n = entries.num_rows
        with self._lock:
            self._check_usable()
            first = self._seq + 1
            self._seq += n
            # Writes before this point are older than the ingested rows: they go to L0 first,
            # so the new views can be put in front of them.
            self._freeze_locked()
        batch = entries.set_column(1, "seq", pa.array(range(first, first + n), pa.uint64()))
        sorted_batch = sort_dedup(batch)
        ssts: list[CompactedSst] = []
        written = 0
        for part in split_for_ssts(sorted_batch, self.options.l0_sst_size_bytes):
            blob, info = encode_sst(part, self._sst_options)
            ssts.append(self._write_sst(blob, info))
            written += len(blob)
        self._flush_imms_locked()
        self._check_usable()
        epoch = self._fm.epoch
        last = first + n - 1

        def change(m: Manifest, next_id: int) -> Manifest:
            views = tuple(SstView(view_id=s.id, sst_id=s.id) for s in reversed(ssts))
            m = dataclasses.replace(
                m, ssts=(*m.ssts, *ssts), l0=(*views, *m.l0), last_l0_seq=max(m.last_l0_seq, last)
            )
            return writer_checkpoint(m, next_id, epoch)

        stored = self._commit(change)
        with self._lock:
            self._install_locked(stored, self._state.imm)
        return BulkIngestStats(n, len(ssts), written, stored.id)

    # ---- checkpoints -----------------------------------------------------------------------
    def create_checkpoint(
        self,
        scope: CheckpointScope = CheckpointScope.ALL,
        options: CheckpointOptions | None = None,
    ) -> CheckpointCreateResult:
        """Pin the database as of now (seed 003). ALL flushes the WAL and the memtable first, so the
        checkpoint holds every write issued before the call; DURABLE takes what the manifest holds."""
        self._check_usable()
        if scope is CheckpointScope.ALL:
            self.flush()
            self.flush_memtable()
        cid = uuid.uuid4()
        change = checkpoint_change(options or CheckpointOptions(), time.time(), cid)
        stored = self._commit(change)
        with self._lock:
            if stored.id > self._state.manifest.id:
                self._install_locked(stored, self._state.imm)
        cp = stored.manifest.checkpoint(cid)
        assert cp is not None
        return CheckpointCreateResult(cp.id, cp.manifest_id)

    # ---- reads -----------------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        """The latest value of ``key`` (including writes not yet durable), or None."""
        key = self._check_key(key)
        if self._closed:
            raise DbClosed(f"database {self.path!r} is closed")
        return self._state.get(key)

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        state = self._state
        if self._closed:
            raise DbClosed(f"database {self.path!r} is closed")
        return [state.get(self._check_key(k)) for k in keys]

    def _check_range(self, start: bytes | None, end: bytes | None) -> None:
        if self._closed:
            raise DbClosed(f"database {self.path!r} is closed")
        for name, b in (("start", start), ("end", end)):
            if b is not None and not isinstance(b, bytes):
                raise InvalidArgument(f"scan {name} must be bytes or None")

    def scan(
        self, start: bytes | None = None, end: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs with ``start <= key < end`` in key order (None = unbounded)."""
        self._check_range(start, end)
        return iter_rows(self._state.scan(start, end))

    def scan_arrow(
        self, start: bytes | None = None, end: bytes | None = None, batch_size: int = 65536
    ) -> pa.RecordBatchReader:
        """The same as :meth:`scan`, as Arrow record batches of (key, value)."""
        self._check_range(start, end)
        if batch_size <= 0:
            raise InvalidArgument("batch_size must be > 0")
        batches = self._state.scan(start, end, batch_size=batch_size)
        return pa.RecordBatchReader.from_batches(
            KV_SCHEMA,
            (
                pa.RecordBatch.from_arrays([b.column(0), b.column(3)], schema=KV_SCHEMA)
                for b in batches
                if b.num_rows
            ),
        )

    # ---- introspection ---------------------------------------------------------------------
    @property
    def writer_epoch(self) -> int:
        return self._fm.epoch

    @property
    def manifest(self) -> StoredManifest:
        return self._state.manifest

    # ---- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        """Flush buffered writes to the WAL and stop background work. Idempotent."""
        if self._closed:
            return
        try:
            if self._compactor is not None:
                self._compactor.stop()
            if self._error is None:
                self._flush_wal()
        finally:
            with self._lock:
                self._closed = True
                self._cv.notify_all()
            self._stop.set()
            self._wake.set()
            self._l0_wake.set()
            for t in self._threads:
                if t is not threading.current_thread():
                    t.join(timeout=30)
            self._threads.clear()

    def _simulate_crash(self) -> None:
        """Stop as a killed process would: no flush, buffered writes lost (tests, simulation)."""
        if self._compactor is not None:
            self._compactor.stop()
        with self._lock:
            self._closed = True
            self._error = self._error or DbClosed("crashed")
            self._cv.notify_all()
        self._stop.set()
        self._wake.set()
        self._l0_wake.set()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=30)
        self._threads.clear()

    def __enter__(self) -> Db:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Db({self.path!r}, store={self.store.url!r}, epoch={self._fm.epoch})"
