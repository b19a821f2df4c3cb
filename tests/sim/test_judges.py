"""The judges added for RELIABILITY.md can fail: each is fed the state or outcome it exists to catch.
(:mod:`tests.sim.test_found_seeds` has the schedules that caught the engine with them.)"""

from __future__ import annotations

import random
import re
import threading
import uuid

import pytest
from ulid import ULID

from slatedb_core.errors import CheckpointNotFound, Fenced, InvalidArgument, ObjectNotFound
from slatedb_core.lsm.entries import batch_from_lists
from slatedb_core.manifest.codec import encode_manifest
from slatedb_core.manifest.model import Checkpoint, CompactedSst, Manifest
from slatedb_core.sst import SstOptions
from slatedb_core.store.url import open_store
from slatedb_core.wal.log import encode_wal_sst
from slatedb_core.writer.db import Db
from tests.sim.actors import Outcome
from tests.sim.harness import Simulation
from tests.sim.recorder import InvariantViolation, RecordingStore, duplicates
from tests.sim.state import CheckpointRec

MANIFEST = "db/manifest/{:020d}.manifest"
WAL = "db/wal/{:020d}.sst"
ME = threading.current_thread().name


def _recorder() -> RecordingStore:
    return RecordingStore(open_store("memory://"))


def _collected(rec: RecordingStore) -> None:
    """db with manifests 1 and 2 (destroyed), then both deleted, as GC of a destroyed db does."""
    rec.put_if_absent(MANIFEST.format(1), encode_manifest(Manifest()))
    rec.put_if_absent(
        MANIFEST.format(2), encode_manifest(Manifest(destroyed_at_s=1), manifest_id=2)
    )
    rec.delete(MANIFEST.format(1))
    assert not rec.collected("db")
    rec.delete(MANIFEST.format(2))
    assert rec.collected("db")


def test_recorder_flags_a_deleted_boundary_file_even_of_a_destroyed_database() -> None:
    rec = _recorder()
    rec.put_if_absent("db/gc/manifest.boundary", b"1")
    _collected(rec)
    assert rec.violations == []
    rec.delete("db/gc/manifest.boundary")
    assert rec.violations == ["deleted boundary file db/gc/manifest.boundary"]


def test_recorder_names_the_creates_that_land_after_a_collection_by_thread() -> None:
    rec = _recorder()
    rec.put_if_absent(WAL.format(1), b"w")  # before the collection: not late
    _collected(rec)
    rec.put_if_absent(MANIFEST.format(3), encode_manifest(Manifest()))
    assert rec.late_creates("db", thread=ME) == [MANIFEST.format(3)]
    assert rec.late_creates("db", thread="sim-stall7") == []
    assert rec.late_creates("db", thread=ME, since=rec.mark()) == []
    assert rec.late_creates("other", thread=ME) == []


def test_duplicate_checkpoints_and_ssts_are_named() -> None:
    cp = Checkpoint(uuid.uuid4(), 1, 0)
    sst = CompactedSst(ULID())
    assert duplicates(Manifest(checkpoints=(cp, Checkpoint(uuid.uuid4(), 1, 0)))) == []
    assert duplicates(Manifest(checkpoints=(cp, cp), ssts=(sst, sst))) == [
        f"checkpoint {cp.id}",
        f"SST {sst.id}",
    ]


def test_dangling_names_missing_ssts_and_pinned_manifests_but_not_damaged_ones() -> None:
    rec = _recorder()
    sst = CompactedSst(ULID())
    path = f"db/compacted/{sst.id}.sst"
    rec.put_if_absent(MANIFEST.format(1), encode_manifest(Manifest()))
    pin = Checkpoint(uuid.uuid4(), 1, 0)
    rec.put_if_absent(
        MANIFEST.format(2), encode_manifest(Manifest(ssts=(sst,), checkpoints=(pin,)))
    )
    assert rec.dangling("db") == [f"manifest 2 names missing SST {path}"]
    rec.put_if_absent(path, b"sst")
    assert rec.dangling("db") == []
    rec.delete(MANIFEST.format(1))  # (also a violation of its own: ahead of the boundary)
    assert rec.dangling("db") == [
        f"checkpoint {pin.id} in manifest 2 pins missing {MANIFEST.format(1)}"
    ]
    rec.damage(path, None, rec.inner)
    rec.damage(MANIFEST.format(1), None, rec.inner)
    assert rec.dangling("db") == []


