"""The WAL flusher of a writer (SlateDB RFC 0001, "Writes", "Acknowledgements", "Parallel
Writes"): the writes buffered by generation, sealing a generation into one WAL SST, writing it
(one create at a time, or through the :class:`~slatedb_core.wal.writer.WalWindow` of parallel
writes), and waiting until a generation is durable; the background thread that flushes every
``flush_interval`` or once a buffer reaches ``wal_sst_size_bytes``.

:class:`WalFlusher` is the base class of the writer's engine
(:class:`~slatedb_core.writer.engine.WriterEngine`), not a separate object: a put appends to the
memtable and to the WAL buffer of the current generation under one lock, so that seqs enter
the WAL in the order they were assigned, and it does so with no indirection on the hottest path
of the engine. The flusher holds that lock, the state every part of the writer consults to stop
(the first error it fails with, closed, the stop event and its background threads) and
:meth:`WalFlusher._fail`, which records that error; the engine adds the memtable, L0 and
manifest side. The flusher knows nothing of them: it imports nothing above ``wal/``.

Locks: ``_lock`` (with its condition ``_cv``) guards the buffer, the generation counter and
:class:`~slatedb_core.wal.pipeline.WalAcks`; ``_flush_lock`` lets one flush write or dispatch at
a time (it is taken before ``_lock``, never inside it).

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
    thread-safe: the flusher's ``_lock`` guards it."""

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
    """The WAL side of a writer and the failure state it shares; see the module docstring."""

    def __init__(self, path: str, flush_interval: timedelta) -> None:
        self.path = path
        self._flush_interval = flush_interval
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._flush_lock = threading.Lock()  # one WAL writer at a time
        self._error: BaseException | None = None
        self._closed = False
        self._gen = 1  # generation of the current WAL buffer
        self._buf = WalBuffer()
        # time.time_ns() of the newest write (under _lock; every write path sets it): the tick
        # a sealed buffer's rows and a frozen memtable's flush are stamped with (RFC 0003)
        self._last_write_ns = 0
        # sealed generations and which of them are durable (under _lock); parallel WAL writes
        # (max_parallel_writes > 1, see _dispatch_wal) go through _window
        self._acks = WalAcks()
        self._window: WalWindow | None = None
        self._wake = threading.Event()  # wakes the WAL flusher thread
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._wal_writer: WalWriter
        self._group = GroupCommit(flush_interval.total_seconds())
        self._issued_at: dict[int, float] = {}  # generation -> when given to the window

    def _start_wal(self, writer: WalWriter, window: int) -> None:
        """Write through ``writer`` from now on; ``window`` > 1: that many creates in flight."""
        self._wal_writer = writer
        if window > 1:
            self._window = WalWindow(writer, window, name=f"slatedb-wal-{self.path}")

    def _check_usable(self) -> None:
        if self._closed:
            raise DbClosed(f"database {self.path!r} is closed")
        if self._error is not None:
            raise self._error

    def _fail(self, err: BaseException) -> None:
        """Stop the writer with ``err``: every waiter and every later call raises it."""
        with self._lock:
            if self._error is None:
                self._error = err
                log.error("database %r stops: %s", self.path, err)
            self._cv.notify_all()
        self._stop.set()
        self._wake.set()

    # ---- durability ------------------------------------------------------------------------
    @property
    def _durable_gen(self) -> int:
        """Every generation <= this one is in the WAL (read under _lock)."""
        return self._acks.durable_gen

    def _await_durable(self, gen: int) -> None:
        with self._lock:
            # one more durable put for the flusher's group commit to gather (module docstring)
            start = time.monotonic()
            self._group.arrive(threading.get_ident(), start, gen, self._gen)
            self._cv.notify_all()
            try:
                while not self._acks.acknowledged(gen, self._error):
                    if self._closed and not self._threads:
                        raise DbClosed("database closed before the write became durable")
                    self._wake.set()
                    self._cv.wait(0.05)
            finally:
                self._group.leave(gen, self._gen)
        DURABLE_PUT.since(start)  # issue 40, item 11 (slatedb_core.store.engine_counters)

    def _seal_locked(self) -> None:
        if not self._buf.empty():
            self._buf.tick_ms = self._last_write_ms()
            self._acks.seal(self._gen, self._buf)
            self._group.sealed(self._gen)
            self._buf = WalBuffer()
            self._gen += 1

    def _last_write_ms(self) -> int | None:
        """The clock tick (ms) of the newest write, None before the first."""
        return self._last_write_ns // 1_000_000 if self._last_write_ns else None

    def _gather(self) -> None:
        """Group commit: with durable puts waiting on the current generation, wait (at most a
        short grace) until every writer expected has joined them (module docstring)."""
        with self._lock:
            group = self._group
            now = time.monotonic()
            if group.waiting == 0 or group.complete(now):
                return
            deadline = now + group.grace_s()
            while self._error is None and not self._stop.is_set():
                now = time.monotonic()
                if now >= deadline or group.complete(now):
                    return
                self._cv.wait(deadline - now)

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
                started = time.monotonic()
                try:
                    wal_id = self._wal_writer.write(buf.to_batch(), buf.tick_ms)
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
                    self._group.durable(gen)
                    self._group.wrote(time.monotonic() - started)
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

    # ---- parallel WAL writes (SlateDB RFC 0001, "Parallel Writes") ----------------------------
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
                data = self._wal_writer.encode(buf.to_batch(), buf.tick_ms)
                with self._lock:
                    acks.issued.add(gen)
                    self._issued_at[gen] = time.monotonic()
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
                self._group.durable(gen)
                issued = self._issued_at.pop(gen, None)
                if issued is not None:
                    self._group.wrote(time.monotonic() - issued)
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

    # ---- the flusher thread ----------------------------------------------------------------
    def _wal_loop(self) -> None:
        interval = self._flush_interval.total_seconds()
        while not self._stop.is_set():
            self._wake.wait(interval)
            self._wake.clear()
            if self._stop.is_set():
                break
            self._gather()
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
