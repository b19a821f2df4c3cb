"""The pieces actors are made of: a writer without background threads, and stalled operations.

The simulation opens the real :class:`~slatedb_core.writer.db.Db` through its harness seam
(:func:`open_manual`, :class:`~slatedb_core.writer.hooks.WriterHooks`) with its three background
threads (WAL flusher, L0 flusher, manifest poller) left unstarted: the schedule runs ``flush``,
``flush_memtable`` and the writer's :func:`steps` as steps, so the seed, not the OS scheduler,
decides their order. Two behaviours are replaced, both in :class:`SimWalFlusher`, which uses
only the flusher's public methods. How a durable write waits: instead of waking the WAL flusher
thread and sleeping, it runs the same ``flush_wal`` in the caller's thread. And the WAL boundary
check (:class:`SimLease`): the lease's background read would race the WAL create for the
FaultyStore's seeded draws, so every create is checked by a read made after it. With
``max_parallel_writes`` > 1 its WAL window is a :class:`SimWindow`: creates in flight wait in a
queue and land one at a time in an order the seed decides, so later SSTs land before earlier
ones and a stalled create leaves a hole that other actors see.

A *stalled* operation runs in its own thread until it reaches a FaultyStore pause point, and
parks there while the main thread runs other steps; releasing it later lets it finish while the
main thread waits. At any moment exactly one thread makes progress, so a schedule replays.
"""

from __future__ import annotations

import random
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

from slatedb_core.meta.lease import LeasedBoundary
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.testing import FaultyStore, PausePoint, When
from slatedb_core.wal import WalWindow, WalWriter
from slatedb_core.wal.flusher import WalFlusher
from slatedb_core.wal.writer import WalDone
from slatedb_core.writer.db import Db
from slatedb_core.writer.hooks import WriterHooks, WriterSteps
from tests.sim.recorder import InvariantViolation

STALL_REACH_TIMEOUT_S = 20.0
"""An operation that neither parks nor finishes within this long is reported as a hang."""
RESUME_TIMEOUT_S = 30.0

_MAX_FLUSH_ROUNDS = 1000


class SimWindow(WalWindow):
    """A WAL window without threads: creates queue up and land when :meth:`run_one` is called,
    one at a time in a seeded order; a full window lands queued creates until there is room."""

    def __init__(self, writer: WalWriter, size: int, rng: random.Random) -> None:
        super().__init__(writer, size)
        self.rng = rng
        self.queue: list[tuple[int, bytes, WalDone]] = []

    def _start(self, wal_id: int, data: bytes, done: WalDone) -> None:
        self.queue.append((wal_id, data, done))

    def run_one(self) -> bool:
        """Attempt one queued create (seeded choice); False if it failed and was queued again."""
        wal_id, data, done = item = self.queue.pop(self.rng.randrange(len(self.queue)))
        if self._attempt(wal_id, data, done):
            return True
        if self.halted is not None:
            done(wal_id, self.halted)
            return True
        self.queue.append(item)  # retried later, at the same id
        return False

    def wait_for_room(self, timeout: float | None = None) -> bool:
        while not super().wait_for_room(0):
            if not self.queue:
                raise InvariantViolation("WAL window full with nothing in flight")
            self.run_one()
        return True

    def close(self, wait: bool = True) -> None:
        self.queue.clear()  # a crashed writer's creates in flight never land
        super().close(wait)


class SimLease(LeasedBoundary):
    """The WAL boundary check without the lease: no background read before a create, so every
    create is checked by a read made after it, in the thread that made it (SlateDB RFC 0026's
    plain check, which the lease only speeds up). The lease's read runs in a thread of its own
    and vouches by the wall clock (50 ms under pytest), so with it the order of store requests,
    and with them the seeded faults, depended on the OS scheduler (issue 41, item 2;
    tests/sim/test_schedule_threads.py). tests/meta/test_boundary_lease.py covers the lease."""

    def prepare(self) -> None:
        return  # no read in hand: check() reads after the create


