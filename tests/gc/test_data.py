"""GC of data objects: WAL SSTs and compacted SSTs."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import timedelta

import pytest
from ulid import ULID

from slatedb_core.errors import Fenced
from slatedb_core.gc import collector as gc_collector
from slatedb_core.gc import run_gc_once
from slatedb_core.layout import sst_path
from slatedb_core.lsm.entries import empty_batch
from slatedb_core.manifest.model import CompactedSst, ExternalDb, Manifest, SortedRun, SstView
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.meta.sequenced import SequencedStore
from slatedb_core.options import DbOptions
from slatedb_core.sst import SstOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.wal import WalLog, WalWriter
from slatedb_core.writer.db import Db
from tests.gc import (
    ZERO,
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

FAST = DbOptions(
    flush_interval=timedelta(milliseconds=10), manifest_poll_interval=timedelta(milliseconds=100)
)


def replay_after(wal_id: int) -> Callable[[Manifest], Manifest]:
    return lambda m: dataclasses.replace(m, replay_after_wal_id=wal_id)


def test_wal_below_the_replay_point_is_collected_and_a_reopened_db_sees_all_data(
    store: ObjectStore,
) -> None:
    with Db.open("db", store, FAST) as db:
        for i in range(4):
            db.put(f"flushed{i}".encode(), b"v")
            db.flush_memtable()
        db.put(b"wal-only", b"w")  # durable in the WAL, not in L0
    before = wal_ids(store)
    floor = ManifestStore(store, "db").read_latest().manifest.replay_after_wal_id

    stats = run_gc_once("db", store, ZERO)

    assert floor > 1 and stats.wal.deleted == len([i for i in before if i < floor])
    assert wal_ids(store) == [i for i in before if i >= floor]  # the one AT the floor stays
    assert stats.wal_boundary == floor - 1
    with Db.open("db", store, FAST) as db:
        assert [db.get(f"flushed{i}".encode()) for i in range(4)] == [b"v"] * 4
        assert db.get(b"wal-only") == b"w"


def test_wal_needed_by_a_checkpointed_manifest_is_kept_until_the_checkpoint_goes(
    store: ObjectStore,
) -> None:
    ms = new_db(store)
    put_wal(store, range(1, 11))
    ms.update(replay_after(3))  # 2
    add_checkpoint(ms, manifest_id=2, expire_time_s=2**40)  # 3
    ms.update(replay_after(8))  # 4

    stats = run_gc_once("db", store, ZERO)
    assert wal_ids(store) == list(range(3, 11)) and stats.wal.deleted == 2
    assert stats.wal_boundary == 2

    stats = run_gc_once("db", store, ZERO, now=lambda: 2.0**41)  # the checkpoint expired
    assert stats.expired_checkpoints_removed == 1
    assert wal_ids(store) == list(range(8, 11)) and stats.wal.deleted == 5
    assert stats.wal_boundary == 7


def test_wal_boundary_is_advanced_before_wal_deletes_and_fences_a_zombie_writer(
    store: ObjectStore,
) -> None:
    ms = new_db(store)
    put_wal(store, range(1, 6))
    ms.update(replay_after(5))
    rec = recording(store)

    run_gc_once("db", rec, ZERO)

    calls = [(op, path) for kind, op, path in rec.events if kind == "latency"]
    advance = max(i for i, (op, p) in enumerate(calls) if p == "db/gc/wal.boundary" and "put" in op)
    first = min(i for i, (op, p) in enumerate(calls) if op == "delete" and "/wal/" in p)
    assert advance < first
    # A zombie that stalled before writing WAL id 3 now finds the slot free; it must not
    # acknowledge anything written there.
    zombie = WalWriter(WalLog(store, "db"), epoch=1, next_id=3, options=SstOptions())
    with pytest.raises(Fenced):
        zombie.write(empty_batch())


def test_wal_ssts_go_last_so_the_lease_wait_overlaps_the_rest_of_the_pass(
    store: ObjectStore,
) -> None:
    """The WAL boundary moves before any delete, but its WAL SSTs are deleted after the other
    kinds: the boundary's lease (slatedb_core.meta.lease) runs while they are collected."""
    ms = new_db(store)
    put_wal(store, range(1, 6))
    orphan = put_sst(store)
    commit(ms, 3)
    ms.update(replay_after(5))
    rec = recording(store)

    stats = run_gc_once("db", rec, ZERO)

    assert stats.wal.deleted == 4 and stats.compacted.deleted == 1 and stats.manifest.deleted > 0
    assert sst_path("db", orphan) not in names(store, "db/compacted")
    calls = [(op, path) for kind, op, path in rec.events if kind == "latency"]
    advance = max(i for i, (op, p) in enumerate(calls) if p == "db/gc/wal.boundary" and "put" in op)
    deletes = [(i, p) for i, (op, p) in enumerate(calls) if op == "delete"]
    wal = [i for i, p in deletes if "/wal/" in p]
    others = [i for i, p in deletes if "/wal/" not in p]
    assert others and advance < min(others) and max(others) < min(wal)


