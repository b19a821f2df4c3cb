"""A writer's background thread that dies (a store breaking its contract, or a bug) fails the writer
with a typed error: every waiter and every later call raises it, none hangs."""

from __future__ import annotations

import fnmatch
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import pytest

from slatedb_core.errors import BackgroundThreadDied, InjectedFault
from slatedb_core.options import CompactorOptions, DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultyStore
from slatedb_core.writer.db import Db
from tests.writer.thread_steps import start_recorded

T = TypeVar("T")


# the background WAL flusher never runs on its own: every WAL SST is a durable put's
QUIET = timedelta(hours=1)


@pytest.fixture
def store(tmp_path: Path) -> ObjectStore:
    """The local filesystem, where the review reproduced these."""
    return open_store(f"file://{tmp_path}/lake")


def opts(window: int = 1, **kw: object) -> DbOptions:
    return DbOptions(flush_interval=QUIET, max_parallel_writes=window, **kw)  # type: ignore[arg-type]


# ---- item 15: a background thread that dies fails its waiters --------------------------------
class BreakingStore(FaultyStore):
    """Raises RuntimeError (not a StoreError: a store breaking its contract, or a bug) for the
    operations and paths armed with :meth:`arm`."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.armed: list[tuple[str, str]] = []

    def arm(self, op: str, glob: str) -> None:
        self.armed.append((op, glob))

    def _run(self, op: str, path: str, call: Callable[[], T]) -> T:
        for o, glob in self.armed:
            if o == op and fnmatch.fnmatchcase(path, glob):
                raise RuntimeError(f"unexpected failure of {op} {path}")
        return super()._run(op, path, call)


def within(seconds: float, call: Callable[[], object]) -> BaseException | None:
    """Run ``call`` in a thread; the error it raised (None if it returned). Fails the test if it
    is still running after ``seconds`` (the old code hung here forever)."""
    t, box = start_recorded(call)
    t.join(seconds)
    assert not t.is_alive(), f"still waiting after {seconds} s: a waiter hangs"
    return box[0]


def assert_failed(db: Db, err: BaseException | None, thread: str) -> None:
    """``err`` is the typed error of the dead thread; every later call raises it too."""
    assert isinstance(err, BackgroundThreadDied), repr(err)
    assert thread in err.thread and isinstance(err.__cause__, RuntimeError)
    calls: list[Callable[[], object]] = [
        lambda: db.put(b"later", b"v", await_durable=False),
        db.flush,
        lambda: db.put(b"later", b"v"),
    ]
    for call in calls:
        with pytest.raises(BackgroundThreadDied):
            call()
    with pytest.raises(BackgroundThreadDied) as closing:
        db.close()
    assert closing.value is err
    with pytest.raises(BackgroundThreadDied):
        db.close()


@pytest.fixture
def breaking(store: ObjectStore) -> BreakingStore:
    return BreakingStore(store)


def test_a_dead_wal_flusher_fails_the_durable_put_waiting_for_it(
    breaking: BreakingStore,
) -> None:
    """Found by the review of RELIABILITY.md, findings 7, 8, 15 (was test_review_wal_writer.py)."""
    db = Db.open("db", breaking, DbOptions(flush_interval=timedelta(milliseconds=20)))
    try:
        breaking.arm("put_if_absent", "db/wal/*")
        err = within(10, lambda: db.put(b"k", b"v"))
        assert_failed(db, err, "wal-flusher")
    finally:
        db._simulate_crash()  # the old code: release the thread stuck in put


def test_a_dead_parallel_wal_create_fails_its_waiter_with_a_typed_error(
    breaking: BreakingStore,
) -> None:
    """max_parallel_writes 4: the create runs in the window's pool; the old code failed the
    waiter with the raw RuntimeError.

    Found by the review of RELIABILITY.md, findings 7, 8, 15 (was test_review_wal_writer.py)."""
    db = Db.open("db", breaking, opts(window=4))
    try:
        breaking.arm("put_if_absent", "db/wal/*")
        err = within(10, lambda: db.put(b"k", b"v"))
        assert_failed(db, err, "WAL create")
    finally:
        db._simulate_crash()


def test_a_dead_memtable_flusher_fails_the_writer_held_back_by_it(
    breaking: BreakingStore,
) -> None:
    """Frozen memtables past max_unflushed_bytes hold writers back until the L0 flusher has
    written them: a dead flusher must release them with its error.

    Found by the review of RELIABILITY.md, findings 7, 8, 15 (was test_review_wal_writer.py)."""
    options = DbOptions(
        flush_interval=timedelta(milliseconds=20),
        l0_sst_size_bytes=4096,
        max_unflushed_bytes=4096,
    )
    db = Db.open("db", breaking, options)
    try:
        breaking.arm("put_if_absent", "db/compacted/*")
        breaking.arm("put", "db/compacted/*")

        def fill() -> None:
            for i in range(1000):
                db.put(b"k%04d" % i, b"x" * 512, await_durable=False)

        err = within(10, fill)
        assert_failed(db, err, "l0-flusher")
    finally:
        db._simulate_crash()


def test_a_dead_manifest_poller_fails_the_writer(breaking: BreakingStore) -> None:
    """Found by the review of RELIABILITY.md, findings 7, 8, 15 (was test_review_wal_writer.py)."""
    db = Db.open("db", breaking, DbOptions(manifest_poll_interval=timedelta(milliseconds=20)))
    try:
        breaking.arm("list", "db/manifest*")
        breaking.arm("get", "db/manifest/*")

        def until_failed() -> None:
            deadline = time.monotonic() + 9
            while time.monotonic() < deadline:
                db.put(b"k", b"v")
                time.sleep(0.02)

        err = within(10, until_failed)
        assert_failed(db, err, "manifest-poller")
    finally:
        db._simulate_crash()


# ---- the embedded compactor: a writer stalled on a full L0 does not wait on a broken one ------
def stalling_options(**kw: object) -> DbOptions:
    """A writer whose L0 fills after two flushes and whose embedded compactor polls often."""
    return DbOptions(
        flush_interval=timedelta(milliseconds=20),
        l0_sst_size_bytes=4096,
        max_unflushed_bytes=4096,
        l0_max_ssts=2,
        manifest_poll_interval=timedelta(milliseconds=20),
        compactor=CompactorOptions(poll_interval=timedelta(milliseconds=20), l0_trigger=2),
        **kw,  # type: ignore[arg-type]
    )


def fill(db: Db, n: int = 2000) -> None:
    for i in range(n):
        db.put(b"k%05d" % i, b"x" * 512, await_durable=False)


def test_a_compactor_failing_every_pass_fails_the_writer_stalled_on_it(
    breaking: BreakingStore,
) -> None:
    """L0 full (``l0_max_ssts``) and the embedded compactor failing on a bug every pass: the
    writer held back by backpressure is failed with the compactor's error, not left waiting
    forever behind a warning.

    Found in session 53 (noticed: "an embedded compactor failing every pass stalls ingest
    silently")."""
    db = Db.open("db", breaking, stalling_options())
    try:
        breaking.arm("get", "db/compacted/*")  # the compactor reads its sources: a bug
        err = within(20, lambda: fill(db))
        assert isinstance(err, BackgroundThreadDied), repr(err)
        assert "compactor" in err.thread and isinstance(err.__cause__, RuntimeError)
        with pytest.raises(BackgroundThreadDied):
            db.put(b"later", b"v", await_durable=False)
    finally:
        db._simulate_crash()


def test_a_store_outage_under_the_compactor_stalls_the_writer_until_it_ends(
    breaking: BreakingStore,
) -> None:
    """A store error is an outage the compactor retries: the stalled writer waits, and goes on
    once compactions succeed again; nothing it acknowledged is lost."""
    store = Outage(breaking.inner)
    db = Db.open("db", store, stalling_options())
    closed = False
    try:
        store.arm("get", "db/compacted/*")
        done = threading.Event()

        def fill_then_say() -> None:
            fill(db, 400)
            done.set()

        filler = threading.Thread(target=fill_then_say, daemon=True)
        filler.start()
        time.sleep(1.5)
        assert not done.is_set(), "the writer did not stall on the full L0"
        store.armed.clear()
        filler.join(30)
        assert done.is_set(), "the writer did not go on once the outage ended"
        db.flush()
        for i in range(0, 400, 37):
            assert db.get(b"k%05d" % i) == b"x" * 512
        db.close()
        closed = True
    finally:
        if not closed:
            db._simulate_crash()


class Outage(BreakingStore):
    """Raises InjectedFault (a StoreError: an outage) for the armed operations and paths."""

    def _run(self, op: str, path: str, call: Callable[[], T]) -> T:
        for o, glob in self.armed:
            if o == op and fnmatch.fnmatchcase(path, glob):
                raise InjectedFault(f"outage: {op} {path}")
        return FaultyStore._run(self, op, path, call)
