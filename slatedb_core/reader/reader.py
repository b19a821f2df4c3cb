"""``DbReader``: a read-only client of a database, usually in another process than its writer
(SlateDB RFC 0004 "Readers", SlateDB RFC 0001 "Reader Protocol"). It takes no lock of the
writer; all it shares with the writer is the object store.

What a reader serves is always one *prefix of the write history*::

    L0 views + sorted runs of one manifest M   +   WAL SSTs (M.replay_after_wal_id, N], no gaps

Everything up to ``replay_after_wal_id`` is in M's SSTs; the WAL SSTs after it are replayed in id
order into immutable in-memory tables (:class:`~slatedb_core.lsm.memtable.ImmutableMemtable`, a new
one per group of whole WAL SSTs, size-tiered up to ``max_memtable_bytes``, see
:class:`~slatedb_core.reader.wal_tables.WalTables`), so reads go through the writer's own
:class:`~slatedb_core.lsm.dbstate.DbState` with an empty, frozen active memtable. WAL SSTs are only
ever taken in unbroken id order: with a gap the reader waits for it to fill (SlateDB RFC 0001 "Parallel
Writes"), since serving SST n+1 without n would not be a prefix.

Modes (:class:`~slatedb_core.options.ReaderMode`):

* ``CHECKPOINT``: the manifest a given checkpoint pins, plus the WAL SSTs that manifest names:
  ``(replay_after_wal_id, wal_id_last_seen]``, the bound SlateDB's checkpoint reader replays to
  as well (its ``next_wal_sst_id``, decoded as ``wal_id_last_seen + 1``). A checkpoint of the
  latest state made here (``admin.create_checkpoint``, table snapshots) sets it to the durable
  WAL in the update that creates the checkpoint (:func:`~slatedb_core.checkpoints.covered_wal`);
  so do a MANAGED reader's and SlateDB's writer's commits. A checkpoint made otherwise (a raw
  manifest edit, SlateDB's ``create_detached_checkpoint``) holds the value the manifest had, and
  then the range may be short or empty. Replaying every WAL SST present instead would mix in
  writes made after the checkpoint. Never refreshed, never writes.
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
next poll after that (SlateDB RFC 0004: "removes the previous checkpoint once any ongoing reads have
completed"). Point reads are too short to be worth a reference.

A projected database (``key_range`` in its manifest, SlateDB RFC 0004 "Projection"): a read wholly
outside the range raises ``InvalidArgument`` and a scan that overlaps it is clipped to it, by the
same check as the writer's (:func:`slatedb_core.keys.check_in_range`, ``clip_scan``).

Missing SSTs: a read that finds an SST gone (``ObjectNotFound``: GC removed it after compaction)
reloads the latest manifest (MANAGED: re-establishes) and retries once; a scan resumes after the last
key it returned, on the newer state (so such a scan is not one point-in-time view: each key still
comes once, in order, from a state at least as new as the one the scan began on). In CHECKPOINT
mode, or when the retry fails too, the read raises :class:`SstMissing` rather than answer from an
incomplete state.

Threading: one lock (``_refresh_lock``) serialises everything that changes the reader's state (the
poll thread, :meth:`DbReader.refresh`, recovery from a missing SST, close). What readers share is
an immutable snapshot, a :class:`View`, swapped in as one reference under that lock; nothing a
view reaches is ever changed afterwards (replay builds new tables, it never adds to a published
one). A read (``get``, ``get_many``, ``scan``, ``scan_arrow``) takes no lock: it takes the view
published last once, at its start, and reads only from it, so it sees a prefix of the write
history with every write batch whole, however replay interleaves with it. (Until 2026-11 the
active replay table was shared with the published state and grew in place: a ``get_many``
running across a replay saw half of a write batch.)

Where it lives: this module has :class:`DbReader` (opening, reads and scans with their recovery
from a missing SST, the poll thread, lifecycle); :mod:`slatedb_core.reader.refresh` builds the
state served and keeps it current (each mode's opening and polling, establishing and
re-establishing the checkpoint, WAL replay); :mod:`slatedb_core.reader.wal_tables` holds the WAL
tables and :mod:`slatedb_core.reader.view` the views, pins and statistics. The manifest edits of
the reader's checkpoints are in :mod:`slatedb_core.checkpoints` (:func:`~slatedb_core.checkpoints.pin_change`
and the others).
"""

from __future__ import annotations

import itertools
import logging
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import TypeVar

import pyarrow as pa

