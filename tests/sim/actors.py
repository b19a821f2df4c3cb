"""The pieces actors are made of: a writer without background threads, and stalled operations.

``SimDb`` is the real :class:`~slatedb_core.db.Db` with its three background threads (WAL
flusher, L0 flusher, manifest poller) left unstarted: the schedule runs ``flush``,
``flush_memtable`` and ``_refresh`` as steps, so the seed, not the OS scheduler, decides their
order. The only behaviour replaced is how a durable write waits: instead of waking the WAL
flusher thread and sleeping, it runs the same ``_flush_wal`` in the caller's thread.

A *stalled* operation runs in its own thread until it reaches a FaultyStore pause point, and
parks there while the main thread runs other steps; releasing it later lets it finish while the
main thread waits. At any moment exactly one thread makes progress, so a schedule replays.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from slatedb_core.db import Db
from slatedb_core.options import DbOptions
from slatedb_core.store.faults import FaultyStore, PausePoint, When
from slatedb_core.store.objectstore import ObjectStore
from tests.sim.recorder import InvariantViolation

STALL_REACH_TIMEOUT_S = 20.0
"""An operation that neither parks nor finishes within this long is reported as a hang."""
RESUME_TIMEOUT_S = 30.0

_MAX_FLUSH_ROUNDS = 1000


class SimDb(Db):
    """A Db whose background work runs only when the schedule says so."""

    @classmethod
    def open_manual(cls, path: str, store: ObjectStore, options: DbOptions) -> SimDb:
        db = cls(path, store, options)
        db._recover()
        return db

    def _await_durable(self, gen: int) -> None:
        for _ in range(_MAX_FLUSH_ROUNDS):
            with self._lock:
                if self._durable_gen >= gen:
                    return
                self._check_usable()
            self._flush_wal()
        raise InvariantViolation(f"{_MAX_FLUSH_ROUNDS} WAL flushes made generation {gen} no closer")


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
            raise InvariantViolation(f"{self.label}: still running {RESUME_TIMEOUT_S}s after resume")
        outcome = self.box[0]
        self.on_done(outcome)
        return outcome


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
