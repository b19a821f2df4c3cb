"""Learning an operation's store calls by running it once, and running it again to crash it.

``record(name)`` runs the scenario's operation to completion on a recording store: its list of
calls is the list of crash points (each call twice: before and after). ``crash(name, point,
store)`` restores the scenario's setup into ``store``, runs the process with the crash armed, and
returns what the recovery needs.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass

from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from tests.crash.process import Outcome, Process, run_process
from tests.crash.scenarios import SCENARIOS, Scenario, State
from tests.crash.store import Call, CrashPoint, CrashStore, Side

SIDES: tuple[Side, ...] = ("before", "after")

_setup_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class Setup:
    objects: tuple[tuple[str, bytes], ...]
    state: State


@functools.cache
def _setup(name: str) -> Setup:
    """The scenario's setup, built once on a memory store; restored by copying its objects."""
    with _setup_lock:
        store = open_store("memory://")
        state = SCENARIOS[name].setup(store)
        objects = tuple((m.path, store.get(m.path).data) for m in store.list(""))
        return Setup(objects, state)


def restore(name: str, store: ObjectStore) -> State:
    """Copy the scenario's setup into the (empty) ``store``; a fresh copy of its state."""
    setup = _setup(name)
    for path, data in setup.objects:
        store.put(path, data)
    return setup.state.copy()


def _body(scenario: Scenario, state: State) -> functools.partial[None]:
    def body(proc: Process) -> None:
        if scenario.prepare is not None:
            scenario.prepare(proc, state)
        proc.store.arm()
        scenario.operation(proc, state)
        proc.store.disarm()

    return functools.partial(body)


@functools.cache
def record(name: str) -> tuple[Call, ...]:
    """The store calls of the scenario's operation, in order (on a memory store)."""
    scenario = SCENARIOS[name]
    store = open_store("memory://")
    state = restore(name, store)
    recorder = CrashStore(store, scenario.roots)
    outcome = run_process(recorder, _body(scenario, state))
    if outcome.error is not None:
        raise AssertionError(f"{name}: the operation failed without a crash") from outcome.error
    return tuple(recorder.calls)


@dataclass(frozen=True, slots=True)
class Point:
    scenario: str
    call: Call
    side: Side

    @property
    def crash_point(self) -> CrashPoint:
        return CrashPoint(self.call.op, self.call.kind, self.call.ordinal, self.side)

    @property
    def id(self) -> str:
        c = self.call
        if not SCENARIOS[self.scenario].ordered:  # its calls' order varies: name by ordinal
            return f"{self.scenario}-{self.side}-{c.op}-{c.kind}-{c.ordinal:02d}"
        return f"{self.scenario}-{self.side}-{c.index:02d}-{c.op}-{c.kind}"


def points(name: str) -> list[Point]:
    return point_list(name, record(name))


def point_list(name: str, calls: tuple[Call, ...]) -> list[Point]:
    """The crash points of ``calls``; an unordered scenario's in a canonical order, so that every
    process (each pytest-xdist worker collects the suite) lists the same test ids in one order.
    A crash point is found by its (op, kind, ordinal), never by its index (tests/crash/store.py)."""
    if not SCENARIOS[name].ordered:
        calls = tuple(sorted(calls, key=lambda c: (c.op, c.kind, c.ordinal)))
    return [Point(name, call, side) for call in calls for side in SIDES]


def all_points() -> list[Point]:
    return [p for name in SCENARIOS for p in points(name)]


@dataclass
class Crashed:
    state: State
    store: CrashStore
    outcome: Outcome


def crash(point: Point, store: ObjectStore) -> Crashed:
    """Restore the setup into ``store`` and run the operation, killed at ``point``."""
    scenario = SCENARIOS[point.scenario]
    state = restore(point.scenario, store)
    crashing = CrashStore(store, scenario.roots, point.crash_point)
    outcome = run_process(crashing, _body(scenario, state))
    return Crashed(state, crashing, outcome)
