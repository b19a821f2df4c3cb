"""GC of the sequenced namespaces (.manifest, .compactions) and of checkpoints."""

from __future__ import annotations

import dataclasses
import time
from datetime import timedelta

import pytest

from slatedb_core.errors import BoundaryMissing, ObjectVersionBehindBoundary
from slatedb_core.gc import GarbageCollector, GcStats, run_gc_once
from slatedb_core.gc import collector as gc_collector
from slatedb_core.gc import deletes as gc_deletes
from slatedb_core.manifest.model import CompactedSst, Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.meta.sequenced import SequencedStore
from slatedb_core.options import GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.testing import FaultyStore
from tests.gc import (
    HOUR,
    ZERO,
    Background,
    add_checkpoint,
    commit,
    manifest_ids,
    names,
    new_db,
    put_sst,
    put_wal,
    recording,
    wal_ids,
    with_ssts,
)


def no_compactor(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests write fake .compactions records; keep a real compactor's reader off them."""
    monkeypatch.setattr(gc_collector, "in_flight_output_ids", lambda store, path: set())


def test_no_database_means_nothing_to_do(store: ObjectStore) -> None:
    stats = run_gc_once("db", store, ZERO)
    assert stats.latest_manifest_id is None and stats.deleted == 0
    assert names(store, "db") == []


def test_old_manifests_are_collected_but_the_latest_and_checkpointed_ones_kept(
    store: ObjectStore,
) -> None:
    ms = new_db(store)
    commit(ms, 3)  # 1..4
    add_checkpoint(ms, manifest_id=2)  # 5 pins 2
    latest = commit(ms, 2)  # 6, 7

    stats = run_gc_once("db", store, ZERO)

    assert manifest_ids(ms) == [2, latest]
    assert stats.manifest.deleted == 5 and stats.manifest.bytes_freed > 0  # 1, 3, 4, 5, 6
    assert stats.manifest_boundary == latest - 1
    assert ms.seq.boundary.read() == latest - 1
    assert stats.latest_manifest_id == latest and not stats.destroyed
    assert ms.read(2).manifest.last_l0_seq == 1  # the pinned version is intact
    # the boundary files are still there and nothing else was touched
    assert names(store, "db/gc") == ["db/gc/manifest.boundary"]


def test_the_boundary_is_advanced_before_the_first_delete(store: ObjectStore) -> None:
    ms = new_db(store)
    commit(ms, 4)
    rec = recording(store)

    run_gc_once("db", rec, ZERO)

    calls = [(op, path) for kind, op, path in rec.events if kind == "latency"]
    boundary_writes = [
        i
        for i, (op, path) in enumerate(calls)
        if op in ("put_if_absent", "put_if_match") and path == "db/gc/manifest.boundary"
    ]
    deletes = [i for i, (op, path) in enumerate(calls) if op == "delete"]
    assert boundary_writes and len(deletes) == 4
    assert boundary_writes[-1] < deletes[0]
    assert all(path.startswith("db/manifest/") for _, path in (calls[i] for i in deletes))


def test_a_delete_failing_after_the_boundary_advance_is_finished_by_the_next_pass(
    store: ObjectStore,
) -> None:
    ms = new_db(store)
    latest = commit(ms, 4)
    faulty = FaultyStore(store)
    faulty.fail_next("delete", "db/manifest/00000000000000000002.manifest")

    first = run_gc_once("db", faulty, ZERO)

    assert first.manifest.failed == 1 and first.manifest.deleted == 3
    assert manifest_ids(ms) == [2, latest]
    assert ms.seq.boundary.read() == latest - 1  # durable before the failure

    second = run_gc_once("db", faulty, ZERO)

    assert second.manifest.deleted == 1 and second.manifest.failed == 0
    assert manifest_ids(ms) == [latest]
    assert ms.read_latest().id == latest


def test_a_pass_that_dies_after_the_boundary_advance_is_finished_by_the_next_pass(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not a failed delete this time: the process dies right after the boundary write, before any
    delete. Nothing is lost, and the next pass deletes everything that was due."""
    ms = new_db(store)
    latest = commit(ms, 3)

    def crash(*args: object) -> None:
        raise RuntimeError("killed")

    with monkeypatch.context() as m:
        m.setattr(gc_deletes.Deleter, "delete", crash)
        with pytest.raises(RuntimeError, match="killed"):
            run_gc_once("db", store, ZERO)
    assert manifest_ids(ms) == [1, 2, 3, latest]
    assert ms.seq.boundary.read() == latest - 1

    stats = run_gc_once("db", store, ZERO)
    assert stats.manifest.deleted == 3 and manifest_ids(ms) == [latest]


def test_expired_checkpoints_are_removed_and_what_they_pinned_is_then_collected(
    store: ObjectStore,
) -> None:
    ms = new_db(store)
    old_sst = put_sst(store)
    ms.update(with_ssts(CompactedSst(old_sst)))  # 2 references old_sst
    expires = int(time.time()) + 1000
    cp_id, _ = add_checkpoint(ms, manifest_id=2, expire_time_s=expires)  # 3
    new_sst = put_sst(store)
    ms.update(with_ssts(CompactedSst(new_sst)))  # 4 drops old_sst
    forever_id, pinned = add_checkpoint(ms)  # 5 pins itself, never expires
    latest = pinned.id

    before = run_gc_once("db", store, ZERO)
    assert before.expired_checkpoints_removed == 0
    assert manifest_ids(ms) == [2, latest]
    assert names(store, "db/compacted") == sorted(
        f"db/compacted/{s}.sst" for s in (old_sst, new_sst)
    )

    after = run_gc_once("db", store, ZERO, now=lambda: expires + 1000.0)

    assert after.expired_checkpoints_removed == 1
    m = ms.read_latest()
    # +1: the checkpoint removal, +2: the barrier old_sst, now deletable, called for (step 7)
    assert m.id == latest + 2 and after.latest_manifest_id == latest + 2
    assert [c.id for c in m.manifest.checkpoints] == [forever_id]
    assert cp_id not in {c.id for c in m.manifest.checkpoints}
    # 2 went in the same pass; latest + 1 was committed after the pass listed the manifests
    assert manifest_ids(ms) == [latest, latest + 1, latest + 2]
    assert names(store, "db/compacted") == [f"db/compacted/{new_sst}.sst"]
    assert after.compacted.deleted == 1


def test_a_checkpoint_refreshed_while_gc_removes_expired_ones_survives(store: ObjectStore) -> None:
    ms = new_db(store)
    past = int(time.time()) - 10
    stale_id, _ = add_checkpoint(ms, manifest_id=1, expire_time_s=past)
    refreshed_id, base = add_checkpoint(ms, manifest_id=1, expire_time_s=past)
    faulty = FaultyStore(store)
    stall = faulty.pause("gc-commit", "put_if_absent", "db/manifest/*")

    gc = Background(lambda: run_gc_once("db", faulty, ZERO))
    assert stall.wait_reached()
    # A reader refreshes its checkpoint while GC's removal is in flight, and wins the race.
    later = int(time.time()) + 3600

    def refresh(m: Manifest) -> Manifest:
        cps = tuple(
            dataclasses.replace(c, expire_time_s=later) if c.id == refreshed_id else c
            for c in m.checkpoints
        )
        return dataclasses.replace(m, checkpoints=cps)

    ms.update(refresh, base=base)
    stall.release()
    stats = gc.join()

    assert gc.error is None and stats is not None
    assert stats.expired_checkpoints_removed == 1
    cps = {c.id: c for c in ms.read_latest().manifest.checkpoints}
    assert stale_id not in cps and cps[refreshed_id].expire_time_s == later
    assert 1 in manifest_ids(ms)  # still pinned by the refreshed checkpoint


def test_objects_younger_than_min_age_are_kept(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_compactor(monkeypatch)
    ms = new_db(store)
    commit(ms, 3)
    put_sst(store)
    put_wal(store, range(1, 4))
    ms.update(lambda m: dataclasses.replace(m, replay_after_wal_id=3))
    SequencedStore(store, "db", "compactions", "compactions").create(1, b"c1")
    SequencedStore(store, "db", "compactions", "compactions").create(2, b"c2")
    before = sorted(names(store, "db"))

    stats = run_gc_once("db", store, GarbageCollectorOptions(min_age=HOUR))

    assert stats.deleted == 0 and stats.failed == 0
    assert sorted(names(store, "db")) == before
    assert stats.manifest_boundary == 0 and stats.compactions_boundary == 0


def test_per_kind_min_age_overrides_apply_to_their_kind_only(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_compactor(monkeypatch)
    ms = new_db(store)
    ms.update(lambda m: dataclasses.replace(m, replay_after_wal_id=5))
    latest = commit(ms, 1)
    put_wal(store, range(1, 7))
    orphan = put_sst(store)
    options = GarbageCollectorOptions(
        min_age=HOUR, manifest_min_age=timedelta(0), compacted_min_age=timedelta(0)
    )

    stats = run_gc_once("db", store, options)

    # the orphan is deletable: GC's barrier (collector step 7) is the latest now
    assert manifest_ids(ms) == [latest + 1] and stats.manifest.deleted == 3
    assert wal_ids(store) == [1, 2, 3, 4, 5, 6] and stats.wal.deleted == 0
    assert str(orphan) not in "".join(names(store, "db/compacted"))

    # Two hours later the WAL SSTs are old enough too.
    stats = run_gc_once("db", store, options, now=lambda: time.time() + 7200)
    assert wal_ids(store) == [5, 6] and stats.wal.deleted == 4


def test_compactions_records_are_collected_boundary_first_and_never_the_latest(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_compactor(monkeypatch)
    new_db(store)
    seq = SequencedStore(store, "db", "compactions", "compactions")
    for i in range(1, 6):
        seq.create(i, f"compactions {i}".encode())
    rec = recording(store)

    stats = run_gc_once("db", rec, ZERO)

    assert [e.id for e in seq.list()] == [5]
    assert stats.compactions.deleted == 4 and stats.compactions_boundary == 4
    assert seq.boundary.read() == 4
    calls = [(op, path) for kind, op, path in rec.events if kind == "latency"]
    advance = max(i for i, c in enumerate(calls) if c[1] == "db/gc/compactions.boundary")
    first_delete = min(
        i for i, (op, p) in enumerate(calls) if op == "delete" and "/compactions/" in p
    )
    assert advance < first_delete
    # A stale compactor that now creates a collected id is rejected by the boundary.
    with pytest.raises(ObjectVersionBehindBoundary):
        seq.create(3, b"stale")


def test_a_soft_destroyed_database_within_its_grace_is_reported_and_left_alone(
    store: ObjectStore,
) -> None:
    ms = new_db(store)
    commit(ms, 3)
    put_sst(store)
    ms.update(lambda m: dataclasses.replace(m, destroyed_at_s=int(time.time()) - 10**6))
    before = sorted(names(store, "db"))

    stats = run_gc_once(
        "db",
        store,
        GarbageCollectorOptions(min_age=timedelta(0), db_delete_grace=timedelta(days=30)),
    )

    assert stats.destroyed and not stats.database_deleted and stats.deleted == 0
    assert sorted(names(store, "db")) == before


def test_a_second_pass_has_nothing_to_do_and_costs_a_few_requests(store: ObjectStore) -> None:
    ms = new_db(store)
    commit(ms, 20)
    put_wal(store, range(1, 11))
    ms.update(lambda m: dataclasses.replace(m, replay_after_wal_id=10))
    first = run_gc_once("db", store, ZERO)
    assert first.manifest.deleted == 21 and first.wal.deleted == 9

    second = run_gc_once("db", store, ZERO)

    assert second.deleted == 0 and second.failed == 0
    assert second.requests["delete"] == 0
    assert second.requests["put"] + second.requests["put_if_absent"] == 0
    assert second.requests["put_if_match"] == 0
    # compacted, wal, compactions and manifest LISTs; latest manifest GET; boundary GET
    assert second.requests["list"] >= 4
    assert second.total_requests <= 10, second.requests


def test_a_vanished_boundary_file_is_a_hard_error(store: ObjectStore) -> None:
    ms = new_db(store)
    commit(ms, 3)
    gc = GarbageCollector("db", store, ZERO)
    assert gc.run_once().manifest.deleted == 3
    store.delete("db/gc/manifest.boundary")  # nobody may do this; GC must notice

    with pytest.raises(BoundaryMissing):
        gc.run_once()


def test_stats_add_up(store: ObjectStore) -> None:
    ms = new_db(store)
    commit(ms, 2)
    stats = run_gc_once("db", store, ZERO)
    assert isinstance(stats, GcStats)
    assert stats.deleted == stats.manifest.deleted == 2
    assert stats.bytes_freed == stats.manifest.bytes_freed > 0
    assert stats.total_requests == sum(stats.requests.values()) > 0
    assert stats.duration_s > 0
    assert "manifest -2" in stats.summary()


def test_manifests_in_another_database_are_not_touched(store: ObjectStore) -> None:
    new_db(store, "db")
    other = new_db(store, "db/other")  # nested under the first one's path
    commit(other, 3)
    before = manifest_ids(other)
    run_gc_once("db", store, ZERO)
    assert manifest_ids(other) == before
    assert ManifestStore(store, "db").read_latest().id == 1


def test_the_manifest_gc_superseded_itself_is_collected_in_the_same_pass(
    store: ObjectStore,
) -> None:
    ms = new_db(store)
    _, stored = add_checkpoint(ms, manifest_id=1, expire_time_s=int(time.time()) - 1)  # 2
    stats = run_gc_once("db", store, ZERO)
    assert stats.expired_checkpoints_removed == 1
    assert manifest_ids(ms) == [stored.id + 1] and stats.manifest.deleted == 2
    assert ms.read_latest().manifest.checkpoints == ()
