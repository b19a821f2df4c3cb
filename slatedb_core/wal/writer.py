"""Fencing the WAL and writing to it (SlateDB RFC 0001, "Writers" and "Acknowledgements").

Create-if-absent on ``wal/{id}.sst`` is the fencing point: after a new writer has bumped
``writer_epoch`` in the manifest and then created its fence at id F (SlateDB 0.17's fence: a
zero-byte object, see :mod:`slatedb_core.wal.log`), an older writer can never create any id >= F,
because it writes ids in order and finds F taken. WAL objects carry no epoch, so a writer that
finds a slot taken re-reads the latest manifest, as SlateDB 0.17's writer does when its fence
create loses: a ``writer_epoch`` above ours means a newer writer exists (the bump precedes its
fence), and we are fenced and must stop without acknowledging anything more. Otherwise the slot
holds an older opener's fence (nothing of it was acknowledged: step over it) or an older writer's
rows (a fence steps over them, and the new writer replays them; a running writer meeting them
after its own fence is an illegal state, ``WalEpochConflict``). Both engines fence each other
this way: SlateDB 0.17's writer fails with "fenced" on any WAL create that finds its slot taken.

That argument fails once GC has deleted F (SlateDB RFC 0026's race, for the WAL): a zombie stalled before
writing F could then create it, and acknowledge writes no one will ever replay. So the WAL has a
boundary file like the sequenced namespaces (``gc/wal.boundary``): GC advances it before deleting
WAL SSTs, and every WAL write checks it after the create (a conditional GET, usually a bodiless
304). A live writer's next id is always above anything GC may delete, so a write at or behind
the boundary can only come from a zombie: it is reported as ``Fenced``.

A boundary cached from long before cannot stand in for that read (docs/gc-and-boundaries.md,
"What a durable put costs": the fence a zombie should collide with is exactly what GC at
``min_age`` 0 deletes once the newer writer's replay point passed it). A read made within the
boundary lease can: GC deletes what a boundary covers only the lease recorded in the file (1 s)
after advancing it, so a read started less than that before the create completed vouches for it
(:mod:`slatedb_core.meta.lease`). The writer keeps such a read in hand, taken in the background,
and a durable put costs one round trip, the create; a create nothing vouches for is checked by
a read after it. The flusher's group commit also puts the concurrent durable puts of many
writers into one WAL SST (:mod:`slatedb_core.wal.flusher`).

Parallel writes (SlateDB RFC 0001, "Parallel Writes"): with ``max_parallel_writes`` N > 1 a writer keeps
up to N creates in flight (:class:`WalWindow`), at consecutive ids and within a sliding window:
id x is issued only once every id <= x - N has landed. So the holes a writer leaves (in flight,
or lost when it died) all lie in the N ids after its last contiguous SST. A new writer therefore
fences with N *consecutive* fences starting at the first open slot (:func:`first_open_slot`): that
fills every hole below its fence (an old write still in flight there finds the slot taken), and
an older writer could only issue an id past the fence after one of the N fence slots had
answered it "taken, and the manifest holds a newer epoch", which halts it. N is the larger of
the value in the manifest (the previous writer's window) and the new writer's own.

So a hole *outside* that window (below the highest id present by at least N, or below
``next_wal_sst_id`` with an SST after it) is no write in flight but damage: the writes in it may
have been acknowledged. An opener must not fence into it (it would replay nothing after it): it
raises ``WalSstMissing`` naming the ids (:func:`damaged_holes`, review finding 7 in RELIABILITY.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from slatedb_core.errors import (
    BackgroundThreadDied,
    DatabaseNotFound,
    Fenced,
    ObjectAlreadyExists,
    ObjectNotFound,
    ObjectVersionBehindBoundary,
    SlateDBError,
    StoreError,
    WalEpochConflict,
    WalSstMissing,
    WalWindowClosed,
    is_retryable,
)
from slatedb_core.layout import WAL_BOUNDARY, boundary_path
from slatedb_core.meta import boundary as boundaries
from slatedb_core.meta.boundary import BoundaryObject, lease_clock
from slatedb_core.meta.lease import LeasedBoundary
from slatedb_core.sst import SstOptions
from slatedb_core.wal.log import FENCE, WalLog, encode_wal_sst

log = logging.getLogger(__name__)


class _Outcome:
    OURS = "ours"
    OLDER_FENCE = "older fence"  # an older opener's fence: nothing of it was acknowledged
    OLDER_ROWS = "older rows"  # rows of a writer whose epoch is not above ours


def _create(wal: WalLog, wal_id: int, data: bytes, epoch: int, retries: int = 5) -> str:
    """Create ``wal/{wal_id}.sst``. Returns OURS, or who else holds the slot (an older fence or
    older rows). Raises Fenced when the latest manifest holds a newer ``writer_epoch``.

    An ambiguous create (a retryable error that may have taken effect) is resolved by reading
    the slot back: our bytes there are ours. A fence has no bytes to tell it from another
    fence, so a zero-byte slot counts as our fence only after an ambiguous attempt of ours;
    any other fence in the slot fences older writers just as well (and the opener re-checks
    the manifest after fencing, see ``recovery.fence_older_writers``)."""
    path = wal.path(wal_id)
    last: StoreError | None = None
    maybe_ours = False  # an attempt of ours may have landed
    for _ in range(retries):
        try:
            wal.store.put_if_absent(path, data)
            return _Outcome.OURS
        except ObjectAlreadyExists:
            pass
        except StoreError as e:
            if not is_retryable(e):
                raise
            last = e
            maybe_ours = True
        try:
            existing = wal.store.get(path).data
        except ObjectNotFound:
            continue  # the failed create did not take effect: try again
        except StoreError as e:
            last = e
            continue
        if existing == data and (data or maybe_ours):
            return _Outcome.OURS  # an earlier attempt of ours landed
        try:
            current = wal.latest_writer_epoch()
        except DatabaseNotFound as e:
            # no manifest, yet the slot is taken: a hard destroy is deleting the database (its
            # manifests go first), so this writer must stop as if fenced
            raise Fenced("writer", epoch, epoch + 1) from e
        if current > epoch:
            raise Fenced("writer", epoch, current)
        return _Outcome.OLDER_FENCE if len(existing) == 0 else _Outcome.OLDER_ROWS
    assert last is not None
    raise last


def first_open_slot(existing: Sequence[int], replay_after: int, next_wal_sst_id: int) -> int:
    """The first WAL id a new writer fences at: the lowest id at or above
    ``max(replay_after + 1, next_wal_sst_id)`` that no SST in ``existing`` (ascending) holds.

    Every id below ``next_wal_sst_id`` holds an SST or was collected: writers record there only
    the end of their contiguous prefix. Above it, a hole is a write a previous writer may still
    have in flight; fencing it is what keeps that write from landing (SlateDB RFC 0001)."""
    slot = max(replay_after + 1, next_wal_sst_id)
    for wal_id in existing:
        if wal_id < slot:
            continue
        if wal_id != slot:
            break
        slot += 1
    return slot


def damaged_holes(
    existing: Sequence[int],
    replay_after: int,
    next_wal_sst_id: int,
    window: int,
    last_seen: int = 0,
) -> list[tuple[int, int]]:
    """The holes (``(first, last)`` id ranges) in ``existing`` (ascending WAL ids after
    ``replay_after``) that no writer can have left: damage (SlateDB RFC 0001). ``window``, ``last_seen``:
    the manifest's ``max_parallel_writes`` and ``wal_id_last_seen``.

    Legal holes are ids at or below ``replay_after`` (GC collects those, behind gc/wal.boundary;
    they are never listed), and:

    * above ``next_wal_sst_id``: ids above ``top - window``, ``top`` the highest id present:
      writes possibly still in flight in the last writer's window (a writer issues id x only
      once every id <= x - window has landed, see :class:`WalWindow`; an opener fences one id
      at a time and leaves none). An id at or below ``top - window`` had landed before ``top``
      was issued.
    * below it: only the ids after ``last_seen`` up to ``next_wal_sst_id`` (SlateDB RFC 0004: a clone
      copies its parent's WAL up to its ``wal_id_last_seen``, the last SST with data for it,
      and keeps the parent's ``next_wal_sst_id``). Any other: a writer records there only the
      end of its contiguous prefix, so every id below it was written.
    """
    if not existing:
        return []
    top = existing[-1]
    copied_to = max(last_seen, replay_after)
    out: list[tuple[int, int]] = []
    prev = replay_after
    for wal_id in existing:
        lo, hi = prev + 1, wal_id - 1
        prev = wal_id
        if lo > hi:
            continue
        if lo < next_wal_sst_id and (wal_id < next_wal_sst_id or lo != copied_to + 1):
            out.append((lo, min(hi, next_wal_sst_id - 1)))
        lo = max(lo, next_wal_sst_id)
        hi = min(hi, top - window)
        if lo <= hi:
            if out and out[-1][1] == lo - 1:
                lo = out.pop()[0]
            out.append((lo, hi))
    return out


def missing_error(wal: WalLog, holes: Sequence[tuple[int, int]], why: str) -> WalSstMissing:
    """A :class:`~slatedb_core.errors.WalSstMissing` naming the WAL SSTs in ``holes``."""
    spans = ", ".join(str(lo) if lo == hi else f"{lo}..{hi}" for lo, hi in holes)
    return WalSstMissing(
        wal.path(holes[0][0]),
        tuple(holes),
        f"WAL id(s) {spans} missing ({why}): the writes in them were acknowledged, and going "
        f"on without them would lose them or serve older values; restore them under {wal.dir}/",
    )


def fence_wal(wal: WalLog, epoch: int, start_id: int, count: int = 1) -> int:
    """Create ``count`` consecutive fences (zero-byte WAL objects, SlateDB 0.17's) from the first
    free id >= ``start_id``; returns the id of the last one. Call it only after committing
    ``epoch`` as the manifest's ``writer_epoch``. A slot someone else holds is stepped over and
    restarts the run (SlateDB RFC 0001: "writer 2 begins again at position 4"), unless the
    latest manifest holds a newer epoch: then it raises Fenced."""
    wal_id = start_id
    run = 0
    while True:
        if _create(wal, wal_id, FENCE, epoch) == _Outcome.OURS:
            run += 1
            if run >= count:
                return wal_id
        else:
            log.info(
                "WAL slot %d held by an older writer or opener; fencing at the next id", wal_id
            )
            run = 0
        wal_id += 1


class WalWriter:
    """Writes this writer's WAL SSTs in id order. Not thread-safe: the Db's flusher owns it."""

    def __init__(self, wal: WalLog, epoch: int, next_id: int, options: SstOptions) -> None:
        self.wal = wal
        self.epoch = epoch
        self.next_id = next_id
        self.options = options
        self.boundary = wal_boundary(wal)
        self.lease = LeasedBoundary(self.boundary)
        self._last_tick = 0
        # the batch and bytes of a write whose create failed ambiguously: its retry must send
        # the same bytes (a fresh encode has a new clock tick), or the attempt that did land
        # would not be recognised as ours
        self._unsettled: tuple[pa.RecordBatch, bytes] | None = None

    def encode(self, batch: pa.RecordBatch, at: int | None = None) -> bytes:
        """``batch`` as a WAL SST, every row without a ``create_ts`` stamped with the clock tick
        ``at`` (its newest write's, see :class:`~slatedb_core.wal.pipeline.WalBuffer`), or now
        (see :func:`~slatedb_core.wal.log.encode_wal_sst`)."""
        return encode_wal_sst(batch, self.options, self.tick(at))

    def tick(self, at: int | None = None) -> int:
        """``at`` (default: now) in ms since the epoch, never below a tick this writer gave
        before (SlateDB 0.17's clock is monotonic)."""
        now = time.time_ns() // 1_000_000 if at is None else at
        self._last_tick = max(self._last_tick, now)
        return self._last_tick

    def write_at(self, wal_id: int, data: bytes) -> None:
        """Create ``wal/{wal_id}.sst`` (for :class:`WalWindow`: no stepping over, since later ids
        are in flight). Raises Fenced when a newer writer holds the slot or GC passed it."""
        self.lease.prepare()
        if _create(self.wal, wal_id, data, self.epoch) != _Outcome.OURS:
            # An older writer or opener inside our window is impossible: the fence keeps older
            # writers below it, and an opener re-reads the manifest between listing the WAL and
            # fencing (so one that lists after our fence sees our epoch and stops).
            raise WalEpochConflict(
                f"{self.wal.path(wal_id)} is held by an older writer or opener after our fence"
            )
        self._check(wal_id, lease_clock())

    def _check(self, wal_id: int, created_at: float) -> None:
        """The boundary check of the create of ``wal_id``, completed at ``created_at``."""
        if wal_sst_behind_boundary(self.lease, self.wal, wal_id, created_at):
            raise Fenced("writer", self.epoch, self.epoch + 1)

    def write(self, batch: pa.RecordBatch, at: int | None = None) -> int:
        """Write one WAL SST (its rows written at clock tick ``at``, see :meth:`encode`); returns
        its id. Raises Fenced if a newer writer took the slot."""
        unsettled, self._unsettled = self._unsettled, None
        data = unsettled[1] if unsettled and unsettled[0].equals(batch) else self.encode(batch, at)
        wal_id = self.next_id
        try:
            return self._write(wal_id, data)
        except StoreError:
            self._unsettled = (batch, data)
            raise

    def _write(self, wal_id: int, data: bytes) -> int:
        self.lease.prepare()
        while (outcome := _create(self.wal, wal_id, data, self.epoch)) != _Outcome.OURS:
            # An older *writer* past our fence is impossible with one write in flight, but an
            # older *opener* is not: one that bumped its epoch before us and listed the WAL after
            # our fence leaves its fence here before it finds out it is fenced. Nothing of it
            # was acknowledged, so step over it; anything else is a real conflict.
            if outcome != _Outcome.OLDER_FENCE:
                raise WalEpochConflict(
                    f"{self.wal.path(wal_id)} holds another writer's rows after our fence, and "
                    f"the manifest holds no epoch above ours ({self.epoch})"
                )
            log.info("WAL slot %d holds a stale opener's fencing SST; using the next id", wal_id)
            wal_id += 1
        self._check(wal_id, lease_clock())
        self.next_id = wal_id + 1
        return wal_id


def wal_boundary(wal: WalLog) -> BoundaryObject:
    """``<db>/gc/wal.boundary``: WAL ids at or below it may have been deleted by GC. In the main
    store, with the other boundary files, even when the WAL has a store of its own (SlateDB RFC
    0009)."""
    return BoundaryObject(
        wal.main, boundary_path(wal.db_path, WAL_BOUNDARY), lease_s=boundaries.DEFAULT_LEASE_S
    )


def wal_sst_behind_boundary(lease: LeasedBoundary, wal: WalLog, wal_id: int, at: float) -> bool:
    """Whether WAL SST ``wal_id``, created or read by a request that returned at ``at``
    (:func:`~slatedb_core.meta.boundary.lease_clock`), is at or behind ``gc/wal.boundary``: GC
    may have deleted that slot, and a fenced writer created it again with writes no one
    acknowledged (SlateDB RFC 0026). Such an object is no part of the database. The one check
    of a writer's creates (:meth:`WalWriter.write`, Fenced) and of what the change feed reads
    below the replay point (:mod:`slatedb_core.feed.changes`, ChangesCollected); a replay reads
    only above the replay point, where GC never deletes."""
    try:
        lease.check(wal_id, wal.path(wal_id), at)
    except ObjectVersionBehindBoundary:
        return True
    return False


WalDone = Callable[[int, BaseException | None], None]
"""Called from a window thread with (wal id, None) once the SST landed, or with the error of a
failed attempt: Fenced/WalEpochConflict/BackgroundThreadDied (an unexpected error) are final,
any other error is retried at the same id."""


class WalWindow:
    """Up to ``size`` WAL creates in flight at consecutive ids (SlateDB RFC 0001, "Parallel Writes").

    Sliding window: id x is issued only when every id <= x - size has landed, so in-flight and
    lost writes always lie in the ``size`` ids after the contiguous prefix. A create that fails
    with a store error is retried at the same id (never skipped: a skipped id would be a hole no
    one fills) until it lands, the window halts, or it is closed. The first Fenced (or epoch
    conflict, or unexpected error) halts the window: nothing new is issued, creates in flight
    run to completion.
    """

    def __init__(self, writer: WalWriter, size: int, name: str = "slatedb-wal") -> None:
        self.writer = writer
        self.size = size
        self._cv = threading.Condition()
        self._pending: set[int] = set()  # issued, not landed
        self._halted: BaseException | None = None
        self._closed = False
        self._pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix=name)

    @property
    def halted(self) -> BaseException | None:
        return self._halted

    def in_flight(self) -> int:
        with self._cv:
            return len(self._pending)

    def _has_room(self) -> bool:
        return not self._pending or min(self._pending) > self.writer.next_id - self.size

    def wait_for_room(self, timeout: float | None = None) -> bool:
        """Block until the next id may be issued; False on timeout. Raises the halting error, or
        ``closed`` if the window was closed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while True:
                if self._halted is not None:
                    raise self._halted
                if self._closed:
                    raise WalWindowClosed("WAL window closed")
                if self._has_room():
                    return True
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cv.wait(0.05 if left is None else min(left, 0.05))

    def submit(self, data: bytes, done: WalDone) -> int:
        """Issue the next id for ``data`` (call :meth:`wait_for_room` first); returns the id."""
        with self._cv:
            if self._halted is not None:
                raise self._halted
            if self._closed:
                raise WalWindowClosed("WAL window closed")
            if not self._has_room():
                raise WalWindowClosed("WAL window is full: call wait_for_room first")
            wal_id = self.writer.next_id
            self.writer.next_id = wal_id + 1
            self._pending.add(wal_id)
        self._start(wal_id, data, done)
        return wal_id

    def _start(self, wal_id: int, data: bytes, done: WalDone) -> None:
        """Run the create of ``wal_id`` (in the pool; a simulation queues it instead)."""
        self._pool.submit(self._run, wal_id, data, done)

    def _run(self, wal_id: int, data: bytes, done: WalDone) -> None:
        with self._cv:
            halted, closed = self._halted, self._closed
        if halted is not None:
            # another create was fenced (or the process died) while this one waited for a pool
            # thread: issue nothing more, as after a failed attempt
            done(wal_id, halted)
            return
        if closed:
            # the window was closed (a crash, or a close that gave up) before this create got a
            # pool thread: a stopped writer issues nothing new
            done(wal_id, WalWindowClosed("WAL window closed"))
            return
        delay = 0.05
        while not self._attempt(wal_id, data, done):
            with self._cv:
                halted, closed = self._halted, self._closed
            if halted is not None:
                done(wal_id, halted)  # never retried: the waiter learns it is fenced
                return
            if closed:
                return
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _attempt(self, wal_id: int, data: bytes, done: WalDone) -> bool:
        """One create of ``wal_id``, reported to ``done``; False when it is to be retried."""
        try:
            self.writer.write_at(wal_id, data)
        except (Fenced, WalEpochConflict) as e:
            self._halt(e)
            done(wal_id, e)
            return True
        except SlateDBError as e:
            log.warning("WAL write of id %d failed (retried at the same id): %s", wal_id, e)
            done(wal_id, e)
            return False
        except Exception as e:
            # a bug or a store breaking its contract: halt rather than leave a hole silently, and
            # tell the waiter with a typed error (re-raised, it would die in the pool's Future)
            log.exception("WAL create of id %d died", wal_id)
            err = BackgroundThreadDied(f"WAL create of {self.writer.wal.path(wal_id)}", e)
            err.__cause__ = e
            self._halt(err)
            done(wal_id, err)
            return True
        except BaseException as e:  # a simulated kill: halt, as the process would stop
            self._halt(e)
            done(wal_id, e)
            raise
        with self._cv:
            self._pending.discard(wal_id)
            self._cv.notify_all()
        done(wal_id, None)
        return True

    def _halt(self, err: BaseException) -> None:
        with self._cv:
            if self._halted is None:
                self._halted = err
            self._cv.notify_all()

    def close(self, wait: bool = True) -> None:
        """Stop retrying and issuing; ``wait`` joins the creates in flight (a crash does not)."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._pool.shutdown(wait=wait, cancel_futures=False)
