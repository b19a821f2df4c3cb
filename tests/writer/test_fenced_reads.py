"""A fenced writer serves no read (issue 37, item 8a).

The review's finding: a writer fenced while its write was in flight later served that write from
its memtable to its own ``get``, although it was never durable and never will be (the newer
writer's fence took the WAL id the write was headed for). SlateDB's ``DbInner::check_closed``
returns the error the database was closed with (``Fenced``) to every later operation, reads
included; ours does the same: once a writer knows it is fenced, ``get``, ``get_many``, ``scan``
and ``scan_arrow`` raise ``Fenced``, through the one check writes use (``_check_usable``).

Each test stalls the old writer's WAL create (``FaultyStore`` pause points) or fails it, lets a
second writer open (which fences the old one at the WAL id the stalled create is headed for),
then lets the create go on: it finds the fence, and the old writer learns that it is fenced.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from datetime import timedelta

import pytest

from slatedb_core.errors import Fenced, InjectedFault
from slatedb_core.options import DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultRule, FaultyStore
from slatedb_core.writer.db import Db

DB = "db"
WAL_CREATE = ("put_if_absent", f"{DB}/wal/*")
# background threads that never act by themselves: every WAL create is one the test drives
QUIET = timedelta(hours=1)


@pytest.fixture
def faulty() -> FaultyStore:
    return FaultyStore(
        open_store(f"memory://fenced-{random.getrandbits(64):x}"), pause_timeout_s=20
    )


def quiet(store: FaultyStore, window: int) -> Db:
    return Db.open(
        DB,
        store,
        DbOptions(flush_interval=QUIET, manifest_poll_interval=QUIET, max_parallel_writes=window),
    )


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
