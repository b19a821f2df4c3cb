"""The WAL flusher of a writer (SlateDB RFC 0001, "Writes", "Acknowledgements", "Parallel
Writes"): the writes buffered by generation, sealing a generation into one WAL SST, writing it
(one create at a time, or through the :class:`~slatedb_core.wal.writer.WalWindow` of parallel
writes), and waiting until a generation is durable; the background thread that flushes every
``flush_interval`` or once a buffer reaches ``wal_sst_size_bytes``.

:class:`WalFlusher` is a part the writer's engine
(:class:`~slatedb_core.writer.engine.WriterEngine`) holds, not a base class: it owns its buffer,
generations, acknowledgements, window and group commit, and the others reach them only through
its methods (:meth:`WalFlusher.await_durable`, :meth:`WalFlusher.flush`,
:meth:`WalFlusher.seal_locked`, :meth:`WalFlusher.shut_down`, ...). A put appends to the memtable
and to the WAL buffer of the current generation under one lock, so that seqs enter the WAL in the
order they were assigned: that lock (:attr:`WalFlusher.lock`, with its condition ``cv``) and the
current :attr:`WalFlusher.buffer` are public, a documented protocol that keeps the hottest path of
the engine free of indirection (append under the lock, then :meth:`WalFlusher.wrote_locked`). The
flusher also holds the state every part of the writer consults to stop (``error``, the first
error it failed with; ``closed``; the ``stopping`` event; the background threads) and
:meth:`WalFlusher.fail`, which records that error and calls the ``on_stop`` the engine gave it.
The flusher knows nothing of the memtable, L0 or manifest: it imports nothing above ``wal/``.

Locks: ``lock`` (with its condition ``cv``) guards the buffer, the generation counter and
:class:`~slatedb_core.wal.pipeline.WalAcks`; ``_flush_lock`` lets one flush write or dispatch at
a time (it is taken before ``lock``, never inside it).

Group commit (docs/gc-and-boundaries.md, "What a durable put costs"): a durable put wakes the
flusher thread at once instead of waiting for ``flush_interval``, but the thread first gathers
the durable puts of the other writers. Writers acknowledged together by one WAL SST come back
together, a few hundred microseconds apart; sealing at the first of them would split them over
two SSTs (and each SST costs a create), and once split
they would stay split, each half sealing as the other's write lands. So the thread seals once
every writer that made a durable put lately, and is not waiting on a generation already sealed,
waits on the current one (see :class:`GroupCommit`), or after a short grace (a tenth of a recent
WAL write, at most ``flush_interval``) if some do not come: a lone writer is never delayed.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta

from slatedb_core.errors import (
    BackgroundThreadDied,
    DbClosed,
    Fenced,
    SlateDBError,
    StoreError,
    WalEpochConflict,
    WalWindowClosed,
)
from slatedb_core.store.engine_counters import DURABLE_PUT
from slatedb_core.wal.pipeline import WalAcks, WalBuffer
from slatedb_core.wal.writer import WalWindow, WalWriter

log = logging.getLogger(__name__)

GRACE_FRACTION = 0.1
"""The longest a flusher waits for the rest of a group, as a fraction of a recent WAL write."""
MIN_GRACE_S = 0.0002


class GroupCommit:
    """How many durable puts the flusher waits for before sealing a generation (module
    docstring): every writer thread that began a durable wait within the last few WAL writes
    (:meth:`expected`), less those waiting on sealed generations not yet durable. Not
    thread-safe: the flusher's ``lock`` guards it."""

    def __init__(self, flush_interval_s: float) -> None:
        self.waiting = 0  # durable puts waiting on the current (unsealed) generation
        self.behind: dict[int, int] = {}  # sealed generation not yet durable -> its waiters
        self.seen: dict[int, float] = {}  # writer thread -> when it last began a durable wait
        self.write_s = 0.0  # a recent WAL write's duration (moving average)
        self.max_grace_s = flush_interval_s

    def arrive(self, thread: int, now: float, gen: int, current: int) -> None:
        """A durable wait on generation ``gen`` begins (``current``: the unsealed generation)."""
        self.seen[thread] = now
        if gen == current:
            self.waiting += 1
        elif gen in self.behind:
            self.behind[gen] += 1

    def leave(self, gen: int, current: int) -> None:
        """A durable wait on ``gen`` ends (acknowledged, or failed)."""
        if gen == current:
            self.waiting -= 1
        elif gen in self.behind:
            self.behind[gen] -= 1

    def sealed(self, gen: int) -> None:
        """Generation ``gen``, the current one, was sealed."""
        self.behind[gen] = self.waiting
        self.waiting = 0

    def durable(self, gen: int) -> None:
        """Generation ``gen`` is in the WAL: its waiters are about to come back."""
        self.behind.pop(gen, None)

    def wrote(self, seconds: float) -> None:
        self.write_s = seconds if self.write_s == 0 else 0.8 * self.write_s + 0.2 * seconds

    def grace_s(self) -> float:
        return min(self.max_grace_s, max(MIN_GRACE_S, GRACE_FRACTION * self.write_s))

    def horizon_s(self) -> float:
        """How recent a durable wait must be for its thread to count as a writer still writing:
        a few WAL writes, at least 50 ms, at most a second."""
        return min(1.0, max(0.05, 3 * (self.write_s + self.grace_s())))

    def expected(self, now: float) -> int:
        """Durable puts the current generation should gather (at least one)."""
        cutoff = now - self.horizon_s()
        for thread in [t for t, at in self.seen.items() if at < cutoff]:
            del self.seen[thread]
        return max(1, len(self.seen) - sum(self.behind.values()))

    def complete(self, now: float) -> bool:
        return self.waiting >= self.expected(now)


