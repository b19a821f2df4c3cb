"""Protocol steps against faults on the wire, one at a time, through obstore's real retry logic.

What obstore does with each fault decides what our code has to resolve. Measured (obstore 0.12,
``max_retries=3``): a 5xx is retried, so an ``error_after`` on a create comes back as 412 for our
own object (``ObjectAlreadyExists``) and on a conditional update as ``PreconditionFailed``; a
connection reset or a dropped answer is not retried for a PUT and surfaces as ``StoreError`` with
the outcome unknown. Each test forces one of these at one protocol step and checks the step
reports exactly what happened.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from slatedb_core.errors import (
    PreconditionFailed,
    SlateDBError,
    StoreError,
    VersionExists,
)
from slatedb_core.gc import run_gc_once
from slatedb_core.lsm.entries import batch_from_lists
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.meta.boundary import BoundaryObject
from slatedb_core.meta.sequenced import SequencedStore
from slatedb_core.options import DbOptions, GarbageCollectorOptions
from slatedb_core.sst import SstOptions
from slatedb_core.store.objectstore import ObjectStore, ObjectVersion
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultyStore
from slatedb_core.wal.log import WalLog
from slatedb_core.wal.writer import WalWriter
from slatedb_core.writer.db import Db
from slatedb_core.writer.hooks import WriterHooks
from tests.conftest import MotoS3
from tests.http_faults.proxy import Fault, FaultProxy
from tests.http_faults.store_url_steps import proxied_url

pytestmark = pytest.mark.s3

AMBIGUOUS = [Fault.ERROR_AFTER, Fault.DROP_AFTER_APPLY, Fault.RESET_RESPONSE]
ALL = [f for f in Fault if f is not Fault.STALL]  # a stall costs a 30 s client timeout


@pytest.fixture
def bucket(moto_s3: MotoS3) -> str:
    return moto_s3.new_bucket()


@pytest.fixture
def proxy(moto_s3: MotoS3) -> Iterator[FaultProxy]:
    with FaultProxy(("127.0.0.1", moto_s3.port), seed=3) as p:
        yield p


@pytest.fixture
def faulty(proxy: FaultProxy, bucket: str) -> ObjectStore:
    """The store as the engine sees it: obstore over the proxy."""
    return open_store(proxied_url(proxy.endpoint, bucket))


@pytest.fixture
def direct(moto_s3: MotoS3, bucket: str) -> ObjectStore:
    """The same bucket without the proxy: the truth."""
    return open_store(moto_s3.url(bucket))


@pytest.mark.parametrize("fault", AMBIGUOUS, ids=lambda f: f.value)
def test_create_if_absent_reports_the_true_outcome_of_an_ambiguous_put(
    proxy: FaultProxy, faulty: ObjectStore, direct: ObjectStore, fault: Fault
) -> None:
    proxy.force(fault, method="PUT")
    try:
        faulty.put_if_absent("obj", b"ours")
    except StoreError:
        assert fault is not Fault.ERROR_AFTER  # obstore retries 5xx itself
    except Exception as e:  # the retry met our own object
        assert fault is Fault.ERROR_AFTER and type(e).__name__ == "ObjectAlreadyExists"
    assert direct.get("obj").data == b"ours"
    assert proxy.counters[fault.value] == 1


@pytest.mark.parametrize("fault", ALL, ids=lambda f: f.value)
def test_sequenced_create_succeeds_once_whatever_happens_to_its_put(
    proxy: FaultProxy, faulty: ObjectStore, direct: ObjectStore, fault: Fault
) -> None:
    seq = SequencedStore(faulty, "db", "manifest", "manifest")
    seq.create(1, b"first")
    proxy.force(fault, method="PUT", path_contains="manifest/00000000000000000002")
    seq.create(2, b"second: ours")  # no VersionExists for our own object
    assert direct.get(seq.path(2)).data == b"second: ours"
    assert proxy.pending_forced() == 0
    with pytest.raises(VersionExists):
        SequencedStore(faulty, "db", "manifest", "manifest").create(2, b"someone else")


@pytest.mark.parametrize("fault", ALL, ids=lambda f: f.value)
def test_boundary_advance_lands_once_whatever_happens_to_its_conditional_put(
    proxy: FaultProxy, faulty: ObjectStore, direct: ObjectStore, fault: Fault
) -> None:
    b = BoundaryObject(faulty, "db/gc/manifest.boundary")
    assert b.advance(3) == 3
    proxy.force(fault, method="PUT", path_contains="manifest.boundary")
    assert b.advance(7) == 7
    assert direct.get("db/gc/manifest.boundary").data == b"7"
    assert proxy.pending_forced() == 0


def test_conditional_update_answered_5xx_after_applying_reports_precondition_failed(
    proxy: FaultProxy, faulty: ObjectStore, direct: ObjectStore
) -> None:
    """Why every put_if_match caller must re-read on PreconditionFailed instead of trusting it:
    obstore's retry of our own applied update is refused."""
    v = faulty.put("obj", b"1")
    proxy.force(Fault.ERROR_AFTER, method="PUT")
    with pytest.raises(PreconditionFailed):
        faulty.put_if_match("obj", b"2", ObjectVersion(v.e_tag))
    assert direct.get("obj").data == b"2"


