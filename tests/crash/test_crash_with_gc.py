"""A crash inside the window a concurrent GC pass relies on the writer to close.

``slatedb_core.meta.compacted_boundary`` makes GC with min_age 0 safe for a writer's new L0 SST X
by a check the writer makes *after* committing the manifest that references X: if a GC pass has
moved the compacted boundary over X meanwhile, the writer re-homes X under a fresh id. The check
is the only thing that closes the race, and it runs in the writer's process: a writer killed
between its manifest commit and the check leaves a manifest that references an SST the GC pass
deletes. This test found that the same commit advanced ``replay_after_wal_id`` past the memtable's
WAL SSTs, so the acknowledged writes that only X held were not replayed either and the database
failed to read. Fixed in ``WriterEngine``: a flush moves the replay point past its WAL SSTs only in
a later commit, after the check, and a writer opening drops (or re-homes) L0 SSTs behind the
boundary that an earlier writer never checked.
"""

from __future__ import annotations

import threading
import time

from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultyStore
from tests.crash.process import Outcome, Process, run_process
from tests.crash.scenarios import OPTS, base_db, content, gc, key, write
from tests.crash.store import CrashPoint, CrashStore


def test_writer_killed_after_l0_commit_while_gc_ran_keeps_acknowledged_writes() -> None:
    inner = open_store("memory://")
    model = base_db(inner)
    faulty = FaultyStore(inner, pause_timeout_s=20)
    store = CrashStore(faulty, {"db": ""}, CrashPoint("put_if_absent", "manifest", 0, "after"))
    paused = threading.Event()
    outcome: list[Outcome] = []

    def body(proc: Process) -> None:
        db = proc.open_db("db", OPTS)
        write(db, model, {key(60): b"acknowledged"})
        faulty.pause("l0-commit", "put_if_absent", "db/manifest/*")
        paused.set()
        proc.store.arm()
        db.flush_memtable()  # uploads X, then commits a manifest naming X and dies

    worker = threading.Thread(target=lambda: outcome.append(run_process(store, body)))
    worker.start()
    assert paused.wait(20)
    deadline = time.monotonic() + 20
    while not any(kind.startswith("pause_before") for kind, _, _ in faulty.events):
        assert time.monotonic() < deadline, "the writer never reached its manifest commit"
        time.sleep(0.01)
    gc(inner, "db")  # lists X before the commit, reads the manifest without it: X is garbage
    faulty.release_all()
    worker.join(30)
    assert outcome and outcome[0].died
    model.settle(content(inner, "db"), "after the writer died and the GC pass finished")
