"""The boundary lease (slatedb_core.meta.lease, docs/gc-and-boundaries.md "The boundary lease"):
a WAL create costs one round trip because a boundary read made shortly before it vouches for
it, and everything that deletes WAL objects waits the lease out after advancing the boundary,
so a zombie whose read is fresh still collides with the fence it must collide with."""

from __future__ import annotations

import threading
import time

import pytest

from slatedb_core.errors import CorruptionError, Fenced
from slatedb_core.gc import run_gc_once
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.lsm.entries import batch_from_lists, empty_batch
from slatedb_core.meta import boundary as boundaries
from slatedb_core.meta.boundary import BoundaryObject, lease_clock, parse_boundary_lease
from slatedb_core.meta.lease import LeasedBoundary
from slatedb_core.sst import SstOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultyStore
from slatedb_core.wal import WalLog, WalWriter, fence_wal
from slatedb_core.wal.writer import wal_boundary
from tests.gc import ZERO, new_db, put_wal, recording
from tests.wal.fence_steps import set_writer_epoch

OPTS = SstOptions()
LEASE_S = 0.5


@pytest.fixture(autouse=True)
def _lease(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lease files made here record (tests/conftest.py shortens it for the suite)."""
    monkeypatch.setattr(boundaries, "DEFAULT_LEASE_S", LEASE_S)


def _rows(key: bytes) -> object:
    return batch_from_lists([key], [9], [0], [b"x"])


def _boundary_gets(rec: FaultyStore) -> int:
    return sum(
        1
        for kind, op, path in rec.events
        if kind == "latency" and op.startswith("get") and path.endswith("gc/wal.boundary")
    )


def test_a_steady_writer_reads_the_boundary_once_per_half_lease_not_per_create() -> None:
    store = recording(open_store("memory:///"))
    writer = WalWriter(WalLog(store, "db"), epoch=1, next_id=1, options=OPTS)
    for i in range(20):
        writer.write(batch_from_lists([b"k%d" % i], [i + 1], [0], [b"v"]))
    assert writer.lease.checks_after_create == 0
    # one background read (it finds no file and creates it at 0 with the lease)
    assert writer.lease.background_reads == 1 and _boundary_gets(store) == 1


def test_a_create_nothing_vouches_for_is_checked_by_a_read_after_it() -> None:
    """A create that took longer than the lease trusts (a stall between the read and the
    create's completion) gets the plain RFC 0026 check: a read served after it."""
    store = recording(open_store("memory:///"))
    writer = WalWriter(WalLog(store, "db"), epoch=1, next_id=1, options=OPTS)
    pause = store.pause("create", "put_if_absent", "db/wal/*", when="before")
    done = threading.Thread(target=writer.write, args=(_rows(b"a"),))
    done.start()
    assert pause.wait_reached()
    time.sleep(LEASE_S * 0.9)  # the background read started before the stall is now too old
    pause.release()
    done.join(10)
    assert writer.lease.checks_after_create == 1


def _zombie_with_a_fresh_read(store: ObjectStore) -> WalWriter:
    """A writer (epoch 1) about to create WAL id 2, holding a boundary read taken just now."""
    wal = WalLog(store, "db")
    zombie = WalWriter(wal, epoch=1, next_id=2, options=OPTS)
    zombie.lease.prepare()
    assert zombie.lease._reads[-1].done.wait(5)
    return zombie


def _newer_writer_passes_the_fence(store: ObjectStore) -> None:
    """Epoch 2 fences at id 2, writes id 3 and flushes past it (replay point 3)."""
    import dataclasses

    ms = new_db(store)
    put_wal(store, range(1, 2))
    set_writer_epoch(store, 2)
    assert fence_wal(WalLog(store, "db"), 2, 2) == 2
    put_wal(store, range(3, 4))
    ms.update(lambda m: dataclasses.replace(m, replay_after_wal_id=4))
    put_wal(store, range(4, 5))


def _while_it_runs(action: threading.Thread, store: ObjectStore, advanced: int) -> None:
    """Start ``action`` and return once ``gc/wal.boundary`` holds at least ``advanced``."""
    action.start()
    b = BoundaryObject(store, "db/gc/wal.boundary")
    deadline = time.monotonic() + 10
    while b.read() < advanced:
        assert time.monotonic() < deadline
        time.sleep(0.002)


def test_gc_waits_out_the_lease_so_a_zombie_with_a_fresh_read_hits_the_fence() -> None:
    """Seen failing with the collector's ``wait_settled`` removed: GC deleted the fence at once,
    the zombie's create at id 2 succeeded, and its fresh read (boundary 0) vouched for it."""
    store = open_store("memory:///")
    _newer_writer_passes_the_fence(store)
    zombie = _zombie_with_a_fresh_read(store)
    gc = threading.Thread(target=run_gc_once, args=("db", store, ZERO))
    started = lease_clock()
    _while_it_runs(gc, store, advanced=3)
    with pytest.raises(Fenced):
        zombie.write(_rows(b"late"))
    gc.join(10)
    assert lease_clock() - started >= LEASE_S  # the pass waited before deleting
    assert WalLog(store, "db").list_ids() == [4]


def test_destroy_waits_out_the_lease_before_deleting_the_wal() -> None:
    """Seen failing with ``_delete_own``'s wait removed, as above, for a hard destroy."""
    store = open_store("memory:///")
    _newer_writer_passes_the_fence(store)
    zombie = _zombie_with_a_fresh_read(store)
    gone = threading.Thread(target=destroy, args=("db", store), kwargs={"soft": False})
    _while_it_runs(gone, store, advanced=2**64 - 1)
    with pytest.raises(Fenced):
        zombie.write(_rows(b"late"))
    gone.join(10)
    assert not list(store.list("db/wal"))


def test_a_zombie_whose_read_is_older_than_the_lease_reads_again() -> None:
    """The counterexample of docs/gc-and-boundaries.md with the GC done: the fence is gone, the
    create succeeds, and the read after it sees the boundary past the id."""
    store = open_store("memory:///")
    _newer_writer_passes_the_fence(store)
    zombie = _zombie_with_a_fresh_read(store)
    run_gc_once("db", store, ZERO)  # takes the lease: the zombie's read no longer vouches
    with pytest.raises(Fenced):  # by the read the write starts before its create
        zombie.write(empty_batch())


def test_boundary_values_settle_one_lease_after_this_process_first_knew_them() -> None:
    store = open_store("memory:///")
    b = wal_boundary(WalLog(store, "db"))
    with pytest.raises(ValueError, match="never observed"):
        b.wait_settled(1)
    b.advance(5)
    assert b.settled() == 0
    t = lease_clock()
    b.wait_settled(5)
    assert lease_clock() - t >= LEASE_S * 0.99
    assert b.settled() == 5
    assert store.get("db/gc/wal.boundary").data == b"5 500"


def test_the_lease_is_written_once_and_every_process_keeps_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A GC whose own default differs still records and waits the file's lease."""
    store = open_store("memory:///")
    writer = WalWriter(WalLog(store, "db"), epoch=1, next_id=1, options=OPTS)
    writer.write(_rows(b"a"))  # the writer's first read creates the file at 0
    assert store.get("db/gc/wal.boundary").data == b"0 500"
    monkeypatch.setattr(boundaries, "DEFAULT_LEASE_S", 0.01)
    gc = wal_boundary(WalLog(store, "db"))
    gc.advance(1)
    assert store.get("db/gc/wal.boundary").data == b"1 500"
    t = lease_clock()
    gc.wait_settled(1)
    assert lease_clock() - t >= LEASE_S * 0.99


def test_a_file_without_a_lease_vouches_for_nothing_until_gc_records_one() -> None:
    """A boundary written before the lease existed (one u64): every create is checked by a
    read after it; GC's next advance records the lease."""
    store = open_store("memory:///")
    store.put("db/gc/wal.boundary", b"0")
    writer = WalWriter(WalLog(store, "db"), epoch=1, next_id=5, options=OPTS)
    for i in range(3):
        writer.write(_rows(b"k%d" % i))
    assert writer.lease.checks_after_create == 3
    assert writer.lease.background_reads == 1  # no point re-reading it at once
    wal_boundary(WalLog(store, "db")).advance(2)
    assert store.get("db/gc/wal.boundary").data == b"2 500"


@pytest.mark.parametrize("data", [b"3 x", b"3 1 2", b"3 600001", b" 3", b"3  5"])
def test_a_damaged_lease_is_corruption(data: bytes) -> None:
    with pytest.raises(CorruptionError, match="boundary"):
        parse_boundary_lease(data, "db/gc/wal.boundary")
    assert parse_boundary_lease(b"7 250\n", "x") == (7, 250)
    assert parse_boundary_lease(b"7", "x") == (7, None)


def test_a_failed_background_read_is_not_trusted_and_the_next_create_reads_again() -> None:
    store = FaultyStore(open_store("memory:///"))
    lease = LeasedBoundary(wal_boundary(WalLog(store, "db")))
    store.fail_next("get", "db/gc/wal.boundary")
    lease.prepare()
    assert lease._reads[-1].done.wait(5) and lease._reads[-1].error is not None
    lease.check(1, "db/wal/1.sst", lease_clock())
    assert lease.checks_after_create == 1
    lease.prepare()  # a failed newest read does not hold back a new one
    assert lease.background_reads == 2
    assert lease._reads[-1].done.wait(5) and lease._reads[-1].error is None


def test_the_suite_and_its_subprocesses_record_a_short_lease() -> None:
    """tests/conftest.py sets SLATEDB_WAL_LEASE_MS before slatedb_core is imported."""
    import os
    import subprocess
    import sys

    assert os.environ["SLATEDB_WAL_LEASE_MS"] == "50"
    code = "from slatedb_core.meta import boundary; print(boundary.DEFAULT_LEASE_S)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0.05"


@pytest.mark.parametrize("raw", ["0", "abc", "-5", "600001", "1.5"])
def test_a_bad_lease_in_the_environment_is_refused_with_its_name(raw: str) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "SLATEDB_WAL_LEASE_MS": raw}
    out = subprocess.run(
        [sys.executable, "-c", "import slatedb_core.meta.boundary"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert out.returncode != 0
    assert "InvalidArgument" in out.stderr and "SLATEDB_WAL_LEASE_MS" in out.stderr