@pytest.mark.parametrize("fault", ALL, ids=lambda f: f.value)
def test_wal_write_is_acknowledged_once_whatever_happens_to_its_put(
    proxy: FaultProxy, faulty: ObjectStore, direct: ObjectStore, fault: Fault
) -> None:
    wal = WalLog(faulty, "db")
    writer = WalWriter(wal, epoch=1, next_id=1, options=SstOptions())
    proxy.force(fault, method="PUT", path_contains="wal/00000000000000000001")
    batch = batch_from_lists([b"a"], [1], [0], [b"1"])
    try:
        assert writer.write(batch) == 1
    except StoreError:
        # Unknown outcome reported as such; the retry (same bytes) must then succeed.
        assert writer.write(batch) == 1
    assert writer.next_id == 2
    assert WalLog(direct, "db").read(1).entries.column("key").to_pylist() == [b"a"]


@pytest.mark.parametrize("fault", ALL, ids=lambda f: f.value)
def test_persistent_faults_give_up_within_a_bounded_time(
    proxy: FaultProxy, faulty: ObjectStore, fault: Fault
) -> None:
    faulty.put("obj", b"x" * 100_000)
    proxy.force(fault, times=10)
    started = time.monotonic()
    with pytest.raises(StoreError):
        faulty.get("obj")
    assert time.monotonic() - started < 10  # obstore: 3 retries, backoff capped at 1 s


@pytest.mark.slow
def test_a_hung_server_costs_one_client_timeout_not_a_hang(
    proxy: FaultProxy, faulty: ObjectStore
) -> None:
    """url.py configures obstore with a 30 s request timeout and a 20 s retry budget: a request
    the server never answers fails after about one timeout, and the caller learns it."""
    faulty.put("obj", b"x")
    proxy.force(Fault.STALL, times=5, method="GET")
    started = time.monotonic()
    with pytest.raises(StoreError):
        faulty.get("obj")
    took = time.monotonic() - started
    assert 25 < took < 60, took
    assert proxy.counters[Fault.STALL.value] == 1  # no retry after the budget ran out


def test_memtable_flush_whose_gc_check_fails_after_commit_is_not_flushed_twice(
    proxy: FaultProxy, faulty: ObjectStore, direct: ObjectStore
) -> None:
    """Bug found here: after the manifest commit of a flushed memtable, the check against the
    compacted-SST GC boundary read failed (obstore gave up on a 5xx); the flush was retried from
    scratch, so the manifest named the same rows in two L0 SSTs, and the first was never checked
    against the boundary."""
    hooks = WriterHooks()  # its steps show the writer's state
    db = Db.open("db", faulty, DbOptions(flush_interval=timedelta(milliseconds=20)), hooks=hooks)
    try:
        for i in range(20):
            db.put(f"k{i:02}".encode(), b"v", await_durable=False)
        db.flush()
        proxy.force(Fault.ERROR_BEFORE, 4, method="GET", path_contains="gc/compacted.boundary")
        with pytest.raises(StoreError):
            db.flush_memtable()
        _wait_until_flushed(hooks)
        m = ManifestStore(direct, "db").read_latest().manifest
        assert len(m.l0) == 1, m.l0
    finally:
        db.close()


@pytest.mark.parametrize(
    "second_fault",
    ["boundary read fails", "re-home answered 5xx after applying"],
)
def test_sst_deleted_by_gc_before_commit_is_rehomed_whatever_fails_next(
    proxy: FaultProxy, faulty: ObjectStore, direct: ObjectStore, second_fault: str
) -> None:
    """The compacted-boundary race (GC deletes a flushed SST between upload and commit) combined
    with a fault right after the commit, either on the boundary read or on the upload of the
    re-homed copy: the writer must still re-home the SST, not leave the manifest naming a
    deleted object, and must not report its own re-homed copy as a conflict."""
    paused = FaultyStore(faulty)
    hooks = WriterHooks()  # its steps show the writer's state
    db = Db.open("db", paused, DbOptions(flush_interval=timedelta(milliseconds=20)), hooks=hooks)
    try:
        for i in range(50):
            db.put(f"k{i:02}".encode(), b"v", await_durable=False)
        db.flush()
        pp = paused.pause("commit", "put_if_absent", "db/manifest/*", when="before")
        errors: list[BaseException] = []

        def flush() -> None:
            try:
                db.flush_memtable()
            except SlateDBError as e:
                errors.append(e)

        flusher = threading.Thread(target=flush)
        flusher.start()
        assert pp.wait_reached(10)
        stats = run_gc_once("db", direct, GarbageCollectorOptions(min_age=timedelta(0)))
        assert stats.compacted.deleted == 1
        if second_fault == "boundary read fails":
            proxy.force(Fault.ERROR_BEFORE, 4, method="GET", path_contains="compacted.boundary")
        else:
            proxy.force(Fault.ERROR_AFTER, method="PUT", path_contains="db/compacted/")
        pp.release()
        flusher.join(30)
        assert not flusher.is_alive()
        _wait_until_flushed(hooks)
        assert proxy.pending_forced() == 0
        if second_fault == "boundary read fails":
            assert all(isinstance(e, StoreError) for e in errors), errors
        else:
            assert not errors, errors  # a 5xx obstore retried is not the caller's failure
    finally:
        db.close()
    m = ManifestStore(direct, "db").read_latest().manifest
    missing = [str(s.id) for s in m.ssts if not direct.exists(f"db/compacted/{s.id}.sst")]
    assert not missing, f"the manifest names deleted SSTs {missing}"
    with Db.open("db", direct) as again:
        assert dict(again.scan()) == {f"k{i:02}".encode(): b"v" for i in range(50)}


def _wait_until_flushed(hooks: WriterHooks, timeout_s: float = 20.0) -> None:
    """The background flusher retries a failed memtable flush; wait (bounded) until it did
    (the writer opened with ``hooks``)."""
    assert hooks.steps is not None
    state = hooks.steps.state
    deadline = time.monotonic() + timeout_s
    while state().imm and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not state().imm, "the memtable flush never completed"