from slatedb_core.errors import (
    DatabaseDeleted,
    DatabaseDestroyed,
    DatabaseNotFound,
    InvalidArgument,
    NotADatabase,
    ObjectNotFound,
    ReaderClosed,
    SlateDBError,
    SstMissing,
)
from slatedb_core.feed import ChangeBatch, ChangeFeed, ChangesOptions, Cursor
from slatedb_core.keys import KeyRange, check_in_range, clip_scan
from slatedb_core.lsm.dbstate import DbState
from slatedb_core.lsm.entries import KV_SCHEMA
from slatedb_core.lsm.iterators import iter_rows
from slatedb_core.options import (
    DbReaderOptions,
    ReaderMode,
    check_int,
    check_key_list,
    check_optional,
)
from slatedb_core.path_kind import refuse_table
from slatedb_core.reader.refresh import Refresher
from slatedb_core.reader.view import ReaderStats, View, as_key
from slatedb_core.sst.reader import READAHEAD_MAX
from slatedb_core.store.objectstore import ObjectStore, check_store, validate_relative_path

log = logging.getLogger(__name__)

T = TypeVar("T")

# get_many of fewer keys looks them up one at a time. Sorting once and walking each table once
# (DbState.get_many) reads each SST block once: from a fresh reader on local disk, 10,000 random
# keys of a 200k-row L0 SST took 0.92 s against 6.9 s one at a time, 16 keys 52 ms against 92 ms;
# with every block cached it costs 2-5 us a key more below ~100 keys, 25% less above.
GET_MANY_BATCH_MIN = 8

_scan_tokens = itertools.count(1)


