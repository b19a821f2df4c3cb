"""``Db``: the writer of one database.

Write path (SlateDB RFC 0001 "Writes", "Acknowledgements"; SlateDB RFC 0004 "Writers")::

    put -> memtable (visible to reads at once) + WAL buffer (generation g)
        -> WAL flusher: seal buffer g, write wal/{id}.sst by create-if-absent, mark g durable
        -> put(await_durable=True) returns once g is durable
    memtable full -> freeze (under the write lock, together with sealing its WAL buffer)
        -> L0 flusher: encode compacted/{ulid}.sst, then ONE fenced manifest update that adds the L0
           view, advances replay_after_wal_id to the WAL id holding the memtable's last entries,
           raises last_l0_seq and re-establishes the writer checkpoint

With ``DbOptions.max_parallel_writes`` N > 1 (SlateDB RFC 0001 "Parallel Writes") the WAL flusher seals
a generation whenever the WAL window has room and hands it to one of up to N creates in flight at
consecutive ids; a durable put returns when *its* SST lands, possibly before an earlier one. The
memtable flush still waits for the contiguous watermark, so the replay point never passes a hole.

State shared with readers is an immutable :class:`~slatedb_core.lsm.dbstate.DbState` swapped under
the engine's lock. Three background threads: WAL flusher, L0 flusher, manifest poller. Any of them that
learns this writer is fenced records it; every later write and read raises ``Fenced`` (a read
would serve writes that never became durable, see ``Db._readable_state``) and nothing more is
acknowledged, and ``close()`` raises it too (buffered writes are never dropped silently). A thread
that dies on an unexpected error fails the writer the same way with ``BackgroundThreadDied``.

Where it lives: this module has ``Db``'s public API (opening, argument checks, writes,
checkpoints, reads, closing). ``Db`` is composed of parts that each own their state and talk
through methods, none a base class of another:

* a :class:`~slatedb_core.writer.engine.WriterEngine`: the state, seqs, writes into the memtable
  and the WAL buffer under its lock, memtable and L0 flushes, manifest commits and polling,
  closing; it holds a :class:`~slatedb_core.wal.flusher.WalFlusher` (the WAL buffer, its flush
  and durability, and the writer's lock and failure state) and calls its methods;
* a :class:`~slatedb_core.writer.ingest.WriterIngest` (bulk ingest, ``ingest_ssts``,
  ``record_transactions``), given the engine, whose methods it calls.

A test harness runs the background work itself through the seam of
:mod:`slatedb_core.writer.hooks` (``Db.open(hooks=...)``), never by reaching into these parts.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from types import TracebackType

import pyarrow as pa

from slatedb_core.checkpoints import (
    CheckpointCreateResult,
    checkpoint_change,
    covered_wal,
    without_writer_checkpoints,
)
from slatedb_core.errors import (
    DatabaseDestroyed,
    InvalidArgument,
    MergeOperatorMissing,
    ObjectNotFound,
)
from slatedb_core.feed import ChangeBatch, ChangeFeed, ChangesOptions, Cursor
from slatedb_core.keys import clip_scan
from slatedb_core.lifecycle.destroy import destroy as destroy_database
from slatedb_core.lsm.arrow_rows import arrow_entries
from slatedb_core.lsm.dbstate import DbState
from slatedb_core.lsm.entries import KV_SCHEMA
from slatedb_core.lsm.iterators import iter_rows
from slatedb_core.lsm.memtable_fold import Entry
from slatedb_core.lsm.merge_operator import MergeOperator, resolve_merge_operator
from slatedb_core.lsm.row_model import (
    KIND_MERGE,
    KIND_VALUE,
    ROW_SCHEMA,
    now_ms,
)
from slatedb_core.manifest.model import AppVersion, Manifest
from slatedb_core.manifest.store import StoredManifest
from slatedb_core.options import (
    CheckpointOptions,
    CheckpointScope,
    DbOptions,
    check_instance,
    check_int,
    check_key_list,
    check_optional,
)
from slatedb_core.store.objectstore import ObjectStore, check_store
from slatedb_core.wal.flusher import WalFlusher
from slatedb_core.writer import malloc_tuning
from slatedb_core.writer.batch import WriteBatch
from slatedb_core.writer.engine import WriterEngine, still_missing
from slatedb_core.writer.hooks import WriterHooks
from slatedb_core.writer.ingest import WriterIngest
from slatedb_core.writer.ttl import (
    NoExpiry,
    Ttl,
    check_ttl,
    is_plain,
    timestamp_columns,
)
from slatedb_core.writer.types import BulkIngestStats

log = logging.getLogger(__name__)

__all__ = ["Db"]


class Db:
    """The single writer of a database. Use :meth:`open`; thread-safe."""

    def __init__(
        self,
        path: str,
        store: ObjectStore,
        options: DbOptions,
        flusher: type[WalFlusher] = WalFlusher,
    ) -> None:
        # the parts, each owning its state: the engine (state, seqs, WAL and memtable flushes,
        # commits) and the bulk paths it serves; Db checks arguments and delegates
        engine = WriterEngine(path, store, options, flusher)
        self._engine = engine
        self._ingest = WriterIngest(engine)
        self.path = engine.path
        self.store = store
        self.options = options
        self.manifests = engine.manifests
        self.wal = engine.wal
        # hot-path copies (put, get): option values and bound methods of the engine
        self._max_key = options.max_key_bytes
        self._max_value = options.max_value_bytes
        self._put_value = engine.put_value
        self._await_durable = engine.await_durable
        self._close_lock = threading.Lock()  # a second close() waits for the first's outcome

    # ---- opening ---------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: str,
        store: ObjectStore,
        options: DbOptions | None = None,
        *,
        if_manifest_id: int | None = None,
        hooks: WriterHooks | None = None,
    ) -> Db:
        """Open (creating if absent) the database at ``path`` as its writer, fencing older ones.

        ``if_manifest_id``: open only if the latest manifest is still that version (the epoch
        bump is committed on top of it or not at all): PreconditionFailed, having written and
        fenced nothing, if it changed (a writer opened since it was read, say). The database
        must exist.

        ``hooks``: a test harness's seam (:class:`~slatedb_core.writer.hooks.WriterHooks`): the
        simulation runs the background work itself, as steps."""
        check_store(store)
        check_optional("options", options, DbOptions)
        if if_manifest_id is not None:
            if_manifest_id = check_int("if_manifest_id", if_manifest_id, lo=1)
        options = options or DbOptions()
        merge_op = resolve_merge_operator(options.merge_operator)  # an unknown name: refused
        if options.glibc_malloc_threshold_bytes is not None:
            malloc_tuning.apply_glibc_malloc_threshold(options.glibc_malloc_threshold_bytes)
        hooks = hooks or WriterHooks()
        db = cls(path, store, options, hooks.flusher)
        db._merge_op = merge_op
        db._default_ttl = options.default_ttl
        engine = db._engine
        engine.recover(if_manifest_id)
        engine.use_window(hooks.window)
        if hooks.background:
            engine.start()
        hooks.steps = engine.steps()
        return db

    # ---- checks ----------------------------------------------------------------------------

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
    _merge_op: MergeOperator | None = None
    """``DbOptions.merge_operator``, resolved at open (SlateDB RFC 0006)."""
    _default_ttl: int | None = None
    """``DbOptions.default_ttl`` (ms; SlateDB RFC 0003)."""

    def put(self, key: bytes, value: bytes, *, ttl: Ttl = None, await_durable: bool = True) -> None:
        """Write ``key``; by default returns once the write is durable in a WAL SST.

        ``ttl`` (SlateDB's ``PutOptions.ttl``, RFC 0003; :mod:`slatedb_core.writer.ttl`): None,
        the database's ``default_ttl``; ``NO_EXPIRY``; or ms (or a timedelta) after the write,
        when SlateDB's flushes and compactions turn the row into a tombstone."""
        if await_durable is not True and await_durable is not False:
            _refuse_await(await_durable)
        if ttl is not None or self._default_ttl is not None:
            # (checked here: _write_special reads a None value as a batch's delete)
            value = self._check_value(value)
            gen = self._write_special([key], [value], {0: (KIND_VALUE, check_ttl("ttl", ttl))})
            if await_durable:
                self._await_durable(gen)
            return
        # The hottest path of the engine: checks inlined, then the engine's put_value (the
        # range check and the bookkeeping under its lock).
        if type(key) is not bytes or not 0 < len(key) <= self._max_key:
            key = self._check_key(key)
        if type(value) is not bytes or len(value) > self._max_value:
            value = self._check_value(value)
        gen = self._put_value(key, value)
        if await_durable:
            self._await_durable(gen)

    def merge(
        self, key: bytes, operand: bytes, *, ttl: Ttl = None, await_durable: bool = True
    ) -> None:
        """Write a merge operand for ``key`` (SlateDB's ``Db::merge``, RFC 0006): reads return
        the key's value folded with its operands by ``DbOptions.merge_operator``. ``ttl`` as
        for :meth:`put`. Without a merge operator it is refused (``MergeOperatorMissing``),
        having written nothing, as SlateDB refuses it."""
        if await_durable is not True and await_durable is not False:
            _refuse_await(await_durable)
        if type(key) is not bytes:
            key = self._check_key(key)
        operand = self._check_value(operand)  # a None operand is no delete
        gen = self._write_special([key], [operand], {0: (KIND_MERGE, check_ttl("ttl", ttl))})
        if await_durable:
            self._await_durable(gen)

    def _write_special(
        self,
        keys: Sequence[bytes],
        values: Sequence[bytes | None],
        specials: dict[int, tuple[int, int | NoExpiry | None]],
    ) -> int:
        """Apply operations of which some carry a TTL or are merges (``specials``: index ->
        kind and checked ttl; the others are puts, or deletes for a None value, under the
        default TTL). Each gets its own seq, as any write here; a row with an ``expire_ts`` or a
        merge operand becomes a :class:`~slatedb_core.lsm.row_model.Version` in the memtable
        and a ROW_SCHEMA row of the WAL (created at the write's clock tick, SlateDB RFC 0003),
        the rest take the plain path (:meth:`WriterEngine.apply_versions
        <slatedb_core.writer.engine.WriterEngine.apply_versions>`). Checked whole before
        anything is written."""
        keys = [self._check_key(k) for k in keys]
        values = [None if v is None else self._check_value(v) for v in values]
        self._engine.check_range_keys(keys)
        op = self._merge_op
        if op is None:
            for i, (kind, _) in specials.items():
                if kind == KIND_MERGE:
                    raise MergeOperatorMissing(
                        keys[i],
                        "; Db.merge needs DbOptions.merge_operator (SlateDB refuses it too)",
                    )
        return self._engine.apply_versions(keys, values, specials, op, self._default_ttl)

    def delete(self, key: bytes, *, await_durable: bool = True) -> None:
        """Delete ``key`` (write a tombstone); by default wait until the delete is durable."""
        if await_durable is not True and await_durable is not False:
            _refuse_await(await_durable)
        key = self._check_key(key)
        self._engine.check_range_keys([key])
        gen = self._engine.apply([key], [None], len(key))
        if await_durable:
            self._await_durable(gen)

    def write(self, batch: WriteBatch, *, await_durable: bool = True) -> None:
        """Apply a WriteBatch atomically: readers and recovery see all of it or none of it."""
        if await_durable is not True and await_durable is not False:
            _refuse_await(await_durable)
        if not isinstance(batch, WriteBatch):
            raise InvalidArgument(f"write() takes a WriteBatch, got {type(batch).__name__}")
        if not batch.keys:
            self._engine.check_usable()  # an empty write of a closed or fenced writer raises too
            return
        if batch.specials is not None or self._default_ttl is not None:
            gen = self._write_special(batch.keys, batch.values, batch.specials or {})
            if await_durable:
                self._await_durable(gen)
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
        self._engine.check_range_keys(keys)
        gen = self._engine.apply(keys, values, sum(klens) + vbytes)
        if await_durable:
            self._await_durable(gen)

    def put_arrow(
        self,
        data: pa.Table | pa.RecordBatch,
        key_column: str = "key",
        value_column: str = "value",
        *,
        ttl: Ttl = None,
        ttl_column: str | None = None,
        await_durable: bool = True,
    ) -> int:
        """Write every row of an Arrow table (binary key and value columns; a null value deletes
        its key). Atomic like a WriteBatch; later rows win over earlier rows with the same key.
        Returns the number of rows written.

        TTLs (SlateDB RFC 0003): ``ttl_column`` names an integer column of per-row TTLs in ms
        (null: ``ttl``); ``ttl`` is the TTL of the other rows, as for :meth:`put` (None: the
        database's ``default_ttl``)."""
        if await_durable is not True and await_durable is not False:
            _refuse_await(await_durable)
        entries = arrow_entries(data, key_column, value_column, self.options)
        self._engine.check_range_array(entries.column(0))
        checked_ttl = check_ttl("ttl", ttl)
        if ttl_column is not None and not isinstance(ttl_column, str):
            raise InvalidArgument(
                f"ttl_column must be a column name, got {type(ttl_column).__name__}"
            )
        timed = ttl_column is not None or not is_plain(checked_ttl, self._default_ttl)
        n: int = entries.num_rows
        if n == 0:
            self._engine.check_usable()  # as any write of a closed or fenced writer
            return 0
        if timed:
            expire, create = timestamp_columns(
                data, entries.column(2), ttl_column, checked_ttl, self._default_ttl, now_ms()
            )
            entries = pa.RecordBatch.from_arrays(
                [*entries.columns, expire, create], schema=ROW_SCHEMA
            )
        gen = self._engine.apply_batch(entries)
        if await_durable:
            self._await_durable(gen)
        return n

    # ---- bulk paths, which bypass the WAL (slatedb_core.writer.ingest) ----------------------
    def bulk_ingest(
        self,
        data: pa.Table | pa.RecordBatch,
        key_column: str = "key",
        value_column: str = "value",
        *,
        ttl: Ttl = None,
        ttl_column: str | None = None,
    ) -> BulkIngestStats:
        """Sort ``data``, write it as SSTs directly and commit them with one fenced manifest
        update (no WAL). For large inputs; a fenced writer's ingest fails and leaves nothing
        visible (its SSTs are unreferenced garbage for GC).

        TTLs (SlateDB RFC 0003) as :meth:`~slatedb_core.writer.db.Db.put_arrow` takes them:
        ``ttl_column`` an integer column of per-row TTLs in ms (null: ``ttl``), ``ttl`` the TTL
        of the other rows (None: ``DbOptions.default_ttl``); each put stores ``expire_ts`` =
        now + its TTL, and every row ``create_ts`` = now (:func:`~slatedb_core.writer.ttl.
        timestamp_columns`)."""
        return self._ingest.bulk_ingest(
            data, key_column, value_column, ttl=ttl, ttl_column=ttl_column
        )

    def ingest_ssts(
        self,
        sources: Sequence[str],
        *,
        checkpoint: CheckpointOptions | None = None,
        seqs: Sequence[int] | None = None,
        txn: AppVersion | None = None,
    ) -> BulkIngestStats:
        """Attach SST objects encoded elsewhere (e.g. by Spark tasks into a staging prefix of this
        store), oldest first, as L0 SSTs in ONE fenced manifest update.

        Every source (an SST as :func:`~slatedb_core.sst.encode_sst` writes it) is opened and its
        keys checked against this database's range before anything is copied: a bad path, a WAL
        SST or an outside key raises InvalidArgument, a garbled object CorruptionError, a
        missing one ObjectNotFound. Empty SSTs are skipped. Every row is carried whole (the row
        model, :mod:`slatedb_core.lsm.row_model`: expire_ts, create_ts, merge operands). The
        rows are committed like :meth:`bulk_ingest`:
        newer than every earlier write, older than every later one, a later source winning over
        an earlier one.

        Seqs: SlateDB orders a key's versions by seq, not by LSM position (docs/format.md,
        "Ingested SSTs"), so the ingested rows must carry seqs above every earlier write's, and
        a later source's above an earlier one's. Each source is therefore re-encoded into
        ``compacted/<ULID>.sst`` with fresh seqs (per source, ascending), keeping of each key
        what :func:`~slatedb_core.lsm.retention.retain` keeps with no snapshot (no snapshot of
        this database reads the new seqs) at the ingest's clock: the newest version, an expired
        value as a tombstone, merge operands folded with this database's merge operator
        (``DbOptions.merge_operator``; without one, a source holding operands, re-encoded or
        linked, raises MergeOperatorMissing naming the key, before anything is committed). A
        source is stamped with one seq, or, when a key keeps several versions (operands whose
        expiries differ), one seq per version depth, newest highest; unless ``seqs`` says which
        seq every row of each source already carries (``seqs[i]`` for ``sources[i]``, as a
        table ingest's staging encodes them) and those are usable: ascending (equal only
        between sources with disjoint keys) and above this writer's last seq when the commit
        starts. Then the sources are copied as
        they are with ``copy_if_absent`` (a hard link or a server-side copy) and the writer's
        seq moves past them. ``seqs`` that do not describe the sources' rows break the order
        SlateDB reads them in.

        The caller deletes the sources after this returns (the pre-commit GC check may re-home a
        copy from its source). A fenced writer raises Fenced and leaves nothing visible; copies of
        a failed ingest are garbage for GC. Returns rows (tombstones included), SSTs, bytes and
        the manifest id committed.

        ``checkpoint``: options of a checkpoint (no ``source``) committed in the SAME manifest
        update as the SSTs, pinning that manifest (SlateDB RFC 0004, "Creating a Checkpoint";
        :func:`~slatedb_core.checkpoints.checkpoint_change`): whoever reads a manifest holding
        it knows the SSTs were committed, even if this call never returned (a table ingest
        names it to commit each shard exactly once, :mod:`slatedb_core.table.ingest`). Nothing
        is committed, the checkpoint included, when there is nothing to ingest and no ``txn``.

        ``txn``: an exactly-once batch (:class:`~slatedb_core.manifest.model.AppVersion`, the
        idea of Delta Lake's transaction identifiers). When the manifest already records that
        version or a later one for ``txn.app_id``, the call is a no-op (no source is read or
        copied when the writer's manifest says so up front) and its result says
        ``already_applied`` with the ``recorded_version``. Otherwise the version is recorded in
        the SAME fenced manifest update as the SSTs (and the checkpoint): both land or neither.
        The decision is taken again in every attempt of that update, against the manifest the
        attempt builds on, so ingests of one txn racing on this database apply it once (and
        across writers, the fence decides: a fenced writer commits nothing). With nothing to
        ingest, the record (and the checkpoint) is still committed, in an update with no data:
        the batch is applied, empty. SlateDB drops the record when it rewrites the manifest
        (docs/format.md, "What a SlateDB rewrite loses")."""
        return self._ingest.ingest_ssts(sources, checkpoint=checkpoint, seqs=seqs, txn=txn)

    def record_transactions(self, records: Iterable[AppVersion]) -> None:
        """Merge exactly-once ``records`` into this database's (the highest version of each
        app wins) in one fenced manifest update with no data; nothing is committed when every
        record is already there. Each record must hold for every key of this database: records
        of several databases whose ranges it covers are combined first with
        :func:`~slatedb_core.manifest.model.combined_range_transactions` (the lowest version,
        only apps all of them have), as an overwrite's swap does when it carries the records of
        a table's old databases into the new ones (docs/format.md, "What is ours, and where it
        goes")."""
        self._ingest.record_transactions(records)

    @staticmethod
    def destroy(
        path: str, store: ObjectStore, soft: bool = True, *, wal_url: str | None = None
    ) -> None:
        """Destroy the database at ``path`` (SlateDB RFC 0004): soft marks it for the GC after fencing any
        writer; hard deletes it now (refused while a checkpoint is active). ``wal_url``: its
        separate WAL store, as :func:`slatedb_core.lifecycle.destroy.destroy` takes it."""
        destroy_database(path, store, soft, wal_url=wal_url)

    def flush(self) -> None:
        """Write everything buffered to the WAL now and wait until it is durable."""
        self._engine.flush()

    def flush_memtable(self) -> None:
        """Flush the memtable to an L0 SST and record it in the manifest now, with the WAL
        replay point past its rows."""
        self._engine.flush_memtable()

    # ---- checkpoints -----------------------------------------------------------------------
    def create_checkpoint(
        self,
        scope: CheckpointScope = CheckpointScope.ALL,
        options: CheckpointOptions | None = None,
    ) -> CheckpointCreateResult:
        """Pin the database as of now (SlateDB RFC 0004). ALL flushes the WAL and the memtable first, so the
        checkpoint holds every write issued before the call; DURABLE holds every write durable
        before the call, those still only in the WAL included (the same update raises the
        manifest's WAL bound, :func:`~slatedb_core.checkpoints.covered_wal`)."""
        self._engine.check_usable()
        check_instance("scope", scope, CheckpointScope)
        check_optional("options", options, CheckpointOptions)
        if scope is CheckpointScope.ALL:
            self.flush()
            self.flush_memtable()
        cid = uuid.uuid4()
        change = checkpoint_change(
            options or CheckpointOptions(),
            time.time(),
            cid,
            covers_wal=lambda m: covered_wal(self.store, self.path, m),
        )
        stored = self._engine.commit(change)
        self._engine.install_if_newer(stored)
        cp = stored.manifest.checkpoint(cid)
        assert cp is not None
        return CheckpointCreateResult(cp.id, cp.manifest_id)

    # ---- reads -----------------------------------------------------------------------------
    def _readable_state(self) -> DbState:
        """The state a read answers from; every read (``get``, ``get_many``, ``scan``,
        ``scan_arrow``) takes it here and nowhere else.

        Reads pass the check writes pass (the engine's ``check_usable``): ``DbClosed`` once closed, and once
        this writer has failed, the error it failed with. A fenced writer's memtable holds writes
        that never became durable and never will (the newer writer's fence took their WAL id, or
        they were acknowledged with ``await_durable=False`` and never written), so it raises
        ``Fenced`` rather than serve them, as SlateDB's ``DbInner::check_closed`` answers every
        call of a database closed by fencing with that error (SlateDB RFC 0001, "Writer
        Protocol"; issue 37, item 8). A read that took its state before the writer learned of
        the fencing (a scan being iterated) runs on: it began while the writer still owned it."""
        return self._engine.readable_state()

    def get(self, key: bytes) -> bytes | None:
        """The latest value of ``key`` (including writes not yet durable), or None. Raises
        ``Fenced`` once this writer knows it is fenced (see :meth:`_readable_state`)."""
        if type(key) is not bytes or not 0 < len(key) <= self._max_key:
            key = self._check_key(key)
        return self._engine.get(key)  # the state of _readable_state, then the range check

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """Values of ``keys``, all from one point in time: never half of a write batch.

        The keys are sorted once (duplicates looked up once) and each table is walked once
        over the keys it has not resolved yet (:meth:`DbState.get_immutable_many`)."""
        self._readable_state()  # refuse before validating: closed or fenced
        checked = check_key_list("keys", keys)
        if not checked:
            return []
        if set(map(type, checked)) != {bytes}:
            checked = [self._check_key(k) for k in checked]
        lens = list(map(len, checked))
        if min(lens) == 0 or max(lens) > self._max_key:
            checked = [self._check_key(k) for k in checked]  # raises for the first bad key
        uniq = sorted(set(checked))
        rng = self._engine.key_range
        if rng is not None and not (rng.contains(uniq[0]) and rng.contains(uniq[-1])):
            # raises for the first key outside, in call order
            self._engine.check_range_keys(checked)
        # The active memtable is the one part of a state that changes, always under the
        # engine's lock: take the state and every key's memtable entry at one instant under it,
        # then read the rest, which never changes, without the lock. An SST collected under
        # the lookup: the whole lookup again, on the reloaded state (one point in time).
        state, found = self._engine.active_entries(uniq)
        try:
            return self._lookup_many(state, found, uniq, checked)
        except ObjectNotFound as e:
            self._engine.reload_after_missing(state, e)
        state, found = self._engine.active_entries(uniq)
        try:
            return self._lookup_many(state, found, uniq, checked)
        except ObjectNotFound as e:
            raise still_missing(e) from e

    @staticmethod
    def _lookup_many(
        state: DbState,
        found: list[Entry | None] | None,
        uniq: list[bytes],
        checked: list[bytes],
    ) -> list[bytes | None]:
        """:meth:`get_many`'s answer for the sorted distinct ``uniq`` of ``checked`` from
        ``state`` and the active memtable's entries ``found`` taken with it."""
        if found is not None and any(found):  # entries are non-empty tuples
            values = {
                k: f[1] if len(f) == 2 else state.active_entry_value(k, f)
                for k, f in zip(uniq, found, strict=True)
                if f is not None
            }
            todo = [k for k, f in zip(uniq, found, strict=True) if f is None]
            if todo:
                values.update(zip(todo, state.get_immutable_many(todo), strict=True))
        else:
            got = state.get_immutable_many(uniq)
            if uniq == checked:  # asked for sorted, distinct keys: the answer is in order
                return got
            values = dict(zip(uniq, got, strict=True))
        return list(map(values.__getitem__, checked))

    def _check_range(
        self, start: bytes | None, end: bytes | None
    ) -> tuple[bytes | None, bytes | None]:
        """Validate scan bounds and clip them to a projected database's range."""
        self._readable_state()  # refuse before validating: closed or fenced
        for name, b in (("start", start), ("end", end)):
            if b is not None and not isinstance(b, bytes):
                raise InvalidArgument(f"scan {name} must be bytes or None")
        if start is not None and end is not None and end < start:
            raise InvalidArgument(f"scan end {end!r} is before start {start!r}")
        return clip_scan(self._engine.key_range, start, end)  # shared with DbReader (keys.py)

    def scan(
        self, start: bytes | None = None, end: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs with ``start <= key < end`` in key order (None = unbounded)."""
        start, end = self._check_range(start, end)
        return iter_rows(self._engine.scan_batches(self._readable_state(), start, end))

    def scan_arrow(
        self, start: bytes | None = None, end: bytes | None = None, batch_size: int = 65536
    ) -> pa.RecordBatchReader:
        """The same as :meth:`scan`, as Arrow record batches of (key, value)."""
        start, end = self._check_range(start, end)
        batch_size = check_int("batch_size", batch_size, lo=1)
        batches = self._engine.scan_batches(self._readable_state(), start, end, batch_size)
        return pa.RecordBatchReader.from_batches(
            KV_SCHEMA,
            (
                pa.RecordBatch.from_arrays([b.column(0), b.column(3)], schema=KV_SCHEMA)
                for b in batches
                if b.num_rows
            ),
        )

    def changes(
        self,
        since: Cursor | str | bytes | None = None,
        options: ChangesOptions | None = None,
    ) -> Iterator[ChangeBatch]:
        """Every committed change after ``since`` in commit order, as Arrow batches each with
        the cursor to persist after it (:mod:`slatedb_core.feed`, docs/changes.md): what is
        durable in the WAL, not what is still buffered."""
        feed = ChangeFeed(
            self.path,
            self.store,
            options,
            wal_url=self.options.wal_url,
            merge_operator=self.options.merge_operator,
        )
        return feed.changes(since)

    # ---- introspection ---------------------------------------------------------------------
    @property
    def writer_epoch(self) -> int:
        return self._engine.epoch

    @property
    def manifest(self) -> StoredManifest:
        return self._engine.manifest

    # ---- lifecycle -------------------------------------------------------------------------
    _close_error: BaseException | None = None  # what the first close() raised

    def close(self) -> None:
        """Flush buffered writes to the WAL and stop background work (both threads and WAL
        creates in flight are joined).

        Raises whatever kept buffered writes from becoming durable, so that none is dropped silently
        (review finding 8 in RELIABILITY.md): ``Fenced`` if this writer has been fenced, whether it
        learned that earlier (from a write, a commit or its manifest poller) or learns it now,
        flushing what was buffered; ``BackgroundThreadDied`` if a background thread died; the
        store's error if the last WAL flush failed. Background work is stopped either way. A second
        ``close()`` raises the same error object again (the outcome of closing does not change);
        after a clean close, or a crash, it returns at once.

        A clean close then drops this writer's checkpoint (SlateDB RFC 0004, "Writers"): it pins
        the SSTs the writer reads, and a closed writer reads none. Left behind, it would keep
        every SST of the manifest it pins from GC after a later compaction replaced them, until
        the next writer opened (tests/gc/test_after_writer_close.py). If that update fails,
        ``close()`` raises its error (``DatabaseDestroyed`` if the database was destroyed under
        this writer, else the store's): every write is durable by then, but the update may have
        landed, and reporting success could hide a manifest created in a collected path; a note on
        the error says the writes are durable (not on ``DatabaseDestroyed``: they went with the
        database). A crash leaves the checkpoint; the next writer's open replaces it. Closing
        from several threads at once: each waits for the first's outcome."""
        with self._close_lock:
            self._close()

    def _close(self) -> None:
        """:meth:`close`, one call at a time."""
        if self._engine.closed:
            if self._close_error is not None:
                raise self._close_error
            return
        failure = self._engine.close()
        if failure is not None:
            self._close_error = failure
            raise failure
        try:
            self._drop_writer_checkpoint()
        except Exception as e:
            if not isinstance(e, DatabaseDestroyed):  # its writes went with the database
                e.add_note(
                    "Every write this writer acknowledged is durable: closing failed only at "
                    "dropping its writer checkpoint (SlateDB RFC 0004), which a crash leaves "
                    "behind too. GC keeps the SSTs the checkpoint pins until the next writer to "
                    'open the database replaces it (docs/operations.md, "A writer that did not '
                    'close").'
                )
            self._close_error = e
            raise

    def _drop_writer_checkpoint(self) -> None:
        """One manifest update without our writer checkpoint, unless a newer writer holds the
        database (its open replaced ours) or it is destroyed (the destroy dropped it)."""
        epoch = self._engine.epoch

        def change(m: Manifest) -> Manifest | None:
            if m.writer_epoch != epoch or m.destroyed_at_s is not None:
                return None
            return without_writer_checkpoints(m)

        self.manifests.update(change, base=self._engine.manifest)

    def _simulate_crash(self) -> None:
        """Stop as a killed process would: no flush, buffered writes lost (tests, simulation)."""
        self._engine.simulate_crash()

    def __enter__(self) -> Db:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.close()
        except BaseException as e:
            if e is not exc:
                raise
            # the body's own error (e.g. the Fenced a put raised) propagates as it is

    def __repr__(self) -> str:
        return f"Db({self.path!r}, store={self.store.url!r}, epoch={self._engine.epoch})"


def _refuse_await(flag: object) -> None:
    """``await_durable`` is a bool: a truthy string would wait and None would acknowledge a
    write before it is durable, so anything else is refused before the write."""
    raise InvalidArgument(f"await_durable must be True or False, got {type(flag).__name__}")