def test_unreferenced_compacted_ssts_are_collected_and_referenced_ones_kept(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    ms = new_db(store)
    in_l0, in_run, renamed_new, renamed_old, orphan, running = (ULID() for _ in range(6))
    for sst_id in (in_l0, in_run, renamed_old, orphan, running):
        put_sst(store, sst_id=sst_id)
    external = put_sst(store, "other")  # another database's SST, referenced by ours
    store.put("db/compacted/notes.txt", b"not an SST")
    store.put("db/compacted/not-a-ulid-at-all-but-26chars.sst", b"?")

    def change(m: Manifest) -> Manifest:
        ssts = (
            CompactedSst(in_l0),
            CompactedSst(in_run),
            CompactedSst(renamed_new, original_id=renamed_old),  # union re-id: file has old id
            CompactedSst(external),
        )
        return dataclasses.replace(
            m,
            ssts=ssts,
            l0=(SstView(in_l0, in_l0), SstView(external, external)),
            compacted=(SortedRun(1, (SstView(in_run, in_run), SstView(renamed_new, renamed_new))),),
            external_dbs=(ExternalDb("other", ULID().to_uuid(), sst_ids=(external,)),),
        )

    ms.update(change)
    # A compactor is running (its record exists) and announced ``running`` as an output.
    SequencedStore(store, "db", "compactions", "compactions").create(1, b"record")
    monkeypatch.setattr(gc_collector, "in_flight_output_ids", lambda store, path: {running})

    stats = run_gc_once("db", store, ZERO)

    left = set(names(store, "db/compacted"))
    assert sst_path("db", orphan) not in left
    for kept in (in_l0, in_run, renamed_old, running):
        assert sst_path("db", kept) in left
    assert "db/compacted/notes.txt" in left
    assert "db/compacted/not-a-ulid-at-all-but-26chars.sst" in left
    assert names(store, "other") == [sst_path("other", external)]
    assert stats.compacted.deleted == 1 and stats.compacted.bytes_freed > 0

    # Once the compaction is no longer running and nothing references its output, it goes too.
    monkeypatch.setattr(gc_collector, "in_flight_output_ids", lambda store, path: set())
    assert run_gc_once("db", store, ZERO).compacted.deleted == 1
    assert sst_path("db", running) not in names(store, "db/compacted")


def test_ssts_of_a_checkpointed_manifest_are_kept(store: ObjectStore) -> None:
    ms = new_db(store)
    old, new = put_sst(store), put_sst(store)
    ms.update(with_ssts(CompactedSst(old)))  # 2
    add_checkpoint(ms, manifest_id=2)  # 3
    commit(ms, 1, with_ssts(CompactedSst(new)))  # 4

    stats = run_gc_once("db", store, ZERO)

    assert stats.compacted.deleted == 0
    assert set(names(store, "db/compacted")) == {sst_path("db", old), sst_path("db", new)}


def test_a_missing_checkpointed_manifest_stops_data_gc_but_not_metadata_gc(
    store: ObjectStore,
) -> None:
    ms = new_db(store)
    put_wal(store, range(1, 6))
    orphan = put_sst(store)
    commit(ms, 2)
    add_checkpoint(ms, manifest_id=2)  # 4
    ms.update(replay_after(5))  # 5
    store.delete(ms.seq.path(2))  # a pinned manifest that vanished: the live set is unknown

    stats = run_gc_once("db", store, ZERO)

    assert stats.data_gc_skipped is not None and "2" in stats.data_gc_skipped
    assert stats.wal.deleted == stats.compacted.deleted == 0
    assert wal_ids(store) == [1, 2, 3, 4, 5]
    assert sst_path("db", orphan) in names(store, "db/compacted")
    assert manifest_ids(ms) == [5]


def test_in_flight_outputs_of_a_real_compactions_record_are_kept(store: ObjectStore) -> None:
    """Integration with the compactor's ``.compactions`` records (skipped if it is absent)."""
    compactions = pytest.importorskip("slatedb_core.compactor.compactions")
    new_db(store)
    running, done = put_sst(store), put_sst(store)
    record = compactions.CompactionRecord(
        ULID(), "l0", (), (), 0, outputs=(running,), status="running"
    )
    finished = compactions.CompactionRecord(
        ULID(), "l0", (), (), 0, outputs=(done,), status="failed"
    )
    state = compactions.CompactionsState(1, (record, finished))
    compactions.compactions_seq(store, "db").create(1, compactions.encode_state(state))

    rec = recording(store)

    stats = run_gc_once("db", rec, ZERO)

    assert names(store, "db/compacted") == [sst_path("db", running)]
    assert stats.compacted.deleted == 1
    # SSTs listed first, then the in-flight record read, then the manifest: an SST in the listing
    # is then either still announced as running or already in the manifest read.
    calls = [(op, path) for kind, op, path in rec.events if kind == "latency"]
    sst_list = calls.index(("list", "db/compacted"))
    record_get = calls.index(("get", "db/compactions/00000000000000000001.compactions"))
    manifest_get = calls.index(("get", "db/manifest/00000000000000000001.manifest"))
    assert sst_list < record_get < manifest_get
