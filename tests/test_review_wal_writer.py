"""RELIABILITY.md review findings 7, 8 and 15 (the writer's half): WAL holes at open, close() of
a fenced writer, and background threads that die.

* 7: a WAL SST missing below the in-flight window of the last writer (SlateDB RFC 0001 "Parallel
  Writes") is damage: ``Db.open`` raises ``WalSstMissing`` naming it, instead of fencing into the
  hole and dropping every later (acknowledged) WAL SST.
* 8: ``close()`` of a fenced writer raises ``Fenced`` whether or not it had learned of the fencing.
* 15: a background thread that dies fails every waiter with ``BackgroundThreadDied``.
"""

from __future__ import annotations

import fnmatch
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import pytest

from slatedb_core.errors import BackgroundThreadDied, CorruptionError, Fenced, WalSstMissing
from slatedb_core.gc import run_gc_once
from slatedb_core.keys import KeyRange
from slatedb_core.lifecycle.clone import create_clone
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CheckpointScope, DbOptions, GarbageCollectorOptions
from slatedb_core.store.faults import FaultyStore
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.wal import WalLog, damaged_holes
from slatedb_core.writer.db import Db

T = TypeVar("T")

# the background WAL flusher never runs on its own: every WAL SST is a durable put's
QUIET = timedelta(hours=1)


@pytest.fixture
def store(tmp_path: Path) -> ObjectStore:
    """The local filesystem, where the review reproduced these."""
    return open_store(f"file://{tmp_path}/lake")


def opts(window: int = 1, **kw: object) -> DbOptions:
    return DbOptions(flush_interval=QUIET, max_parallel_writes=window, **kw)  # type: ignore[arg-type]


def keys(n: int) -> list[bytes]:
    return [b"k%02d" % i for i in range(n)]


def write_old_then_new(store: ObjectStore, window: int = 1) -> list[int]:
    """10 keys written "old" then "new", one durable put (one WAL SST) each, never flushed to
    L0; the writer then dies. Returns the WAL ids."""
    db = Db.open("db", store, opts(window))
    for value in (b"old", b"new"):
        for k in keys(10):
            db.put(k, value)
    db._simulate_crash()
    return WalLog(store, "db").list_ids()


def values(db: Db) -> list[bytes | None]:
    return [db.get(k) for k in keys(10)]


# ---- item 7: holes in the WAL at open -------------------------------------------------------
def test_open_refuses_a_hole_below_the_window_instead_of_dropping_later_wal_ssts(
    store: ObjectStore,
) -> None:
    """The review's case: max_parallel_writes 1, WAL SST 13 (the put of k01=new) gone. The old
    code fenced into id 13 and replayed nothing after it: 8 acknowledged, stored writes came
    back "old"."""
    ids = write_old_then_new(store)
    assert ids == list(range(1, 22))  # 1: the fence, 2..11: old, 12..21: new
    wal = WalLog(store, "db")
    saved = store.get(wal.path(13)).data
    store.delete(wal.path(13))
    with pytest.raises(WalSstMissing) as ei:
        Db.open("db", store, opts())
    err = ei.value
    assert isinstance(err, CorruptionError)
    assert err.wal_ids == [13] and err.holes == ((13, 13),)
    assert wal.path(13) in str(err)
    assert wal.list_ids() == [i for i in range(1, 22) if i != 13]  # nothing fenced into it
    # restoring the object repairs the database: every acknowledged write is back
    store.put(wal.path(13), saved)
    with Db.open("db", store, opts()) as db:
        assert values(db) == [b"new"] * 10


def test_every_missing_id_is_named(store: ObjectStore) -> None:
    write_old_then_new(store)
    wal = WalLog(store, "db")
    for wal_id in (3, 4, 5, 9):
        store.delete(wal.path(wal_id))
    with pytest.raises(WalSstMissing) as ei:
        Db.open("db", store, opts())
    assert ei.value.holes == ((3, 5), (9, 9))
    assert ei.value.wal_ids == [3, 4, 5, 9]


def test_a_hole_within_the_last_writers_window_is_filled_by_the_fence(
    store: ObjectStore,
) -> None:
    """max_parallel_writes 4: id top-1 (in flight when the writer died, SlateDB RFC 0001) is legal;
    the next writer fences it and replays the SST after it (acknowledged ahead of it)."""
    ids = write_old_then_new(store, window=4)
    top = ids[-1]
    wal = WalLog(store, "db")
    lost = wal.read(top - 3).entries.column("key")[0].as_py()
    store.delete(wal.path(top - 3))  # its put was in flight, never acknowledged
    with Db.open("db", store, opts(window=4)) as db:
        got = values(db)
    assert got == [b"old" if k == lost else b"new" for k in keys(10)]
    assert wal.read(top - 3).is_fence


