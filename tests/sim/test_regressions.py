"""Engine bugs the seeded simulation found, each pinned by a deterministic test.

Every test names the seed that first showed the bug; ``python -m tests.sim.run --seed N`` replays
that schedule.
"""

from __future__ import annotations

import dataclasses
import threading
from datetime import timedelta

from slatedb_core.checkpoints import CheckpointCreateResult, create_checkpoint
from slatedb_core.errors import Fenced, StoreError
from slatedb_core.gc import run_gc_once
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import (
    DbOptions,
    DbReaderOptions,
    GarbageCollectorOptions,
    ReaderMode,
)
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultyStore
from slatedb_core.writer.db import Db

OPTS = DbOptions(flush_interval=timedelta(milliseconds=5))


def test_writer_whose_open_stalled_before_fencing_the_wal_is_fenced_by_a_newer_writer() -> None:
    """Seeds 64 and 67: writer A bumps the epoch, stalls before listing the WAL; writer B opens
    (newer epoch) and fences the WAL; A resumes and used to fence *after* B's fence SST, open
    successfully and acknowledge writes, while B's next WAL write then hit A's older-epoch SST
    (WalEpochConflict). A must instead fail its open with Fenced, and B keep working."""
    store = FaultyStore(open_store("memory://"))
    Db.open("db", store, OPTS).close()
    # right after A's epoch bump, so before its LIST of the WAL for fencing (since issue 38 a
    # first LIST, the WAL-store check, comes before the bump)
    point = store.pause("a-before-wal-list", "put_if_absent", "db/manifest/*", when="after")
    box: list[BaseException | Db] = []

    def open_a() -> None:
        try:
            box.append(Db.open("db", store, OPTS))
        except BaseException as e:
            box.append(e)

    a = threading.Thread(target=open_a, daemon=True)
    a.start()
    assert point.wait_reached(10)
    b = Db.open("db", store, OPTS)
    point.release()
    a.join(30)
    assert not a.is_alive()
    try:
        assert isinstance(box[0], Fenced), f"the stale opener got {box[0]!r}"
        b.put(b"k", b"v")  # B's WAL is not blocked by a stale fence SST
        assert b.get(b"k") == b"v"
    finally:
        b.close()
        if isinstance(box[0], Db):
            box[0].close()
    with Db.open("db", store, OPTS) as c:
        assert c.get(b"k") == b"v"


def test_a_commit_that_landed_before_gc_passed_it_is_not_deleted_as_stale() -> None:
    """Seed 100905: a checkpoint commit (manifest 2, pinning 2) lands, then its writer stalls
    before the boundary check; others commit 3 and 4 on top of it and GC moves the boundary to 3
    (2 is pinned, so GC keeps it). The stalled writer's check then finds 2 behind the boundary,
    and the manifest store used to delete 2 as a void stale write: the checkpoint then pinned a
    missing manifest (its readers failed, GC skipped all data collection from then on)."""
    store = open_store("memory://")
    ManifestStore(store, "db").create_initial(Manifest())
    faulty = FaultyStore(store)
    point = faulty.pause("after-commit", "put_if_absent", "db/manifest/*", when="after")
    box: list[object] = []

    def stalled_checkpoint() -> None:
        try:
            box.append(create_checkpoint("db", faulty))
        except BaseException as e:
            box.append(e)

    t = threading.Thread(target=stalled_checkpoint, daemon=True)
    t.start()
    assert point.wait_reached(10)
    live = ManifestStore(store, "db")
    for _ in range(2):
        live.update(lambda m: dataclasses.replace(m, last_l0_seq=m.last_l0_seq + 1))  # 3, 4
    run_gc_once("db", store, GarbageCollectorOptions(min_age=timedelta(0)))
    assert live.seq.boundary.read() == 3 and store.exists(live.seq.path(2))
    point.release()
    t.join(30)

    result = box[0]
    assert isinstance(result, CheckpointCreateResult) and result.manifest_id == 2
    assert store.exists(live.seq.path(2))
    reader = DbReader.open("db", store, result.id, DbReaderOptions(mode=ReaderMode.CHECKPOINT))
    reader.close()
    stats = run_gc_once("db", store, GarbageCollectorOptions(min_age=timedelta(0)))
    assert stats.data_gc_skipped is None


def test_a_retry_does_not_build_on_a_stale_write_left_behind_the_boundary() -> None:
    """Seed 305286: a writer whose last known manifest was 9 committed its memtable flush as
    id 10 after GC had collected the real 10 (a void write behind the boundary), and the boundary
    check then failed with a store error. Its retry lost the race for 10 to that void object and
    took the object's bytes as the new base; they already held the flush, so the retry reported
    success without committing anything. The flush's rows were then in no real manifest while the
    replay point moved past their WAL SST: an acknowledged write was lost."""
    store = open_store("memory://")
    live = ManifestStore(store, "db")
    live.create_initial(Manifest())
    faulty = FaultyStore(store)
    stale = ManifestStore(faulty, "db")
    base = stale.read_latest()  # 1
    for _ in range(3):  # (the replay point too: a manifest recording WAL SSTs that are not
        # there is refused by the GC since issue 38, WalStoreMissing)
        live.update(
            lambda m: dataclasses.replace(
                m,
                wal_id_last_seen=m.wal_id_last_seen + 1,
                replay_after_wal_id=m.wal_id_last_seen + 1,
            )
        )
    run_gc_once("db", store, GarbageCollectorOptions(min_age=timedelta(0)))  # boundary 3
    assert live.seq.boundary.read() == 3 and not store.exists(live.seq.path(2))

    def add_flush(m: Manifest) -> Manifest | None:  # idempotent, like the writer's L0 flush
        return None if m.last_l0_seq == 7 else dataclasses.replace(m, last_l0_seq=7)

    faulty.fail_next("get", "db/gc/manifest.boundary")  # the check after the void create of 2
    try:
        stale.update(add_flush, base=base)
    except StoreError:
        pass
    assert store.exists(live.seq.path(2))  # the void object, holding the flush

    stored = stale.update(add_flush, base=base)

    assert stored.id == 5 and stored.manifest.last_l0_seq == 7
    assert live.read_latest().manifest.last_l0_seq == 7


def test_a_checkpoint_between_an_l0_commit_and_the_replay_point_reads_the_newest_values() -> None:
    """Seed 307288: a CHECKPOINT-mode reader served an older value of a key: it replayed WAL
    SSTs up to the stale ``wal_id_last_seen`` into memtables, and memtables shadow L0 whatever
    the sequence numbers, although the pinned L0 SST already held a newer value."""
    store = open_store("memory://")
    faulty = FaultyStore(store)
    db = Db.open("db", faulty, OPTS)
    try:
        db.put(b"k", b"v1")
        reader = DbReader.open("db", store, options=DbReaderOptions(checkpoint_lifetime=None))
        reader.close()  # a managed reader leaves wal_id_last_seen at the WAL SST holding v1
        db.put(b"k", b"v2")
        point = faulty.pause("after-l0-commit", "put_if_absent", "db/manifest/*", when="after")
        flush = threading.Thread(target=db.flush_memtable, daemon=True)
        flush.start()
        assert point.wait_reached(10)
        cp = create_checkpoint("db", store)  # pins the L0 SST with v2, replay point not moved
        point.release()
        flush.join(30)
    finally:
        db.close()
    opts = DbReaderOptions(mode=ReaderMode.CHECKPOINT)
    with DbReader.open("db", store, cp.id, opts) as at_checkpoint:
        assert at_checkpoint.get(b"k") == b"v2"
