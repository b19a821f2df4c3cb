"""The change feed of one database: every committed change after a cursor, in commit order, as
Arrow batches each paired with the cursor to persist after it (docs/changes.md).

The model is SlateDB RFC 0019's WAL reader: a change is a row of a WAL SST, and WAL SSTs are
read in id order, each one's rows in seq order (a writer hands out seqs in WAL order, so this is
commit order across writers too). We read them with the WAL reader every replay uses
(:class:`~slatedb_core.wal.log.WalLog`), timestamps included, and stop, as a reader's replay
does, at the first id not yet there (a hole a writer's parallel window may still fill, SlateDB
RFC 0001; :func:`~slatedb_core.checkpoints.checked_wal_run` raises for one no writer can have
left). Beyond RFC 0019:

* a cursor carries the last seq delivered besides the next WAL id, so a batch may end inside a
  WAL SST, and no row is delivered twice (a row at or below the cursor's seq is skipped);
* a cursor whose next WAL SST the garbage collector already deleted (its id at or below the
  latest manifest's replay point, and gone) is :class:`~slatedb_core.errors.ChangesCollected`,
  never a silent gap;
* a feed started with no cursor on a database whose WAL was (partly) collected bootstraps from a
  snapshot (:mod:`slatedb_core.feed.snapshot`): the newest value of every live key in the SSTs
  of a checkpointed manifest M (rows flagged ``snapshot``, in key order, with their
  ``expire_ts``; its ``seq`` is every version's own, all at or below
  M's ``last_l0_seq``), followed by the WAL after M's replay point, rows above that seq only
  (the same floor a reader's replay uses, :mod:`slatedb_core.reader.wal_tables`);
* a registered consumer's checkpoint keeps what it still needs (:mod:`slatedb_core.feed.retention`).

A call reads what is there when it runs and ends; call it again with the last cursor to poll.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections import deque
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core.checkpoints import checked_wal_run, checkpoint_change, delete_change
from slatedb_core.errors import (
    ChangesCollected,
    CheckpointNotFound,
    CursorInvalid,
    DatabaseNotInitialized,
    InvalidArgument,
    ObjectNotFound,
)
from slatedb_core.feed.cursor import Cursor, SnapshotPosition
from slatedb_core.feed.identity import feed_identity
from slatedb_core.feed.ingests import LOOK_BACK, IngestMerge, history_unknown, live_marks
from slatedb_core.feed.retention import (
    SNAPSHOT_CHECKPOINT,
    ConsumerHold,
    checkpoint_name,
    consumer_holds,
    hold,
    release,
)
from slatedb_core.feed.rows import CHANGE_SCHEMA, change_rows, delivered_rows, empty_changes
from slatedb_core.feed.snapshot import snapshot_rows
from slatedb_core.lsm.merge_operator import MergeOperator, resolve_merge_operator
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore, StoredManifest
from slatedb_core.meta.boundary import lease_clock
from slatedb_core.meta.lease import LeasedBoundary
from slatedb_core.options import (
    CheckpointOptions,
    check_duration,
    check_instance,
    check_int,
    check_optional,
    check_optional_duration,
)
from slatedb_core.store.objectstore import ObjectStore, check_store, validate_relative_path
from slatedb_core.wal.location import WalLocation
from slatedb_core.wal.log import WalLog
from slatedb_core.wal.writer import wal_boundary, wal_sst_behind_boundary

FETCH_AHEAD = 8
"""WAL SSTs fetched and decoded ahead of the one being delivered (GETs overlap; decoding runs in
Arrow without the GIL)."""


@dataclass(frozen=True, slots=True)
class ChangeBatch:
    """One batch of changes (``CHANGE_SCHEMA``, :mod:`slatedb_core.feed.rows`) and the cursor to
    persist once the batch is applied: ``changes(since=cursor)`` resumes right after it. A batch
    may hold no rows (it only moves the cursor past WAL SSTs without changes)."""

    rows: pa.RecordBatch
    cursor: Cursor


@dataclass(frozen=True)
class ChangesOptions:
    """Options of a change feed: batch size, the registered consumer and its retention, and
    the bootstrap snapshot."""

    batch_rows: int = 65536
    """Rows per batch at most (a batch also ends where the feed ends)."""
    consumer: str | None = None
    """A registered consumer: its named checkpoint keeps every change after the cursor it last
    resumed from alive through GC (docs/changes.md, "Retention"). None: nothing is kept, and a
    consumer slower than the GC gets :class:`~slatedb_core.errors.ChangesCollected`."""
    consumer_lifetime: timedelta | None = None
    """How long the consumer's checkpoint outlives the consumer's last call (None: until
    :meth:`ChangeFeed.release`). A finite lifetime bounds what a vanished consumer pins."""
    snapshot_lifetime: timedelta = timedelta(hours=1)
    """Lifetime of the checkpoint an unregistered feed's bootstrap snapshot reads (resuming a
    snapshot later than this raises ChangesCollected)."""
    bootstrap: bool = True
    """With no cursor on a database whose WAL was collected: deliver a snapshot first. False:
    raise ChangesCollected instead."""

    def __post_init__(self) -> None:
        check_int("batch_rows", self.batch_rows, lo=1)
        check_optional("consumer", self.consumer, str)
        if self.consumer is not None:
            checkpoint_name(self.consumer)
        check_optional_duration("consumer_lifetime", self.consumer_lifetime)
        check_duration("snapshot_lifetime", self.snapshot_lifetime)
        check_instance("bootstrap", self.bootstrap, bool)


class ChangeFeed:
    """The change feed of the database at ``path`` (see the module docstring). ``wal_url``: its
    separate WAL store, if it has one (SlateDB RFC 0009); ``merge_operator``: folds operands in
    the bootstrap snapshot (the WAL's operands are delivered as written)."""

    def __init__(
        self,
        path: str,
        store: ObjectStore,
        options: ChangesOptions | None = None,
        *,
        wal_url: str | None = None,
        merge_operator: str | MergeOperator | None = None,
    ) -> None:
        validate_relative_path(path, what="database path")
        check_store(store)
        self.path = path
        self.options = check_optional("options", options, ChangesOptions) or ChangesOptions()
        self.manifests = ManifestStore(store, path)
        self.wal = WalLog(WalLocation.open(store, wal_url), path)
        self.wal_lease = LeasedBoundary(wal_boundary(self.wal))
        self.store = store
        self.merge_operator = resolve_merge_operator(merge_operator)
        self._db_id: str | None = None

    # ---- the feed ---------------------------------------------------------------------------
    def changes(
        self,
        since: Cursor | str | bytes | None = None,
        until: Cursor | str | bytes | None = None,
    ) -> Iterator[ChangeBatch]:
        """Every change after ``since`` (a :class:`Cursor` or its encoding; None: from the
        start), in commit order; see the module docstring. The cursor's form is checked now
        (:class:`~slatedb_core.errors.CursorInvalid`); reading starts at the first ``next``,
        which first checks that ``since`` is this database's (CursorInvalid for another's).
        Every cursor yielded carries this database's identity.

        With ``until`` (a WAL-phase cursor, from :meth:`tail`): only the changes ``until`` has
        delivered (:func:`~slatedb_core.feed.rows.delivered_by`), the read ending at the first
        batch that reaches it, whose cursor is ``until``; fewer when the WAL holding it is not
        all there yet (the last cursor is then short of it). Such a read goes past the seq gap
        of an ingest still in flight when ``until`` was taken (its rows come after ``until``),
        and then hands out no cursor inside the rest: those rows come in the one batch whose
        cursor is ``until`` (docs/changes.md, "Spark"); so after a row it cuts (such an
        ingest's, committed since), whose seq a later cursor would pass. A ``since`` at or past
        ``until`` (WAL phase) reads nothing: no batch, no cursor behind ``since``."""
        end = Cursor.of(until)
        if end is not None and end.snapshot is not None:
            raise CursorInvalid("until must be a WAL-phase cursor (one tail() returned)")
        return self._stamped(Cursor.of(since), end)

    def _stamped(self, since: Cursor | None, until: Cursor | None = None) -> Iterator[ChangeBatch]:
        latest = self.manifests.read_latest()  # first: no identity is made where no database is
        if not latest.manifest.initialized:
            raise DatabaseNotInitialized(f"database {self.path!r} is not initialized")
        db = self.identity()
        end = None if until is None else self._own(until, db)
        start = self._own(since, db)
        if end is not None and start is not None and start.snapshot is None:
            if (start.wal_id, start.seq) >= (end.wal_id, end.seq):
                # nothing to read (as a table's shard at its end): a batch's cursor would be
                # ``until``, behind ``since``, and resuming there reads again (review50)
                return
        inner = self._changes(start, latest, end)
        cut: list[pa.RecordBatch] | None = None  # past a row ``end`` has not delivered
        try:
            for batch in inner:
                if end is None:
                    yield ChangeBatch(batch.rows, batch.cursor.of_db(db))
                    continue
                rows = delivered_rows(batch.rows, end)
                c = batch.cursor
                if c.snapshot is None and (c.wal_id, c.seq) >= (end.wal_id, end.seq):
                    yield ChangeBatch(rows if cut is None else _concat([*cut, rows]), end.of_db(db))
                    return
                if cut is None and rows.num_rows < batch.rows.num_rows:
                    # an ingest's rows cut (committed after ``end``, below a WAL row it
                    # covers): a cursor past them would skip them on resume, so the rest
                    # waits for the one batch whose cursor is ``end`` (review50)
                    cut = []
                if cut is not None:
                    cut.append(rows)
                    continue
                yield ChangeBatch(rows, c.of_db(db))
        finally:
            inner.close()

    def identity(self) -> str:
        """The database's change-feed identity, which every cursor it hands out carries
        (:mod:`slatedb_core.feed.identity`; read once per feed, created by the first feed)."""
        if self._db_id is None:
            self._db_id = feed_identity(self.store, self.path)
        return self._db_id

    def check_own(self, cursor: Cursor) -> Cursor:
        """``cursor`` as given when it is this database's (or carries no identity, an earlier
        build's); CursorInvalid for another database's. For a cursor a read ends at (CLI
        ``--until``, a Spark batch's end): ``since`` is checked by :meth:`changes` itself."""
        if cursor.db is not None:
            if self._db_id is None:
                self.manifests.read_latest()  # no identity is made where no database is
            self._own(cursor, self.identity())
        return cursor

    def _own(self, cursor: Cursor | None, db: str) -> Cursor | None:
        """``cursor`` as this feed reads it (its identity dropped), after checking that it
        is this database's: CursorInvalid for a cursor another database handed out (the same
        WAL ids and seqs name other changes there; a clone's parent's too). A cursor with no
        identity (an earlier build's) is read as this database's."""
        if cursor is None or cursor.db is None:
            return cursor
        if cursor.db != db:
            raise CursorInvalid(
                f"the cursor is another database's (change-feed identity {cursor.db}), not "
                f"that of {self.path!r} ({db}): pass the cursor this database's feed returned, "
                "or start again (since=None)"
            )
        return cursor.of_db(None)

    def _changes(
        self, cursor: Cursor | None, latest: StoredManifest, until: Cursor | None = None
    ) -> Generator[ChangeBatch, None, None]:
        marked_after: int | None = None  # no consumer: no ingest is marked for this feed
        if self.options.consumer is not None:
            # registers the consumer, or moves its hold
            marked_after = self._advance(cursor or Cursor(), latest.manifest)
        ephemeral: uuid.UUID | None = None
        if cursor is None:
            run, gap = self._plan(Cursor(), latest.manifest)
            if gap is None and self.options.consumer is not None and self.options.bootstrap and run:
                if latest.manifest.replay_after_wal_id >= run[0]:
                    # its checkpoint pins a manifest past the WAL it would read first: start
                    # from a snapshot it pins instead, so the GC keeps all it reads
                    gap = "a new consumer of a WAL already in L0"
            if gap is None and latest.manifest.last_l0_seq > self._last_wal_seq(run):
                # L0 holds rows newer than the whole WAL: an ingest's (docs/changes.md,
                # "Ingested rows"), which only a snapshot delivers to a new feed
                gap = "rows ingested into L0 are in no WAL SST"
            if gap is None and self.options.bootstrap and latest.manifest.last_l0_seq:
                gap = self._unreadable_from_start(run, latest.manifest, marked_after)
            if gap is None:
                merge = self._ingests(Cursor(), latest.manifest, marked_after, until)
                started = False
                try:
                    for batch in self._batches(Cursor(), run, merge, until):
                        started = True
                        yield batch
                    return
                except ChangesCollected as e:
                    if started or not self.options.bootstrap:
                        raise
                    # what the WAL from SST 1 cannot deliver (an ingest no marker names: a
                    # database an ingest populated first) a snapshot does; raising would say
                    # "start again with since=None", this very call, for ever (review43)
                    gap = f"the WAL from SST 1 is not all: {e}"
            if not self.options.bootstrap:
                raise ChangesCollected(self.path, f"{gap} (bootstrap=False)")
            cursor, marked_after = self._bootstrap_cursor(marked_after)
            if self.options.consumer is None:
                assert cursor.snapshot is not None
                ephemeral = cursor.snapshot.checkpoint
        if cursor.snapshot is not None:
            cursor = yield from self._snapshot(cursor)
        run, gap = self._plan(cursor, latest.manifest)
        if gap is not None:
            raise ChangesCollected(self.path, gap)
        yield from self._batches(
            cursor, run, self._ingests(cursor, latest.manifest, marked_after, until), until
        )
        if ephemeral is not None:
            # kept until the WAL after the snapshot was read, so the GC kept that too; a feed
            # not read to its end leaves it to expire (snapshot_lifetime)
            self._drop_snapshot_checkpoint(ephemeral)

    def _unreadable_from_start(
        self, run: Sequence[int], latest: Manifest, marked_after: int | None
    ) -> str | None:
        """Why the WAL from SST 1 (``run``) cannot deliver every change, found before a batch
        is yielded (None: it can, as far as can be told now). An ingest no marker names is read
        through the manifest that committed it (docs/changes.md, "Ingested rows"); when the GC
        collected manifests across which ``last_l0_seq`` grew (:func:`history_unknown`), such
        an ingest may be unreadable, and meeting it after batches were yielded would raise
        ChangesCollected, which tells the caller to start again with no cursor: this very call,
        for ever (review43). Then the run is read once without yielding (a database whose WAL
        is whole but whose manifests were collected pays it), and a ChangesCollected makes the
        feed start from a snapshot."""
        if not history_unknown(self.manifests):
            return None
        try:
            for _ in self._batches(Cursor(), run, self._ingests(Cursor(), latest, marked_after)):
                pass
        except ChangesCollected as e:
            return f"the WAL from SST 1 is not all: {e}"
        return None

    def tail(self) -> Cursor:
        """The cursor at the end of the WAL now: ``changes(since=feed.tail())`` delivers only
        what is committed after the call (a consumer that starts "from now", or a streaming
        source's latest offset). One manifest read and one LIST; no WAL SST is read. With WAL
        SSTs still in flight (``max_parallel_writes`` above 1) it may also deliver writes
        acknowledged just before the call, never miss one after it."""
        m = self.manifests.read_latest().manifest
        after = m.replay_after_wal_id
        listed = self.wal.list_ids(after=after)
        run = checked_wal_run(
            self.wal, listed, after, m, lambda: self.manifests.read_latest().manifest
        )
        end = run[-1] if run else after
        # every row of a WAL SST after ``end`` is newer than what is committed now, so the
        # last seq in L0 bounds them from below (the seq filter applies to WAL SST end + 1 only)
        return Cursor(end + 1, m.last_l0_seq, db=self.identity())

    # ---- retention --------------------------------------------------------------------------
    def advance(self, cursor: Cursor | str | bytes) -> None:
        """Move the consumer's checkpoint to keep only what ``cursor`` still needs (done by
        :meth:`changes` with its ``since``; call it to release sooner)."""
        c = Cursor.of(cursor)
        if c is None:
            raise CursorInvalid("advance needs a cursor (None is no position to move to)")
        latest = self.manifests.read_latest().manifest
        own = self._own(c, self.identity())
        assert own is not None  # _own keeps a cursor a cursor
        self._advance(own, latest)

    def _advance(self, c: Cursor, latest: Manifest) -> int:
        """:meth:`advance` to ``c``, ``latest`` the latest manifest read before; returns the
        seq above which every committed ingest is marked for the consumer (its registration,
        :mod:`slatedb_core.feed.registrations`). A cursor ahead of the WAL is CursorInvalid
        before the hold moves: moved for it, the hold would let GC collect what the consumer's
        real cursor still needs."""
        consumer = self._consumer()
        if c.snapshot is None and c.wal_id - 1 > latest.replay_after_wal_id:
            self._check_not_ahead(c.wal_id - 1)
        now = time.time()
        floor = c.of_db(self.identity()).encode()
        life = self.options.consumer_lifetime
        return hold(self.manifests, consumer, c, life, now, floor=floor).marked_after

    def release(self) -> None:
        """Unregister the consumer: delete its checkpoint and ingest markers (releasing what
        they kept from the GC), then its registration record."""
        release(self.manifests, self._consumer())

    def consumers(self) -> list[ConsumerHold]:
        """Every registered consumer of the database and what its checkpoint holds (a
        consumer whose ``wal_behind`` keeps growing is falling behind the writer)."""
        return consumer_holds(self.manifests, time.time())

    def _consumer(self) -> str:
        if self.options.consumer is None:
            raise InvalidArgument("no consumer: set ChangesOptions.consumer")
        return self.options.consumer

    # ---- the WAL ----------------------------------------------------------------------------
    def _plan(self, cursor: Cursor, m: Manifest) -> tuple[list[int], str | None]:
        """The WAL SSTs to read after ``cursor``: the unbroken run of ids from
        ``cursor.wal_id`` listed now, and why the WAL after ``cursor`` is collected (None: it is
        not). The run ends at the first id not listed; that id at or below the replay point of
        the latest manifest (read after the LIST) is one the GC deleted, and delivering the run
        before it would leave a silent gap (SlateDB's GC keeps WAL SST 1 and deletes the ones
        after it, so a gap is not only at the start). Otherwise it is not written yet, or a
        hole a writer's parallel window may still fill (``checked_wal_run`` raises
        WalSstMissing for one no writer can have left, ``m`` the manifest read before)."""
        after = cursor.wal_id - 1
        listed = self.wal.list_ids(after=after)
        fresh = self.manifests.read_latest().manifest
        end = after
        for wal_id in listed:
            if wal_id != end + 1:
                break
            end = wal_id
        if end + 1 <= fresh.replay_after_wal_id:
            return [], (
                f"WAL SST {end + 1} is gone and the latest manifest's replay point "
                f"({fresh.replay_after_wal_id}) is past it"
            )
        if after < fresh.replay_after_wal_id and after + 1 <= self.wal_lease.boundary.read():
            # behind the replay point GC may delete (gc/wal.boundary covers it): what is listed
            # there may be a fenced writer's create in a collected slot (_fetch checks each)
            return [], f"WAL SST {after + 1} is at or behind gc/wal.boundary"
        run = checked_wal_run(self.wal, listed, after, m, lambda: fresh)
        if not run and after > fresh.replay_after_wal_id:
            self._check_not_ahead(after)
        return run, None

    def _check_not_ahead(self, wal_id: int) -> None:
        """CursorInvalid when WAL SST ``wal_id``, the last one the cursor says it read, was
        never written: the cursor is another database's, or this one was restored from an
        older copy (waiting for changes there would wait for ever, or skip the ones written
        under those ids). GC cannot have deleted it: it is past the replay point, checked
        again after the HEAD in case the point moved."""
        if self.wal.store.exists(self.wal.path(wal_id)):
            return
        if self.manifests.read_latest().manifest.replay_after_wal_id >= wal_id:
            return
        raise CursorInvalid(
            f"the cursor is ahead of the WAL of {self.path!r}: it read WAL SST {wal_id}, "
            "which this database never wrote (another database's cursor, or a restored one)"
        )

    def _batches(
        self,
        cursor: Cursor,
        run: Sequence[int],
        ingests: IngestMerge | None = None,
        until: Cursor | None = None,
    ) -> Iterator[ChangeBatch]:
        """Batches of about ``batch_rows`` of the WAL SSTs ``run`` after ``cursor`` (and of the
        ingests ``ingests`` finds between them). A batch never ends inside the rows of one seq:
        SlateDB commits a write batch as one seq (its rows share it), and a cursor resumes after
        a whole seq. Once ``ingests`` went past the gap of an ingest in flight for a read up to
        ``until`` (``IngestMerge.passed``), no cursor past the gap is handed out: the rest up to
        ``until`` comes in one batch, yielded only when the read reaches ``until`` (resuming
        from a cursor past the gap would skip that ingest)."""
        size = self.options.batch_rows
        pending: list[pa.RecordBatch] = []
        n = 0
        pos = cursor
        yielded = cursor
        pieces = (
            ((w, w, w + 1, rows) for w, rows in self._fetch(run))
            if ingests is None
            else ingests.pieces(cursor, self._fetch(run))
        )
        held = False  # past an in-flight ingest's gap: the rest waits for ``until``
        for wal_id, inside, after, rows in pieces:
            held = held or (ingests is not None and ingests.passed)
            if rows.num_rows and pos.seq and pc.min(rows.column(1)).as_py() <= pos.seq:
                rows = rows.filter(pc.greater(rows.column(1), pa.scalar(pos.seq, pa.uint64())))
            seqs = rows.column(1).to_numpy()  # ascending (WalLog.decode), no nulls: no copy
            total = rows.num_rows
            last = pos.seq
            offset = 0
            while offset < total:
                # held: no batch ends before ``until``, so no cut by size (n keeps growing)
                cut = total if held else min(offset + size - n, total)
                if cut < total:  # the batch ends inside this SST: at the end of a seq
                    cut = int(np.searchsorted(seqs, seqs[cut - 1], side="right"))
                pending.append(change_rows(rows.slice(offset, cut - offset), wal_id=wal_id))
                n += cut - offset
                offset = cut
                last = int(seqs[cut - 1])
                if n >= size and not held:
                    yielded = Cursor(inside if offset < total else after, last)
                    yield ChangeBatch(_concat(pending), yielded)
                    pending, n = [], 0
            pos = Cursor(after, last)
            if held and until is not None and (pos.wal_id, pos.seq) >= (until.wal_id, until.seq):
                break
        if held:
            assert until is not None
            if (pos.wal_id, pos.seq) >= (until.wal_id, until.seq):
                yield ChangeBatch(_concat(pending), pos)  # handed out as ``until``
            return  # short of ``until``: nothing past the gap, the read ends before it
        if pending or pos != yielded:
            yield ChangeBatch(_concat(pending), pos)

    def _ingests(
        self,
        cursor: Cursor,
        before: Manifest,
        marked_after: int | None,
        until: Cursor | None = None,
    ) -> IngestMerge:
        """What merges the ingests after ``cursor`` into the WAL rows (docs/changes.md,
        "Ingested rows"): the marked ones, read from a manifest read now, after
        :meth:`_plan`'s LIST; ``before``: the manifest read before it; ``marked_after``: the
        seq above which every ingest is marked for the feed's consumer (None: no consumer)."""
        after = self.manifests.read_latest().manifest
        return IngestMerge(
            self.store,
            self.manifests,
            live_marks(after, time.time(), cursor.seq),
            marked_after,
            after.last_l0_seq,
            before.last_l0_seq,
            self._wal_last_seq,
            self._wal_seqs,
            until,
        )

    def _last_wal_seq(self, run: Sequence[int]) -> int:
        """The highest seq of the WAL SSTs ``run`` (0: none has rows); the last ones are
        read, back through a few empty ones (a writer's fencing WAL SSTs; past them, 0: the
        feed bootstraps, which is never wrong)."""
        for wal_id in list(reversed(run))[:LOOK_BACK]:
            last = self._wal_last_seq(wal_id)
            if last:
                return last
        return 0

    def _wal_last_seq(self, wal_id: int) -> int | None:
        try:
            rows, _ = self._load(wal_id)
        except ObjectNotFound:
            return None
        return int(rows.column(1)[rows.num_rows - 1].as_py()) if rows.num_rows else 0

    def _wal_seqs(self, wal_id: int) -> npt.NDArray[np.uint64] | None:
        """The seqs of WAL SST ``wal_id``, ascending (None: it is gone)."""
        try:
            rows, _ = self._load(wal_id)
        except ObjectNotFound:
            return None
        seqs: npt.NDArray[np.uint64] = np.asarray(
            rows.column(1).to_numpy(zero_copy_only=False), dtype=np.uint64
        )
        return seqs

    def _fetch(self, ids: Sequence[int]) -> Iterator[tuple[int, pa.RecordBatch]]:
        """``(id, rows in seq order, timestamps included)`` of each WAL SST of ``ids``, in id
        order, ``FETCH_AHEAD`` in flight; one the GC deleted meanwhile is ChangesCollected."""
        if not ids:
            return
        pool = ThreadPoolExecutor(max_workers=min(FETCH_AHEAD, len(ids)))
        try:
            todo = iter(ids)
            self.wal_lease.prepare()
            pending: deque[tuple[int, Future[tuple[pa.RecordBatch, float]]]] = deque(
                (i, pool.submit(self._load, i)) for i in itertools.islice(todo, FETCH_AHEAD)
            )
            while pending:
                wal_id, fut = pending.popleft()
                try:
                    rows, read_at = fut.result()
                except ObjectNotFound:
                    if self.manifests.read_latest().manifest.replay_after_wal_id >= wal_id:
                        raise ChangesCollected(
                            self.path, f"WAL SST {wal_id} was deleted while it was read"
                        ) from None
                    raise
                if wal_sst_behind_boundary(self.wal_lease, self.wal, wal_id, read_at):
                    # GC may have deleted it, and a fenced writer created it again: what was
                    # there is collected (SlateDB RFC 0026; the writer's own create check)
                    raise ChangesCollected(
                        self.path, f"WAL SST {wal_id} is at or behind gc/wal.boundary"
                    )
                nxt = next(todo, None)
                if nxt is not None:
                    self.wal_lease.prepare()
                    pending.append((nxt, pool.submit(self._load, nxt)))
                yield wal_id, rows
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _load(self, wal_id: int) -> tuple[pa.RecordBatch, float]:
        """The rows of WAL SST ``wal_id`` and the :func:`lease_clock` time its GET returned
        (for :func:`~slatedb_core.wal.writer.wal_sst_behind_boundary`)."""
        data = self.wal.store.get(self.wal.path(wal_id)).data
        read_at = lease_clock()
        table = self.wal.decode(wal_id, data, timestamps=True).entries
        batches = table.to_batches()
        if not batches:
            return pa.RecordBatch.from_pylist([], schema=table.schema), read_at
        return (batches[0] if len(batches) == 1 else pa.concat_batches(batches)), read_at

    # ---- the bootstrap snapshot -------------------------------------------------------------
    def _bootstrap_cursor(self, marked_after: int | None) -> tuple[Cursor, int | None]:
        """A cursor at the start of a snapshot of the latest manifest, under a checkpoint: the
        consumer's (moved there), or one of ``snapshot_lifetime`` of its own; and
        ``marked_after`` as the consumer's registration says after the move."""
        now = time.time()
        if self.options.consumer is not None:
            held = hold(
                self.manifests, self.options.consumer, None, self.options.consumer_lifetime, now
            )
            cp = held.checkpoint
            assert cp is not None
            cp_id, manifest_id = cp.id, cp.manifest_id
            marked_after = held.marked_after
        else:
            cp_id = uuid.uuid4()
            opts = CheckpointOptions(
                lifetime=self.options.snapshot_lifetime, name=SNAPSHOT_CHECKPOINT
            )
            stored = self.manifests.update_at(checkpoint_change(opts, now, cp_id))
            found = stored.manifest.checkpoint(cp_id)
            assert found is not None
            manifest_id = found.manifest_id
        m = self.manifests.read(manifest_id).manifest
        pos = SnapshotPosition(cp_id, manifest_id, None)
        return Cursor(m.replay_after_wal_id + 1, m.last_l0_seq, pos), marked_after

    def _snapshot(self, cursor: Cursor) -> Generator[ChangeBatch, None, Cursor]:
        """The snapshot batches after ``cursor`` (a snapshot cursor); returns the cursor of
        the WAL after it."""
        pos = cursor.snapshot
        assert pos is not None
        m = self._snapshot_manifest(pos).manifest
        scan = snapshot_rows(
            self.store,
            self.path,
            m,
            pos.after_key,
            self.options.batch_rows,
            self.merge_operator,
        )
        after = Cursor(cursor.wal_id, cursor.seq)
        held: pa.RecordBatch | None = None
        try:
            for b in scan:
                if not b.num_rows:
                    continue
                if held is not None:
                    yield ChangeBatch(held, self._inside(after, pos, held))
                held = change_rows(b, snapshot=True)
        except ObjectNotFound as e:
            raise ChangesCollected(
                self.path, f"an SST of the snapshot's manifest {pos.manifest_id} is gone: {e.path}"
            ) from e
        yield ChangeBatch(empty_changes() if held is None else held, after)
        return after

    def _inside(self, after: Cursor, pos: SnapshotPosition, rows: pa.RecordBatch) -> Cursor:
        last = rows.column(0)[rows.num_rows - 1].as_py()
        return Cursor(
            after.wal_id, after.seq, SnapshotPosition(pos.checkpoint, pos.manifest_id, last)
        )

    def _snapshot_manifest(self, pos: SnapshotPosition) -> StoredManifest:
        """The manifest the snapshot reads, while its checkpoint still pins it."""
        cp = self.manifests.read_latest().manifest.checkpoint(pos.checkpoint)
        if cp is None or cp.is_expired(time.time()) or cp.manifest_id != pos.manifest_id:
            raise ChangesCollected(
                self.path, f"the snapshot's checkpoint {pos.checkpoint} is gone or expired"
            )
        try:
            return self.manifests.read(pos.manifest_id)
        except ObjectNotFound:
            raise ChangesCollected(
                self.path, f"the snapshot's manifest {pos.manifest_id} is gone"
            ) from None

    def _drop_snapshot_checkpoint(self, checkpoint: uuid.UUID) -> None:
        try:
            self.manifests.update(delete_change(checkpoint))
        except CheckpointNotFound:
            pass  # expired and collected already: nothing left to drop


def _concat(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if not batches:
        return empty_changes()
    return batches[0] if len(batches) == 1 else pa.concat_batches(batches)


__all__ = ["CHANGE_SCHEMA", "FETCH_AHEAD", "ChangeBatch", "ChangeFeed", "ChangesOptions"]
