"""Review of 98d8457 (GC: the WAL boundary moves first, its WAL SSTs are deleted last, so the
boundary lease's wait overlaps the collection of manifests, compacted SSTs and compactions
records; docs/gc-and-boundaries.md "The boundary lease").

Found by review: a step between the WAL boundary's advance and the WAL deletes that raises
(here a compactions boundary that cannot be advanced) used to leave the WAL alone from then on:
the pass advanced ``gc/wal.boundary``, raised, and the next pass did the same, so a persistent
failure of the compactions or compacted step stopped WAL collection for good. Before 98d8457
the WAL SSTs were deleted before those steps ran, so they went whatever the steps did after."""

from __future__ import annotations

import dataclasses

import pytest

from slatedb_core.errors import BoundaryMissing, CommitRetriesExhausted
from slatedb_core.gc import GarbageCollector, run_gc_once
from slatedb_core.gc import collector as gc_collector
from slatedb_core.meta.sequenced import SequencedStore
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultRule, FaultyStore
from tests.gc import ZERO, new_db, put_wal, wal_ids


@pytest.fixture
def store(store_url: str) -> ObjectStore:
    """Memory, local and S3, as where these tests were found: the folder's ``store`` adds
    two-phase CAS."""
    return open_store(store_url)


def test_a_failing_compactions_step_does_not_stop_wal_collection(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # fake .compactions records: keep a real compactor's reader off them
    """Found by the review of 98d8457 (was test_review_gc_order.py)."""
    monkeypatch.setattr(gc_collector, "in_flight_output_ids", lambda store, path: set())
    ms = new_db(store)
    put_wal(store, range(1, 6))
    ms.update(lambda m: dataclasses.replace(m, replay_after_wal_id=5))
    seq = SequencedStore(store, "db", "compactions", "compactions")
    for i in range(1, 4):
        seq.create(i, b"record %d" % i)
    # every write of the compactions boundary fails (a permission missing on gc/, say)
    faulty = FaultyStore(
        store,
        rules=[
            FaultRule(op="put_if_absent", path_glob="db/gc/compactions.boundary", fail_before=1.0)
        ],
    )

    with pytest.raises(CommitRetriesExhausted):
        run_gc_once("db", faulty, ZERO)

    # the pass failed, but the WAL SSTs it had declared (the boundary covers them) are gone:
    # deleting them depends on nothing the failed step decides
    assert wal_ids(store) == [5]
    assert [e.id for e in seq.list()] == [1, 2, 3]  # the failed step deleted nothing


def test_a_vanished_boundary_mid_pass_still_stops_the_pass_before_its_wal_deletes(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exception the fix above makes: a boundary file this process saw is gone, so the
    store is not what GC thinks it is (gc/service.py); the pass deletes nothing more.

    Found by the review of 98d8457 (was test_review_gc_order.py)."""
    monkeypatch.setattr(gc_collector, "in_flight_output_ids", lambda store, path: set())
    ms = new_db(store)
    seq = SequencedStore(store, "db", "compactions", "compactions")
    for i in range(1, 4):
        seq.create(i, b"record %d" % i)
    gc = GarbageCollector("db", store, ZERO)
    assert gc.run_once().compactions_boundary == 2  # this process has seen the boundary
    store.delete("db/gc/compactions.boundary")
    seq.create(4, b"record 4")
    put_wal(store, range(1, 6))
    ms.update(lambda m: dataclasses.replace(m, replay_after_wal_id=5))

    with pytest.raises(BoundaryMissing):
        gc.run_once()

    assert wal_ids(store) == [1, 2, 3, 4, 5]