def test_a_hole_just_below_the_window_is_damage(store: ObjectStore) -> None:
    ids = write_old_then_new(store, window=4)
    top = ids[-1]
    store.delete(WalLog(store, "db").path(top - 4))
    with pytest.raises(WalSstMissing) as ei:
        Db.open("db", store, opts(window=4))
    assert ei.value.wal_ids == [top - 4]


def test_wal_ssts_collected_behind_the_replay_point_are_not_holes(store: ObjectStore) -> None:
    """GC deletes WAL SSTs below every manifest's replay_after_wal_id (behind gc/wal.boundary):
    the next open starts after them."""
    with Db.open("db", store, opts()) as db:
        for k in keys(10):
            db.put(k, b"old")
        db.flush_memtable()
        for k in keys(5):
            db.put(k, b"new")
    wal = WalLog(store, "db")
    before = wal.list_ids()
    stats = run_gc_once("db", store, GarbageCollectorOptions(min_age=timedelta(0)))
    assert stats.wal.deleted > 0
    assert wal.list_ids()[0] > before[0]
    with Db.open("db", store, opts()) as db:
        assert values(db) == [b"new"] * 5 + [b"old"] * 5


def test_a_projected_clone_reopens_over_the_wal_it_did_not_copy(store: ObjectStore) -> None:
    """A clone copies its parent's WAL only up to the last SST with data for it but keeps the
    parent's next_wal_sst_id: the ids in between never existed in the clone. Not damage."""
    db = Db.open("parent", store, opts(l0_sst_size_bytes=4096))
    db.put(b"z1", b"v")
    db.put(b"z2", b"x" * 8192)  # freezes the memtable: the L0 flusher commits it
    deadline = time.monotonic() + 10
    while not db.manifest.manifest.l0 and time.monotonic() < deadline:
        time.sleep(0.01)
    db.close()
    parent = ManifestStore(store, "parent").read_latest().manifest
    assert parent.next_wal_sst_id > parent.replay_after_wal_id + 1  # a flush not yet confirmed
    create_clone("clone", "parent", store, projection=KeyRange(b"a", b"m"))
    for value in (b"1", b"2", b"3"):
        with Db.open("clone", store, opts()) as clone:
            assert clone.get(b"b") == (None if value == b"1" else bytes([value[0] - 1]))
            clone.put(b"b", value)
    with Db.open("clone", store, opts()) as clone:
        assert clone.get(b"b") == b"3"


@pytest.mark.parametrize(
    ("existing", "replay_after", "next_id", "window", "last_seen", "holes"),
    [
        ([], 0, 1, 1, 0, []),
        ([1, 2, 3], 0, 1, 1, 0, []),
        ([1, 2, 4], 0, 1, 1, 0, [(3, 3)]),  # below the top: damage with a window of 1
        ([1, 2, 4], 0, 1, 2, 0, []),  # SlateDB RFC 0001's example: 3 in flight, 4 acknowledged
        ([1, 2, 5, 6], 0, 1, 2, 0, [(3, 4)]),
        ([1, 2, 5, 6], 0, 1, 4, 0, []),
        ([6, 7], 5, 1, 1, 0, []),  # ids <= replay_after: collected by GC
        ([7, 8], 5, 1, 1, 0, [(6, 6)]),
        ([1, 3, 9], 0, 5, 8, 0, [(2, 2), (4, 4)]),  # below next_wal_sst_id
        ([1, 9], 0, 5, 8, 0, [(2, 4)]),  # a tail below next_wal_sst_id not after a clone's copy
        ([1, 9], 0, 5, 8, 1, []),  # ... after it: the ids the clone did not copy
        ([1, 2, 9, 10], 0, 5, 1, 2, [(5, 8)]),
        ([1, 2, 9, 10], 0, 5, 1, 0, [(3, 8)]),
    ],
)
def test_damaged_holes(
    existing: list[int],
    replay_after: int,
    next_id: int,
    window: int,
    last_seen: int,
    holes: list[tuple[int, int]],
) -> None:
    assert damaged_holes(existing, replay_after, next_id, window, last_seen) == holes