class DbReader:
    """A read-only view of a database; see the module docstring. Use :meth:`open`; thread-safe."""

    def __init__(
        self,
        path: str,
        store: ObjectStore,
        mode: ReaderMode,
        options: DbReaderOptions,
        checkpoint: uuid.UUID | None,
        on_destroyed: Callable[[], None] | None = None,
    ) -> None:
        validate_relative_path(path, what="database path")
        self.path = path
        self.store = store
        self.options = options
        self._mode = mode
        self._given_checkpoint = checkpoint
        # the state served and what refreshes it (reader_refresh), changed under _refresh_lock
        self._refresher = Refresher(path, store, options)
        self._refresh_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._last_poll_error: str | None = None
        self._on_destroyed = on_destroyed

    # ---- opening ---------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: str,
        store: ObjectStore,
        checkpoint: uuid.UUID | None = None,
        options: DbReaderOptions | None = None,
        *,
        on_destroyed: Callable[[], None] | None = None,
    ) -> DbReader:
        """Open a reader. Raises DatabaseNotFound / DatabaseNotInitialized / DatabaseDestroyed
        (MANAGED, FOLLOW_LATEST), CheckpointNotFound (CHECKPOINT) or SstMissing.

        ``on_destroyed``: called in the poll thread after a poll found the database destroyed
        (the reader keeps serving its last state); a sharded table re-reads its shard map then
        (:mod:`slatedb_core.table.reads`)."""
        check_store(store)
        check_optional("options", options, DbReaderOptions)
        options = options or DbReaderOptions()
        if on_destroyed is not None and not callable(on_destroyed):
            raise InvalidArgument(
                f"on_destroyed must be a callable or None, got {type(on_destroyed).__name__}"
            )
        if checkpoint is not None and not isinstance(checkpoint, uuid.UUID):
            raise InvalidArgument(
                f"checkpoint must be a uuid.UUID, got {type(checkpoint).__name__}"
            )
        mode = options.mode or (ReaderMode.MANAGED if checkpoint is None else ReaderMode.CHECKPOINT)
        if mode is ReaderMode.CHECKPOINT and checkpoint is None:
            raise InvalidArgument("ReaderMode.CHECKPOINT needs the id of a checkpoint")
        if mode is not ReaderMode.CHECKPOINT and checkpoint is not None:
            raise InvalidArgument(f"a checkpoint id was given but the mode is {mode.name}")
        try:
            return cls._open(path, store, mode, options, checkpoint, on_destroyed)
        except DatabaseNotFound as e:
            if isinstance(e, DatabaseDeleted | NotADatabase):
                raise
            refuse_table(store, path)  # a table's root, opened as a database, says so
            raise

    @classmethod
    def _open(
        cls,
        path: str,
        store: ObjectStore,
        mode: ReaderMode,
        options: DbReaderOptions,
        checkpoint: uuid.UUID | None,
        on_destroyed: Callable[[], None] | None,
    ) -> DbReader:
        reader = cls(path, store, mode, options, checkpoint, on_destroyed)
        with reader._refresh_lock:
            if mode is ReaderMode.CHECKPOINT:
                assert checkpoint is not None
                reader._refresher.open_checkpoint(checkpoint)
            elif mode is ReaderMode.MANAGED:
                try:
                    reader._refresher.establish()
                except BaseException:
                    try:
                        reader._refresher.drop_checkpoints()
                    except SlateDBError as e:  # it expires with its lifetime anyway
                        log.warning("reader of %r: could not delete its checkpoint: %s", path, e)
                    raise
            else:
                reader._refresher.follow()
        if mode is not ReaderMode.CHECKPOINT:
            reader._start()
        return reader

    def _start(self) -> None:
        self._thread = threading.Thread(
            target=self._poll_loop, name=f"slatedb-reader-{self.path}", daemon=True
        )
        self._thread.start()

    # ---- state -----------------------------------------------------------------------------
    @property
    def _current(self) -> View:
        return self._refresher.current

    # ---- polling ---------------------------------------------------------------------------
    def _poll(self) -> None:
        if self._mode is ReaderMode.MANAGED:
            self._refresher.poll_managed()
        elif self._mode is ReaderMode.FOLLOW_LATEST:
            self._refresher.poll_follow()

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
                if isinstance(e, DatabaseDestroyed):
                    self._report_destroyed()
            except Exception:
                log.exception("reader of %r: poll failed unexpectedly", self.path)

    def _report_destroyed(self) -> None:
        """Call ``on_destroyed``; its error is logged, never the end of the poll thread (the
        reader's upkeep still deletes its retired checkpoints of the destroyed database)."""
        if self._on_destroyed is None:
            return
        try:
            self._on_destroyed()
        except Exception:
            log.exception("reader of %r: its on_destroyed hook failed", self.path)

    def refresh(self) -> None:
        """Poll now instead of waiting for the next poll (a no-op in CHECKPOINT mode)."""
        with self._refresh_lock:
            self._check_open()
            self._poll()

    def _recover(self, failed: View, missing: str) -> View:
        """After ``failed`` lost an SST (``missing``): a state built from the latest manifest.
        ReaderClosed, or DatabaseDestroyed when the database is destroyed (perhaps collected)
        under the reader: then a table read re-reads its shard map (an overwrite or rescale
        retired this shard) instead of failing; any other failure to reload is SstMissing.
        The one recovery of :meth:`_read` and :meth:`_scan_batches`."""
        try:
            with self._refresh_lock:
                self._check_open()
                if self._refresher.view is failed:
                    if self._mode is ReaderMode.MANAGED:
                        self._refresher.establish()
                    else:
                        self._refresher.follow()
                return self._current
        except (ReaderClosed, DatabaseDestroyed):
            raise
        except SlateDBError as e:
            raise SstMissing(missing, f"reloading the manifest failed: {e}") from e

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
        view = self._recover(view, missing.path)
        try:
            return fn(view.state)
        except ObjectNotFound as e:
            raise SstMissing(e.path, "still missing after reloading the manifest") from e

    def get(self, key: bytes) -> bytes | None:
        """The value of ``key`` in the reader's state, or None."""
        k = as_key(key)
        self._check_open()
        check_in_range(self._key_range(), (k,))
        return self._read(lambda s: s.get(k))

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """Values of ``keys``, all from one state."""
        ks = [as_key(k) for k in check_key_list("keys", keys)]
        self._check_open()
        check_in_range(self._key_range(), ks)
        if len(ks) < GET_MANY_BATCH_MIN:  # a few keys: the per-key path costs less than a sort
            return self._read(lambda s: [s.get(k) for k in ks])
        return self._read(lambda s: s.get_many(ks))

    def _key_range(self) -> KeyRange | None:
        """The keys the database may hold (a projected database's range, SlateDB RFC 0004): reads wholly
        outside it fail and scans are clipped to it, with the writer's own check (keys.py)."""
        r = self._current.state.manifest.manifest.key_range
        return None if r is None else KeyRange.of(r)

    def _check_range(
        self, start: bytes | None, end: bytes | None
    ) -> tuple[bytes | None, bytes | None]:
        """Validated scan bounds, clipped to the database's range."""
        self._check_open()
        for name, b in (("start", start), ("end", end)):
            if b is not None and not isinstance(b, bytes):
                raise InvalidArgument(f"scan {name} must be bytes or None")
        if start is not None and end is not None and end < start:
            raise InvalidArgument(f"scan end {end!r} is before start {start!r}")
        return clip_scan(self._key_range(), start, end)

    def scan(
        self, start: bytes | None = None, end: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs with ``start <= key < end`` in key order (None = unbounded), from
        the state current when iteration begins."""
        start, end = self._check_range(start, end)
        return iter_rows(self._scan_batches(start, end, 65536))

    def scan_arrow(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        batch_size: int = 65536,
        *,
        read_budget: int | None = None,
        ordered: bool = True,
    ) -> pa.RecordBatchReader:
        """The same as :meth:`scan`, as Arrow record batches of (key, value).

        ``ordered=False``: the same rows, not in key order (a reader that needs each live row
        once, such as a Spark partition): rounds of the merge whose keys are in one source each
        skip their gather in key order (:func:`~slatedb_core.lsm.iterators.merge_sorted`). Such
        a scan cannot resume after a missing SST (see "Missing SSTs" in the module doc) once it
        has returned rows: it raises :class:`SstMissing` instead.

        ``read_budget``: about the bytes of SSTs the scan holds fetched at once, shared by the
        SST sources it merges (each L0 view and each sorted run overlapping the range reads
        ``read_budget`` / their number per GET, at least one block, at most the reader's
        READAHEAD_MAX), from the first GET on. None: each source's GETs double from
        READAHEAD_START to READAHEAD_MAX (for scans that may stop early)."""
        start, end = self._check_range(start, end)
        batch_size = check_int("batch_size", batch_size, lo=1)
        if read_budget is not None:
            read_budget = check_int("read_budget", read_budget, lo=1)
        if ordered is not True and ordered is not False:  # None or 0 would read unordered
            raise InvalidArgument(f"ordered must be True or False, got {ordered!r}")
        return pa.RecordBatchReader.from_batches(
            KV_SCHEMA,
            (
                pa.RecordBatch.from_arrays([b.column(0), b.column(3)], schema=KV_SCHEMA)
                for b in self._scan_batches(start, end, batch_size, read_budget, ordered)
            ),
        )

    def changes(
        self,
        since: Cursor | str | bytes | None = None,
        options: ChangesOptions | None = None,
    ) -> Iterator[ChangeBatch]:
        """Every committed change after ``since`` in commit order, as Arrow batches each with
        the cursor to persist after it (:mod:`slatedb_core.feed`, docs/changes.md). It reads the
        database's WAL (and, bootstrapping, a checkpoint's SSTs) itself, not this reader's
        state: the reader's mode and polling do not bound it."""
        self._check_open()
        feed = ChangeFeed(
            self.path,
            self.store,
            options,
            wal_url=self.options.wal_url,
            merge_operator=self.options.merge_operator,
        )
        return feed.changes(since)

    def _scan_batches(
        self,
        start: bytes | None,
        end: bytes | None,
        batch_size: int,
        read_budget: int | None = None,
        ordered: bool = True,
    ) -> Iterator[pa.RecordBatch]:
        """Live ENTRY_SCHEMA batches; holds the state's checkpoint until closed or exhausted.
        ``read_budget``, ``ordered``: see :meth:`scan_arrow`."""
        if start is not None and end is not None and start >= end:
            return
        token = next(_scan_tokens)
        view = self._current
        if view.pin is not None:
            view.pin.scans.add(token)
        try:
            resume = start
            retried = False
            returned = False  # rows of an unordered scan were returned (it cannot resume)
            while True:
                try:
                    ra = _readahead(view.state, resume, end, read_budget)
                    rows = view.state.scan(
                        resume, end, batch_size=batch_size, readahead=ra, ordered=ordered
                    )
                    for b in rows:
                        if b.num_rows:
                            if ordered:
                                resume = b.column(0)[b.num_rows - 1].as_py() + b"\x00"
                            else:
                                returned = True
                            yield b
                    return
                except ObjectNotFound as e:
                    if self._mode is ReaderMode.CHECKPOINT:
                        raise SstMissing(e.path, f"checkpoint {self._given_checkpoint}") from e
                    if returned:
                        raise SstMissing(
                            e.path, "an unordered scan cannot resume after returning rows"
                        ) from e
                    if retried:
                        raise SstMissing(
                            e.path, "still missing after reloading the manifest"
                        ) from e
                    retried = True
                    if resume is not None and end is not None and resume >= end:
                        return
                    fresh = self._recover(view, e.path)
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
        pin = self._refresher.pin
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
            self._refresher.drop_checkpoints()

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
        view = self._refresher.view
        mid = None if view is None else view.state.manifest.id
        return f"DbReader({self.path!r}, mode={self._mode.name}, manifest={mid})"


__all__ = ["DbReader", "ReaderClosed", "ReaderStats", "SstMissing"]


def _readahead(
    state: DbState, start: bytes | None, end: bytes | None, budget: int | None
) -> int | None:
    """Bytes per GET of each SST source of a scan of ``[start, end)`` of ``state`` sharing
    ``budget`` (None: the SST reader's ramp); see :meth:`DbReader.scan_arrow`."""
    if budget is None:
        return None
    rng = KeyRange(start, end)
    n = len(state.runs) + sum(1 for h in state.l0 if not h.range.intersect(rng).is_empty())
    return max(1, min(READAHEAD_MAX, budget // max(1, n)))
