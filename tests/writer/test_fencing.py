"""A writer fenced by a newer one (SlateDB RFC 0001, docs/manifest-and-fencing.md) says so: its
writes, ingests and reads raise ``Fenced``, none of them is acknowledged or served, and ``close()``
raises ``Fenced`` whether it learned of the fencing from a commit, from its poller or not at all,
never dropping buffered writes silently; a clean close is idempotent."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from slatedb_core.errors import Fenced, InjectedFault
from slatedb_core.gc import run_gc_once
from slatedb_core.options import CheckpointScope, DbOptions, GarbageCollectorOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultRule, FaultyStore
from slatedb_core.wal import WalLog
from slatedb_core.writer.db import Db
from tests.writer.ingest_steps import stage

# the background WAL flusher never runs on its own: every WAL SST is a durable put's
QUIET = timedelta(hours=1)


@pytest.fixture
def lake(tmp_path: Path) -> ObjectStore:
    """The local filesystem, where the review of RELIABILITY.md reproduced the close() cases."""
    return open_store(f"file://{tmp_path}/lake")


def opts(window: int = 1, **kw: object) -> DbOptions:
    return DbOptions(flush_interval=QUIET, max_parallel_writes=window, **kw)  # type: ignore[arg-type]


# ---- item 8: close() of a fenced writer -----------------------------------------------------
def quiet_writer(store: ObjectStore, poll: timedelta = QUIET) -> Db:
    """A writer whose background threads do nothing by themselves."""
    return Db.open("db", store, DbOptions(flush_interval=QUIET, manifest_poll_interval=poll))


def test_close_of_a_fenced_writer_that_had_not_learned_it_raises_fenced_every_time(
    lake: ObjectStore,
) -> None:
    """Found by the review of RELIABILITY.md, findings 7, 8, 15 (was test_review_wal_writer.py)."""
    old = quiet_writer(lake)
    old.put(b"k", b"buffered", await_durable=False)
    Db.open("db", lake, opts()).close()  # fences old
    with pytest.raises(Fenced) as first:
        old.close()  # its flush finds the fence: the buffered write is not durable
    with pytest.raises(Fenced) as second:
        old.close()  # the outcome of closing does not change
    assert second.value is first.value
    with Db.open("db", lake, opts()) as db:
        assert db.get(b"k") is None


def test_close_of_a_fenced_writer_that_learned_it_from_a_commit_raises_fenced(
    lake: ObjectStore,
) -> None:
    """The review's case: the writer learned of the fencing (here from a checkpoint commit)
    with a write still buffered; the old close() returned normally and dropped it.

    Found by the review of RELIABILITY.md, findings 7, 8, 15 (was test_review_wal_writer.py)."""
    old = quiet_writer(lake)
    old.put(b"k", b"buffered", await_durable=False)
    Db.open("db", lake, opts()).close()
    with pytest.raises(Fenced) as learned:
        old.create_checkpoint(CheckpointScope.DURABLE)
    with pytest.raises(Fenced) as closing:
        old.close()
    assert closing.value is learned.value
    with pytest.raises(Fenced):
        old.close()
    with Db.open("db", lake, opts()) as db:
        assert db.get(b"k") is None


def test_close_of_a_writer_whose_poller_learned_the_fencing_raises_fenced(
    lake: ObjectStore,
) -> None:
    """Found by the review of RELIABILITY.md, findings 7, 8, 15 (was test_review_wal_writer.py)."""
    old = quiet_writer(lake, poll=timedelta(milliseconds=20))
    Db.open("db", lake, opts()).close()
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


def test_a_with_block_ending_in_fenced_raises_that_fenced(lake: ObjectStore) -> None:
    """Found by the review of RELIABILITY.md, findings 7, 8, 15 (was test_review_wal_writer.py)."""
    with pytest.raises(Fenced) as ei:
        with quiet_writer(lake) as old:
            Db.open("db", lake, opts()).close()
            try:
                old.put(b"k", b"v")
            except Fenced as e:
                raised = e
                raise
    assert ei.value is raised
    with pytest.raises(Fenced):
        old.close()


def test_a_clean_close_is_idempotent(lake: ObjectStore) -> None:
    """Found by the review of RELIABILITY.md, findings 7, 8, 15 (was test_review_wal_writer.py)."""
    db = quiet_writer(lake)
    db.put(b"k", b"v", await_durable=False)
    db.close()
    db.close()
    with Db.open("db", lake, opts()) as again:
        assert again.get(b"k") == b"v"


# ---- writes of a fenced writer are refused and never acknowledged (was tests/test_db.py) ----
FAST = DbOptions(
    flush_interval=timedelta(milliseconds=10), manifest_poll_interval=timedelta(milliseconds=200)
)


def test_older_writer_is_fenced_and_newer_sees_its_acknowledged_writes(store: ObjectStore) -> None:
    """Was tests/test_db.py."""
    first = Db.open("db", store, FAST)
    for i in range(20):
        first.put(f"k{i:02}".encode(), b"first")
    second = Db.open("db", store, FAST)
    with pytest.raises(Fenced):
        first.put(b"late", b"x")
    with pytest.raises(Fenced):
        first.put(b"later", b"y", await_durable=False)
    assert all(second.get(f"k{i:02}".encode()) == b"first" for i in range(20))
    assert second.get(b"late") is None
    second.put(b"k00", b"second")
    with pytest.raises(Fenced):  # close() of a fenced writer reports it (review finding 8)
        first.close()
    second.close()
    with Db.open("db", store, FAST) as third:
        assert third.get(b"k00") == b"second" and third.get(b"late") is None


def test_unflushed_writes_of_a_fenced_writer_are_never_acknowledged(store: ObjectStore) -> None:
    """Was tests/test_db.py."""
    first = Db.open("db", store, DbOptions(flush_interval=timedelta(seconds=30)))
    first.put(b"buffered", b"x", await_durable=False)
    second = Db.open("db", store, FAST)
    with pytest.raises(Fenced):
        first.flush()
    assert second.get(b"buffered") is None
    with pytest.raises(Fenced):  # close() of a fenced writer reports it (review finding 8)
        first.close()
    second.close()


def test_fenced_bulk_ingest_leaves_nothing_visible(store: ObjectStore) -> None:
    """Was tests/test_db.py."""
    first = Db.open("db", store, FAST)
    second = Db.open("db", store, FAST)
    with pytest.raises(Fenced):
        first.bulk_ingest(pa.table({"key": [b"x1", b"x2"], "value": [b"1", b"2"]}))
    assert second.get(b"x1") is None
    with pytest.raises(Fenced):  # close() of a fenced writer reports it (review finding 8)
        first.close()
    second.close()


# ---- a fenced writer serves no read (issue 37, item 8a; was test_fenced_reads.py) -----------
# The review's finding: a writer fenced while its write was in flight later served that write
# from its memtable to its own ``get``, although it was never durable and never will be (the
# newer writer's fence took the WAL id the write was headed for). SlateDB's
# ``DbInner::check_closed`` returns the error the database was closed with (``Fenced``) to every
# later operation, reads included; ours does the same: once a writer knows it is fenced, ``get``,
# ``get_many``, ``scan`` and ``scan_arrow`` raise ``Fenced``, through the one check writes use.
# Each test stalls the old writer's WAL create (``FaultyStore`` pause points) or fails it, lets a
# second writer open (which fences the old one at the WAL id the stalled create is headed for),
# then lets the create go on: it finds the fence, and the old writer learns that it is fenced.
DB = "db"


def assert_reads_refused(old: Db, key: bytes) -> None:
    """Every read path of the fenced writer raises Fenced (none serves ``key``'s value); then
    it is closed, which raises Fenced too."""
    reads: list[Callable[[], object]] = [
        lambda: old.get(key),
        lambda: old.get_many([key]),
        lambda: old.get_many([key, b"other", b"a", b"z"]),
        lambda: list(old.scan()),
        lambda: old.scan_arrow().read_all(),
    ]
    for read in reads:
        with pytest.raises(Fenced):
            read()
    with pytest.raises(Fenced):
        old.close()


@pytest.fixture
def faulty() -> FaultyStore:
    return FaultyStore(
        open_store(f"memory://fenced-{random.getrandbits(64):x}"), pause_timeout_s=20
    )


WAL_CREATE = ("put_if_absent", f"{DB}/wal/*")


def in_thread(fn: Callable[[], object]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as e:  # handed to the test
            errors.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, errors


def fence_during_stalled_create(faulty: FaultyStore, run: Callable[[], object]) -> BaseException:
    """Run ``run`` (which makes the old writer create a WAL SST) with that create stalled, fence
    the old writer meanwhile, release the create; returns what ``run`` raised."""
    stall = faulty.pause("wal-create", *WAL_CREATE)
    t, errors = in_thread(run)
    assert stall.wait_reached(10), "the old writer never began its WAL create"
    Db.open(DB, faulty.inner, DbOptions(flush_interval=QUIET)).close()  # fences it
    stall.release()
    t.join(20)
    assert not t.is_alive()
    assert len(errors) == 1, "the write became durable although the slot was fenced"
    return errors[0]


def quiet(store: FaultyStore, window: int) -> Db:
    return Db.open(
        DB,
        store,
        DbOptions(flush_interval=QUIET, manifest_poll_interval=QUIET, max_parallel_writes=window),
    )


@pytest.mark.parametrize("window", [1, 2], ids=["serial", "parallel"])
def test_a_durable_put_fenced_in_flight_is_not_served_by_its_writer(
    faulty: FaultyStore, window: int
) -> None:
    old = quiet(faulty, window)
    err = fence_during_stalled_create(faulty, lambda: old.put(b"k", b"in-flight"))
    assert isinstance(err, Fenced)
    assert_reads_refused(old, b"k")
    with Db.open(DB, faulty.inner) as new:
        assert new.get(b"k") is None  # it never became durable


@pytest.mark.parametrize("window", [1, 2], ids=["serial", "parallel"])
def test_a_put_acknowledged_without_durability_then_fenced_is_not_served(
    faulty: FaultyStore, window: int
) -> None:
    old = quiet(faulty, window)
    old.put(b"k", b"acked-not-durable", await_durable=False)
    assert old.get(b"k") == b"acked-not-durable"  # not fenced yet: its own writes are visible
    err = fence_during_stalled_create(faulty, old.flush)
    assert isinstance(err, Fenced)
    assert_reads_refused(old, b"k")
    with Db.open(DB, faulty.inner) as new:
        assert new.get(b"k") is None


def test_a_put_whose_wal_create_failed_and_was_then_fenced_is_not_served(
    faulty: FaultyStore,
) -> None:
    old = quiet(faulty, 1)
    # every WAL create fails until the newer writer has fenced this one
    faulty.add_rule(FaultRule(*WAL_CREATE, fail_before=1.0))
    with pytest.raises(InjectedFault):
        old.put(b"k", b"failed")  # not durable; still buffered for a retry
    Db.open(DB, faulty.inner, DbOptions(flush_interval=QUIET)).close()
    faulty.clear_rules()
    with pytest.raises(Fenced):
        old.flush()  # the retry (this one or the flusher thread's) finds the newer fence
    assert_reads_refused(old, b"k")


def test_a_fenced_writer_refuses_reads_of_durable_data_too(faulty: FaultyStore) -> None:
    """SlateDB's behaviour: a database closed by fencing answers every call with Fenced, not
    a mix of answers from a state it no longer owns."""
    old = quiet(faulty, 1)
    old.put(b"d", b"durable")
    Db.open(DB, faulty.inner, DbOptions(flush_interval=QUIET)).close()
    old.put(b"k", b"v", await_durable=False)
    with pytest.raises(Fenced):
        old.flush()
    assert_reads_refused(old, b"d")


def test_a_fenced_writer_ingests_nothing(store: ObjectStore) -> None:
    """Was tests/test_ingest_ssts.py."""
    src = stage(store, "s", [(b"x1", b"1"), (b"x2", b"2")])
    first = Db.open("db", store, FAST)
    second = Db.open("db", store, FAST)
    try:
        with pytest.raises(Fenced):
            first.ingest_ssts([src])
        assert second.get(b"x1") is None
        with DbReader.open("db", store) as reader:
            assert reader.get(b"x2") is None
        with pytest.raises(Fenced):  # and it stays fenced
            first.ingest_ssts([src])
    finally:
        with pytest.raises(Fenced):  # close() of a fenced writer reports it (review finding 8)
            first.close()
        second.close()
    with Db.open("db", store, FAST) as db:
        assert db.get(b"x1") is None


# ---- a zombie's group of puts (was tests/test_wal_group_commit.py) ---------------------------
WRITERS = 8  # concurrent durable puts the zombie makes, one WAL SST of them


@pytest.mark.timeout(120)
def test_a_zombie_writers_grouped_puts_into_a_collected_fence_slot_are_all_fenced() -> None:
    """SlateDB RFC 0026's race for the WAL with group commit: writer A never polls (it learns
    nothing but through its own writes); writer B fences it, writes and flushes past its fence,
    and GC at min_age 0 deletes the fence A's next create would have collided with. A's next
    group (8 concurrent durable puts, one WAL SST) lands in the freed slot, and its boundary
    read after the create fails every one of them: nothing of it is acknowledged or replayed.

    Was tests/test_wal_group_commit.py."""
    store = open_store("memory://group-commit-zombie")
    quiet = DbOptions(
        flush_interval=timedelta(seconds=1), manifest_poll_interval=timedelta(hours=1)
    )
    a = Db.open("db", store, quiet)
    a.put(b"a-before", b"1")
    next_id = WalLog(store, "db").list_ids()[-1] + 1
    b = Db.open("db", store, quiet)
    fence = WalLog(store, "db").list_ids()[-1]
    assert fence >= next_id  # B fenced the slot A writes next
    b.put(b"b-1", b"1")
    b.flush_memtable()  # the replay point moves past B's fence
    run_gc_once("db", store, GarbageCollectorOptions(min_age=timedelta(0)))
    assert next_id not in WalLog(store, "db").list_ids()  # the fence A would hit is gone

    outcomes: list[BaseException | None] = []
    lock = threading.Lock()

    def zombie_put(i: int) -> None:
        try:
            a.put(f"zombie-{i}".encode(), b"x")
            result: BaseException | None = None
        except Fenced as e:
            result = e
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=zombie_put, args=(i,)) for i in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(outcomes) == WRITERS and all(isinstance(o, Fenced) for o in outcomes)
    with pytest.raises(Fenced):
        a.close()
    b.close()
    reopened = Db.open("db", store)
    try:
        assert all(reopened.get(f"zombie-{i}".encode()) is None for i in range(WRITERS))
        assert reopened.get(b"a-before") == b"1" and reopened.get(b"b-1") == b"1"
    finally:
        reopened.close()