# ---- item 8: close() of a fenced writer -----------------------------------------------------
def quiet_writer(store: ObjectStore, poll: timedelta = QUIET) -> Db:
    """A writer whose background threads do nothing by themselves."""
    return Db.open("db", store, DbOptions(flush_interval=QUIET, manifest_poll_interval=poll))


def test_close_of_a_fenced_writer_that_had_not_learned_it_raises_fenced_every_time(
    store: ObjectStore,
) -> None:
    old = quiet_writer(store)
    old.put(b"k", b"buffered", await_durable=False)
    Db.open("db", store, opts()).close()  # fences old
    with pytest.raises(Fenced) as first:
        old.close()  # its flush finds the fence: the buffered write is not durable
    with pytest.raises(Fenced) as second:
        old.close()  # the outcome of closing does not change
    assert second.value is first.value
    with Db.open("db", store, opts()) as db:
        assert db.get(b"k") is None


def test_close_of_a_fenced_writer_that_learned_it_from_a_commit_raises_fenced(
    store: ObjectStore,
) -> None:
    """The review's case: the writer learned of the fencing (here from a checkpoint commit)
    with a write still buffered; the old close() returned normally and dropped it."""
    old = quiet_writer(store)
    old.put(b"k", b"buffered", await_durable=False)
    Db.open("db", store, opts()).close()
    with pytest.raises(Fenced) as learned:
        old.create_checkpoint(CheckpointScope.DURABLE)
    with pytest.raises(Fenced) as closing:
        old.close()
    assert closing.value is learned.value
    with pytest.raises(Fenced):
        old.close()
    with Db.open("db", store, opts()) as db:
        assert db.get(b"k") is None


def test_close_of_a_writer_whose_poller_learned_the_fencing_raises_fenced(
    store: ObjectStore,
) -> None:
    old = quiet_writer(store, poll=timedelta(milliseconds=20))
    Db.open("db", store, opts()).close()
    deadline = time.monotonic() + 10
    while True:  # until the manifest poller has seen the newer epoch
        try:
            old.flush()
        except Fenced:
            break
        assert time.monotonic() < deadline, "the poller never learned of the fencing"
        time.sleep(0.02)
    with pytest.raises(Fenced):
        old.close()


def test_a_with_block_ending_in_fenced_raises_that_fenced(store: ObjectStore) -> None:
    with pytest.raises(Fenced) as ei:
        with quiet_writer(store) as old:
            Db.open("db", store, opts()).close()
            try:
                old.put(b"k", b"v")
            except Fenced as e:
                raised = e
                raise
    assert ei.value is raised
    with pytest.raises(Fenced):
        old.close()


def test_a_clean_close_is_idempotent(store: ObjectStore) -> None:
    db = quiet_writer(store)
    db.put(b"k", b"v", await_durable=False)
    db.close()
    db.close()
    with Db.open("db", store, opts()) as again:
        assert again.get(b"k") == b"v"


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
    box: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
        except BaseException as e:
            box.append(e)
        else:
            box.append(None)

    t = threading.Thread(target=run, daemon=True)
    t.start()
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
    waiter with the raw RuntimeError."""
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
    written them: a dead flusher must release them with its error."""
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


# ---- item 7 for readers: a FOLLOW_LATEST or MANAGED reader never steps over damage ---------
@pytest.mark.parametrize("mode", ["follow", "managed"])
def test_a_reader_refuses_a_wal_hole_instead_of_serving_older_values(
    store: ObjectStore, mode: str
) -> None:
    """The same damage as above, seen by a reader that replays the WAL: it used to stop at the
    hole and serve "old" for k01..k09 for good, though "new" is stored and was acknowledged."""
    from slatedb_core.options import DbReaderOptions, ReaderMode
    from slatedb_core.reader.reader import DbReader

    write_old_then_new(store)
    wal = WalLog(store, "db")
    saved = store.get(wal.path(13)).data
    store.delete(wal.path(13))
    reader_mode = ReaderMode.FOLLOW_LATEST if mode == "follow" else ReaderMode.MANAGED
    options = DbReaderOptions(mode=reader_mode)
    with pytest.raises(WalSstMissing) as ei:
        DbReader.open("db", store, options=options)
    assert ei.value.wal_ids == [13]
    store.put(wal.path(13), saved)
    with DbReader.open("db", store, options=options) as reader:
        assert [reader.get(k) for k in keys(10)] == [b"new"] * 10
