"""A writer stalled on a full L0 after its embedded compactor was fenced by another compactor.

From review54 (session 54) of c63afbd ("writer: fail a write stall behind a compactor that keeps
failing"). :meth:`Compactor.stuck` promises None "after a fence (another compactor works)", but
a fenced compactor's loop returns on ``Fenced`` and leaves ``last_error``/``failed_passes`` as its
earlier failing passes set them. A writer whose embedded compactor failed a few passes (a store
breaking its contract for a while), then was taken over by an operator's ``slatedb compact``
(which works), was failed with the old error the next time its L0 filled, instead of waiting for
the compactor that now owns the database (docs/operations.md, "Write stalls")."""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import pytest

from slatedb_core.compactor.compactor import STUCK_AFTER, Compactor, run_compaction_once
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions, DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultyStore
from slatedb_core.writer.db import Db
from tests.writer.thread_steps import start_recorded

T = TypeVar("T")
FAST = timedelta(milliseconds=20)


class Breaking(FaultyStore):
    """Raises RuntimeError (a store breaking its contract: not an outage) for armed ops."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.armed: list[tuple[str, str]] = []

    def _run(self, op: str, path: str, call: Callable[[], T]) -> T:
        for o, glob in list(self.armed):
            if o == op and fnmatch.fnmatchcase(path, glob):
                raise RuntimeError(f"unexpected failure of {op} {path}")
        return super()._run(op, path, call)


@pytest.fixture
def inner(tmp_path: Path) -> ObjectStore:
    return open_store(f"file://{tmp_path}/lake")


def wait_for(cond: Callable[[], bool], seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def l0_count(store: ObjectStore) -> int:
    return len(ManifestStore(store, "db").read_latest().manifest.l0)


def test_a_fenced_compactor_is_not_stuck(inner: ObjectStore) -> None:
    """Passes failed on a bug, then another compactor took over: nothing of ours is stuck."""
    store = Breaking(inner)
    with Db.open("db", inner, DbOptions(manifest_poll_interval=timedelta(hours=1))) as db:
        for i in range(2):
            db.put(b"k%d" % i, b"v")
            db.flush_memtable()
    store.armed.append(("get", "db/compacted/*"))
    ours = Compactor("db", store, CompactorOptions(poll_interval=FAST, l0_trigger=2)).start()
    try:
        wait_for(lambda: ours.failed_passes >= STUCK_AFTER)
        assert ours.stuck() is not None
        # an operator's compactor takes over (fencing ours) and compacts L0
        assert run_compaction_once("db", inner, CompactorOptions(l0_trigger=2)) is not None
        wait_for(lambda: not ours.running)
        assert ours.fenced is not None
        assert ours.stuck() is None, "a fenced compactor named its old error as stuck"
    finally:
        ours.stop()


def test_a_writer_whose_compactor_was_fenced_waits_for_the_new_one(inner: ObjectStore) -> None:
    """The writer's embedded compactor fails a few passes on a bug, an operator's compactor
    takes over and works; when L0 fills later, the writer's flush waits for that compactor
    (and goes on once it ran) rather than failing with the fenced compactor's old error."""
    store = Breaking(inner)
    opts = DbOptions(
        flush_interval=FAST,
        manifest_poll_interval=FAST,
        l0_max_ssts=4,
        compactor=CompactorOptions(poll_interval=FAST, l0_trigger=2),
    )
    db = Db.open("db", store, opts)
    closed = False
    try:
        store.armed.append(("get", "db/compacted/*"))  # the embedded compactor's sources
        for i in range(2):
            db.put(b"a%d" % i, b"v")
            db.flush_memtable()
        compactor = db._engine._compactor
        assert compactor is not None
        wait_for(lambda: compactor.failed_passes >= STUCK_AFTER)
        store.armed.clear()  # the store mends; an operator runs a compactor of their own
        assert run_compaction_once("db", inner, CompactorOptions(l0_trigger=2)) is not None
        wait_for(lambda: not compactor.running)
        for i in range(4):  # L0 full again, with no compactor running now
            db.put(b"b%d" % i, b"v")
            db.flush_memtable()
        assert l0_count(inner) == 4

        def flush() -> None:
            db.put(b"c", b"v")
            db.flush_memtable()

        t, box = start_recorded(flush)
        t.join(1.0)
        assert not box or box[0] is None, f"the writer failed: {box[0]!r}"
        assert t.is_alive(), "the flush did not wait for L0 room"
        assert run_compaction_once("db", inner, CompactorOptions(l0_trigger=2)) is not None
        t.join(20)
        assert box == [None]
        assert db.get(b"c") == b"v" and db.get(b"a1") == b"v" and db.get(b"b3") == b"v"
        db.close()
        closed = True
    finally:
        if not closed:
            db._simulate_crash()
