"""Running one operation as a "process" that may be killed, and burying it when it is.

The operation runs in its own thread so that the harness can act as the kernel: when the store
reports the death (from whichever thread made the fatal call), every writer the process opened is
stopped the way a killed process stops (``Db._simulate_crash``: no flush, threads joined), and the
operation's thread is joined. A process that is still running threads afterwards, or a store call
that reaches the store after the death, fails the test.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from slatedb_core.options import DbOptions
from slatedb_core.writer.db import Db
from slatedb_core.writer.hooks import WriterHooks, WriterSteps
from tests.crash.store import CrashStore, ProcessKilled

PROCESS_TIMEOUT_S = 60.0


@dataclass
class Process:
    """What an operation may use: the store it talks through and a registry of what it opened."""

    store: CrashStore
    dbs: list[Db] = field(default_factory=list)
    steps: list[WriterSteps] = field(default_factory=list)
    """``steps[i]``: the harness seam of ``dbs[i]`` (its WAL flusher, its state)."""

    def open_db(self, path: str, options: DbOptions) -> Db:
        hooks = WriterHooks()  # a normal writer; its steps are kept to inspect it
        db = Db.open(path, self.store, options, hooks=hooks)
        assert hooks.steps is not None
        self.dbs.append(db)
        self.steps.append(hooks.steps)
        return db

    def kill(self) -> None:
        for db in self.dbs:
            db._simulate_crash()


@dataclass
class Outcome:
    died: bool
    error: BaseException | None
    thread_errors: list[BaseException]


def _alive_threads_of(dbs: list[Db]) -> list[threading.Thread]:
    """Threads of these databases: ``slatedb-<role>-<path>`` and the WAL window's pool threads
    ``slatedb-wal-<path>_<n>``."""
    names = {f"-{db.path}" for db in dbs}
    return [
        t
        for t in threading.enumerate()
        if t.name.startswith("slatedb-")
        and any(t.name.endswith(n) or t.name.rpartition("_")[0].endswith(n) for n in names)
        and t.is_alive()
    ]


def _reap(dbs: list[Db], timeout_s: float = 30.0) -> None:
    """Wait for the dead process's threads to end, as the kernel ends them: a WAL create that was
    in flight at the death finishes its call (the store refuses everything after it) and its
    pool thread exits, before anything else (recovery) runs."""
    deadline = time.monotonic() + timeout_s
    for t in _alive_threads_of(dbs):
        t.join(max(0.0, deadline - time.monotonic()))


def run_process(store: CrashStore, body: Callable[[Process], None]) -> Outcome:
    """Run ``body`` as a process on ``store``; kill it if the store says it died.

    Exceptions from the body are returned, not raised: after a death, whatever the operation
    raised on its way out is expected (ProcessKilled, or DbClosed from a waiting put).
    """
    proc = Process(store)
    result: list[BaseException | None] = [None]
    thread_errors: list[BaseException] = []

    def main() -> None:
        try:
            body(proc)
        except BaseException as e:
            result[0] = e

    previous_hook = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        # Background threads of a killed process die of ProcessKilled; that is the point.
        if args.exc_value is not None and isinstance(args.exc_value, ProcessKilled):
            thread_errors.append(args.exc_value)
            return
        previous_hook(args)

    threading.excepthook = hook
    try:
        worker = threading.Thread(target=main, name="crash-process", daemon=True)
        worker.start()
        deadline = time.monotonic() + PROCESS_TIMEOUT_S
        while worker.is_alive() and time.monotonic() < deadline:
            if store.died.wait(0.01):
                proc.kill()
                break
            worker.join(0.0)
        worker.join(max(0.0, deadline - time.monotonic()))
        if worker.is_alive():
            raise AssertionError(f"the process did not finish within {PROCESS_TIMEOUT_S}s")
        if store.died.is_set():
            proc.kill()  # a death in the last call of the body: still bury what it opened
        else:
            for db in proc.dbs:  # a finished process exits cleanly
                db._simulate_crash()
        _reap(proc.dbs)
        alive = _alive_threads_of(proc.dbs)
        if alive:
            raise AssertionError(f"threads of the dead process still run: {alive}")
    finally:
        threading.excepthook = previous_hook
    return Outcome(store.died.is_set(), result[0], thread_errors)