class SimWalFlusher(WalFlusher):
    """A WAL flusher whose writes run in the caller's thread: a flush lands a :class:`SimWindow`'s
    queued creates itself, and a durable put flushes instead of waking the flusher thread and
    sleeping. It uses only :class:`WalFlusher`'s public methods."""

    def start(self, writer: WalWriter, window: int, last_wal_id: int, replayed: bool) -> None:
        writer.lease = SimLease(writer.boundary)
        super().start(writer, window, last_wal_id, replayed)

    def flush_wal(self) -> None:
        window = self.window
        if window is None:
            super().flush_wal()
            return
        assert isinstance(window, SimWindow)
        target = self.dispatch(None)
        for _ in range(_MAX_FLUSH_ROUNDS):
            with self.lock:
                if self.durable_gen >= target or self.error is not None:
                    break
            if not window.queue or not window.run_one():
                break  # a failed create fails this flush, as it does without parallel writes
        with self.lock:
            if self.durable_gen >= target:
                return
            if self.error is not None:
                raise self.error
            failure = self.failure_locked(0, target)
            if failure is not None:
                raise failure
        raise InvariantViolation(f"WAL flush to generation {target} neither landed nor failed")

    def await_durable(self, gen: int) -> None:
        for _ in range(_MAX_FLUSH_ROUNDS):
            with self.lock:
                if self.durable_gen >= gen:
                    return
                self.check_usable()
            self.flush_wal()
        raise InvariantViolation(f"{_MAX_FLUSH_ROUNDS} WAL flushes made generation {gen} no closer")


_STEPS: weakref.WeakKeyDictionary[Db, WriterSteps] = weakref.WeakKeyDictionary()


def open_manual(path: str, store: ObjectStore, options: DbOptions) -> Db:
    """Open the real ``Db`` through its harness seam (:class:`WriterHooks`): no background
    thread, a :class:`SimWalFlusher`, and with parallel writes a :class:`SimWindow` seeded by the
    writer's epoch. Its background work is run by :func:`steps`."""

    def window(writer: WalWriter, size: int) -> WalWindow:
        return SimWindow(writer, size, random.Random(f"{path}:{writer.epoch}"))

    hooks = WriterHooks(flusher=SimWalFlusher, window=window, background=False)
    db = Db.open(path, store, options, hooks=hooks)
    assert hooks.steps is not None
    _STEPS[db] = hooks.steps
    return db


def steps(db: Db) -> WriterSteps:
    """The background work of a writer :func:`open_manual` opened."""
    return _STEPS[db]


@dataclass
class Outcome:
    value: object = None
    error: BaseException | None = None


@dataclass
class Stalled:
    """An operation parked at a pause point; :meth:`resume` lets it finish."""

    label: str
    point: PausePoint
    thread: threading.Thread
    box: list[Outcome]
    on_done: Callable[[Outcome], None]
    started_issue: int = 0
    extra: dict[str, object] = field(default_factory=dict)

    def resume(self) -> Outcome:
        self.point.release()
        self.thread.join(RESUME_TIMEOUT_S)
        if self.thread.is_alive():
            raise InvariantViolation(
                f"{self.label}: still running {RESUME_TIMEOUT_S}s after resume"
            )
        outcome = self.box[0]
        self.on_done(outcome)
        return outcome

    def run_to(self, faulty: FaultyStore, name: str, op: str, glob: str, when: When) -> bool:
        """Let the operation run on to a second pause point (e.g. from its SST upload to its
        manifest create, then to its boundary check). True if it parked there, and this object
        now waits at it; False if it finished (call :meth:`resume` for its outcome)."""
        point = faulty.pause(name, op, glob, when=when)
        self.point.release()
        deadline = time.monotonic() + STALL_REACH_TIMEOUT_S
        while self.thread.is_alive() and not point.wait_reached(0.001):
            if time.monotonic() > deadline:
                point.release()
                raise InvariantViolation(f"{self.label}: neither paused nor finished (hang?)")
        if point.reached:
            self.point = point
            return True
        point.release()
        return False


def run_stalled(
    faulty: FaultyStore,
    name: str,
    op: str,
    glob: str,
    when: When,
    fn: Callable[[], object],
) -> tuple[PausePoint, threading.Thread, list[Outcome]] | Outcome:
    """Start ``fn`` in a thread with a pause point armed; returns the parked thread, or the
    outcome when ``fn`` finished without reaching the point (which is then disarmed)."""
    point = faulty.pause(name, op, glob, when=when)
    box: list[Outcome] = []

    def body() -> None:
        try:
            box.append(Outcome(value=fn()))
        except BaseException as e:  # handed to the main thread, which judges it
            box.append(Outcome(error=e))

    thread = threading.Thread(target=body, name=f"sim-{name}", daemon=True)
    thread.start()
    deadline = time.monotonic() + STALL_REACH_TIMEOUT_S
    while thread.is_alive() and not point.wait_reached(0.001):
        if time.monotonic() > deadline:
            point.release()
            raise InvariantViolation(f"{name}: neither paused nor finished in time (hang?)")
    if point.reached:
        return point, thread, box
    point.release()
    thread.join(RESUME_TIMEOUT_S)
    return box[0]