class WalFlusher:
    """The WAL side of a writer and the failure state every part of it shares; see the module
    docstring. Its fields are its own: the other parts read the few public ones (``lock``,
    ``cv``, ``buffer``, ``error``, ``closed``, ``stopping``) and call its methods."""

    def __init__(
        self,
        path: str,
        flush_interval: timedelta,
        wal_sst_size_bytes: int,
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        self.path = path
        self._flush_interval = flush_interval
        self._wal_size = wal_sst_size_bytes
        self._on_stop = on_stop  # wakes the other parts' threads when the writer stops
        self.lock = threading.Lock()
        """The writer's lock: held around every write to the memtable and to :attr:`buffer`
        together, so that seqs enter the WAL in the order they were assigned."""
        self.cv = threading.Condition(self.lock)
        self._flush_lock = threading.Lock()  # one WAL writer at a time
        self.error: BaseException | None = None
        """The first error the writer failed with (set by :meth:`fail` only)."""
        self.closed = False
        self._gen = 1  # generation of the current WAL buffer
        self.buffer = WalBuffer()
        """The current generation's writes: append to it only with :attr:`lock` held, then
        call :meth:`wrote_locked`."""
        # time.time_ns() of the newest write (under lock; every write path sets it): the tick
        # a sealed buffer's rows and a frozen memtable's flush are stamped with (RFC 0003)
        self._last_write_ns = 0
        # sealed generations and which of them are durable (under lock); parallel WAL writes
        # (max_parallel_writes > 1, see dispatch) go through _window
        self._acks = WalAcks()
        self._window: WalWindow | None = None
        self._wake = threading.Event()  # wakes the WAL flusher thread
        self.stopping = threading.Event()
        """Set when the writer stops (failed or closed): every background loop ends."""
        self._threads: list[threading.Thread] = []
        self._wal_writer: WalWriter
        self.group_commit = GroupCommit(flush_interval.total_seconds())
        self._issued_at: dict[int, float] = {}  # generation -> when given to the window

    def start(self, writer: WalWriter, window: int, last_wal_id: int, replayed: bool) -> None:
        """Write through ``writer`` from now on; ``window`` > 1: that many creates in flight.
        ``last_wal_id``: the WAL id of our fencing SST; ``replayed``: the memtable holds
        replayed writes, durable already in WAL SSTs up to it (generation 0)."""
        self._acks.last_wal_id = last_wal_id
        self._wal_writer = writer
        if window > 1:
            self._window = WalWindow(writer, window, name=f"slatedb-wal-{self.path}")
        if replayed:
            self._acks.wal_id_of_gen[0] = last_wal_id

    @property
    def window(self) -> WalWindow | None:
        """The window of parallel WAL writes, None with ``max_parallel_writes`` 1."""
        return self._window

    def replace_window(self, make: Callable[[WalWriter, int], WalWindow]) -> None:
        """Close the window (before anything was written) and write through ``make(writer,
        size)`` instead: the simulation's seam for a window whose creates it schedules."""
        old = self._window
        assert old is not None
        old.close()
        self._window = make(self._wal_writer, old.size)

    @property
    def next_wal_id(self) -> int:
        """The WAL id the next WAL SST will be created at."""
        return self._wal_writer.next_id

    def check_usable(self) -> None:
        if self.closed:
            raise DbClosed(f"database {self.path!r} is closed")
        if self.error is not None:
            raise self.error

    def fail(self, err: BaseException) -> None:
        """Stop the writer with ``err``: every waiter and every later call raises it."""
        with self.lock:
            if self.error is None:
                self.error = err
                log.error("database %r stops: %s", self.path, err)
            self.cv.notify_all()
        self.stopping.set()
        self._wake.set()
        if self._on_stop is not None:
            self._on_stop()

    # ---- writes (lock held) ------------------------------------------------------------------
    def wrote_locked(self, at_ns: int, keep_newer: bool = False) -> int:
        """Writes were appended to :attr:`buffer` at clock ``at_ns`` (time_ns; ``keep_newer``:
        unless a later write's tick is newer): wake the flusher thread once the buffer is full;
        returns the generation they are in."""
        self._last_write_ns = max(self._last_write_ns, at_ns) if keep_newer else at_ns
        if self.buffer.nbytes >= self._wal_size and not self._wake.is_set():
            self._wake.set()
        return self._gen

    def seal_locked(self) -> int:
        """Seal the current buffer (if it holds writes) into a generation to write; returns
        the newest sealed generation."""
        if not self.buffer.empty():
            self.buffer.tick_ms = self.last_write_ms()
            self._acks.seal(self._gen, self.buffer)
            self.group_commit.sealed(self._gen)
            self.buffer = WalBuffer()
            self._gen += 1
        return self._gen - 1

    def last_write_ms(self) -> int | None:
        """The clock tick (ms) of the newest write, None before the first."""
        return self._last_write_ns // 1_000_000 if self._last_write_ns else None

    # ---- durability ------------------------------------------------------------------------
    @property
    def durable_gen(self) -> int:
        """Every generation <= this one is in the WAL (read under lock)."""
        return self._acks.durable_gen

    @property
    def last_wal_id(self) -> int:
        """The WAL id of :attr:`durable_gen` (at open: our fencing SST's)."""
        return self._acks.last_wal_id

    def wal_id_of(self, gen: int) -> int:
        """The WAL id generation ``gen`` landed at (0: the replayed writes), 0 if unknown."""
        acks = self._acks
        return acks.wal_id_of_gen.get(gen, acks.last_wal_id if gen == 0 else 0)

    def forget_before_locked(self, gen: int) -> None:
        """Generations up to ``gen`` are in L0: drop what is kept of them."""
        self._acks.forget_before(gen)

    def failure_locked(self, since: int, upto: int | None = None) -> BaseException | None:
        """The failure of the oldest generation (<= ``upto``) not landed whose last attempt
        failed after failure number ``since``."""
        return self._acks.failure(since, upto)

    def await_durable(self, gen: int) -> None:
        """Wait until generation ``gen`` is in the WAL (group commit: module docstring)."""
        with self.lock:
            # one more durable put for the flusher's group commit to gather (module docstring)
            start = time.monotonic()
            self.group_commit.arrive(threading.get_ident(), start, gen, self._gen)
            self.cv.notify_all()
            try:
                while not self._acks.acknowledged(gen, self.error):
                    if self.closed and not self._threads:
                        raise DbClosed("database closed before the write became durable")
                    self._wake.set()
                    self.cv.wait(0.05)
            finally:
                self.group_commit.leave(gen, self._gen)
        DURABLE_PUT.since(start)  # issue 40, item 11 (slatedb_core.store.engine_counters)

    def _gather(self) -> None:
        """Group commit: with durable puts waiting on the current generation, wait (at most a
        short grace) until every writer expected has joined them (module docstring)."""
        with self.lock:
            group = self.group_commit
            now = time.monotonic()
            if group.waiting == 0 or group.complete(now):
                return
            deadline = now + group.grace_s()
            while self.error is None and not self.stopping.is_set():
                now = time.monotonic()
                if now >= deadline or group.complete(now):
                    return
                self.cv.wait(deadline - now)

    def flush(self) -> None:
        """Write everything buffered to the WAL now and wait until it is durable."""
        self.check_usable()
        self.flush_wal()
        self.check_usable()

    def flush_wal(self) -> None:
        """:meth:`flush` without its checks (raises what the write raises)."""
        if self._window is not None:
            since = self._acks.failure_serial
            self._wait_durable_upto(self.dispatch(None, since), since)
            return
        with self._flush_lock:
            with self.lock:
                self.seal_locked()
                pending = list(self._acks.sealed)
            for gen, buf in pending:
                started = time.monotonic()
                try:
                    wal_id = self._wal_writer.write(buf.to_batch(), buf.tick_ms)
                except Fenced as e:
                    self.fail(e)
                    raise
                except StoreError as e:
                    with self.lock:
                        self._acks.write_failed(gen, e)
                        self.cv.notify_all()
                    raise
                with self.lock:
                    self._acks.written(gen, wal_id)
                    self.group_commit.durable(gen)
                    self.group_commit.wrote(time.monotonic() - started)
                    self.cv.notify_all()

    def await_wal(self, gen: int) -> None:
        """Make generation ``gen`` durable, retrying WAL flushes that fail on the store."""
        while True:
            with self.lock:
                if self._acks.durable_gen >= gen or self.error is not None:
                    break
            try:
                self.flush_wal()
            except Fenced:
                break
            except StoreError as e:
                log.warning("WAL flush before memtable flush failed, retrying: %s", e)
                time.sleep(0.1)
        if self.error is not None:
            raise self.error

    # ---- parallel WAL writes (SlateDB RFC 0001, "Parallel Writes") ----------------------------
    def dispatch(self, limit: int | None, since: int = 0) -> int:
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
            with self.lock:
                if limit is None:
                    self.seal_locked()
                target = self._gen - 1
            issued = 0
            while limit is None or issued < limit:
                with self.lock:
                    todo = acks.next_unissued()
                    idle = todo is None and (limit is None or self.buffer.empty())
                if idle or (todo is not None and limit is None and todo[0] > target):
                    break
                self._wait_for_room(window, since)
                if todo is None:
                    with self.lock:
                        self.seal_locked()
                        todo = acks.next_unissued()
                    if todo is None:
                        break
                gen, buf = todo
                data = self._wal_writer.encode(buf.to_batch(), buf.tick_ms)
                with self.lock:
                    acks.issued.add(gen)
                    self._issued_at[gen] = time.monotonic()
                try:
                    window.submit(data, functools.partial(self._on_wal_done, gen))
                except BaseException:
                    with self.lock:
                        acks.issued.discard(gen)
                    raise
                issued += 1
            return target

    def _wait_for_room(self, window: WalWindow, since: int) -> None:
        while not window.wait_for_room(0.05):
            # a window stalled on a failing create must not hold _flush_lock forever: report
            # the failure (the create keeps being retried at its id)
            with self.lock:
                if self.error is not None:
                    raise self.error
                failure = self._acks.failure(since)
                if failure is not None:
                    raise failure

    def _on_wal_done(self, gen: int, wal_id: int, err: BaseException | None) -> None:
        """A window thread's report on generation ``gen`` at ``wal_id``."""
        final = err is not None and (
            isinstance(err, (Fenced, WalEpochConflict, BackgroundThreadDied))
            or not isinstance(err, SlateDBError)
        )
        with self.lock:
            if err is None:
                self._acks.landed_at(gen, wal_id)
                self.group_commit.durable(gen)
                issued = self._issued_at.pop(gen, None)
                if issued is not None:
                    self.group_commit.wrote(time.monotonic() - issued)
            else:
                self._acks.create_failed(gen, err, final)
            self.cv.notify_all()
        if final:
            assert err is not None
            self.fail(err)

    def _wait_durable_upto(self, target: int, since: int = 0) -> None:
        """Wait until every generation <= ``target`` is durable (contiguously in the WAL); raise
        a failure of one of them reported after failure number ``since`` (an older one is being
        retried: its outcome is awaited)."""
        with self.lock:
            while self._acks.durable_gen < target:
                if self.error is not None:
                    raise self.error
                failure = self._acks.failure(since, target)
                if failure is not None:
                    raise failure
                if self.closed and not self._threads:
                    raise DbClosed("database closed before the write became durable")
                self.cv.wait(0.05)

    # ---- threads and stopping ----------------------------------------------------------------
    def add_thread(self, thread: threading.Thread) -> None:
        """A background thread of the writer, joined by :meth:`shut_down` (while any runs, a
        closed writer's durable waits go on waiting for it)."""
        self._threads.append(thread)

    def refuse_writes(self) -> None:
        """Mark the writer closed before its last flush: every later call is refused
        (``DbClosed``), so each write acknowledged before this instant is in the buffer that
        flush writes (review55: a buffered put acknowledged between the flush and
        :meth:`shut_down` was lost while ``close()`` succeeded). Durable waits go on until the
        threads are joined."""
        with self.lock:
            self.closed = True
            self.cv.notify_all()

    def shut_down(self, error: BaseException | None = None) -> None:
        """Mark the writer closed (and failed with ``error``), wake and join every background
        thread, close the window (a crash, ``error`` a DbClosed, leaves its creates in flight,
        as a killed process would)."""
        with self.lock:
            self.closed = True
            if error is not None and self.error is None:
                self.error = error
            self.cv.notify_all()
        self.stopping.set()
        self._wake.set()
        if self._on_stop is not None:
            self._on_stop()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=30)
        if self._window is not None:
            self._window.close(wait=not isinstance(error, DbClosed))
        self._threads.clear()

    def run(self) -> None:
        """The flusher thread: flush every ``flush_interval``, or when woken."""
        interval = self._flush_interval.total_seconds()
        while not self.stopping.is_set():
            self._wake.wait(interval)
            self._wake.clear()
            if self.stopping.is_set():
                break
            self._gather()
            try:
                if self._window is not None:
                    self.dispatch(self._window.size, self._acks.failure_serial)
                else:
                    self.flush_wal()
            except WalWindowClosed:
                return
            except (Fenced, WalEpochConflict) as e:
                self.fail(e)  # durable puts waiting on this flusher must not hang
                return
            except SlateDBError as e:
                log.warning("WAL flush of %r failed, retrying: %s", self.path, e)
                time.sleep(min(interval, 0.5))