def test_judge_outcome_flags_invalid_argument_and_success_after_a_collection() -> None:
    sim = Simulation(0)
    with pytest.raises(InvariantViolation, match="InvalidArgument on valid input"):
        sim.judge_outcome("stalled_bulk_ingest", Outcome(error=InvalidArgument("twice")), ME, 0)
    sim.judge_outcome("clone", Outcome(error=InvalidArgument("bad projection")), ME, 0)
    _collected(sim.rec)
    since = sim.rec.mark()
    sim.rec.put_if_absent(WAL.format(5), b"w")
    sim.judge_outcome("put_durable", Outcome(error=Fenced("writer", 1, 2)), ME, since)
    sim.judge_outcome("wal_land", Outcome(), ME, since)  # landing a create acknowledges nothing
    with pytest.raises(InvariantViolation, match=r"after creating .* came back to life"):
        sim.judge_outcome("put_durable", Outcome(), ME, since)
    since = sim.rec.mark()
    with pytest.raises(ObjectNotFound):  # a boundary check that ran into the collected path
        sim.rec.get("db/gc/wal.boundary")
    sim.judge_outcome("gc", Outcome(), ME, since)  # no acknowledgement: nothing to judge
    with pytest.raises(InvariantViolation, match=r"after reading db/gc/wal\.boundary"):
        sim.judge_outcome("stalled_put_durable", Outcome(), ME, since)


def test_only_a_second_delete_may_find_a_checkpoint_gone() -> None:
    sim = Simulation(0)
    cid = uuid.uuid4()
    gone = Outcome(error=CheckpointNotFound(cid))
    sim._checkpoint_deleted(CheckpointRec(cid, None, deletes=2), gone)
    with pytest.raises(InvariantViolation, match="only delete"):
        sim._checkpoint_deleted(CheckpointRec(cid, None, deletes=1), gone)


def test_a_path_that_opens_is_not_destroyed() -> None:
    sim = Simulation(0)
    sim.stop_faults()
    with pytest.raises(InvariantViolation, match=r"Db\.open of .* succeeded"):
        sim.check_stays_destroyed("fresh")
    Db.open("db", sim.rec).close()
    sim.destroyed = True
    with pytest.raises(InvariantViolation, match="came back: a fresh reader opened it"):
        sim._check_not_resurrected()


def test_damage_deletes_wal_ssts_only_below_the_in_flight_window_and_never_the_latest() -> None:
    sim = Simulation(0)
    wal = encode_wal_sst(batch_from_lists([b"k"], [1], [0], [b"v"]), SstOptions())
    sim.rec.put_if_absent(MANIFEST.format(1), encode_manifest(Manifest()))
    sim.rec.put_if_absent(MANIFEST.format(2), encode_manifest(Manifest(max_parallel_writes=4)))
    for i in range(1, 9):
        sim.rec.put_if_absent(WAL.format(i), wal)
    window = max(4, sim.options.max_parallel_writes)
    seen: set[tuple[str, bool]] = set()
    for i in range(300):
        sim.rng = random.Random(i)
        victim = sim._victim()
        assert victim is not None
        kind, path, data = victim
        seen.add((kind, data is None))
        if data is None and kind == "wal":
            wal_id = int(re.findall(r"\d{20}", path)[0])
            assert wal_id <= 8 - window
        if data is None and kind == "manifest":
            assert path != MANIFEST.format(2)
        if data is not None:
            assert data != sim.rec.stored(path) and len(data) == len(sim.rec.stored(path) or b"")
    assert seen == {("wal", True), ("wal", False), ("manifest", True), ("manifest", False)}
