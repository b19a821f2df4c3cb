"""Review findings 1-6 and 11 (RELIABILITY.md): the holes an outside review found in destroy, GC
at ``min_age`` 0, commits behind the boundary, nested databases, recovery, and manifest formats.
Each test failed on b693a53 (see RELIABILITY.md)."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

import pytest

from slatedb_core.checkpoints import create_checkpoint, delete_checkpoint, list_checkpoints
from slatedb_core.errors import (
    CorruptionError,
    DatabaseDestroyed,
    Fenced,
    InvalidArgument,
    SlateDBError,
)
from slatedb_core.gc import run_gc_once
from slatedb_core.layout import sst_path
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.manifest.codec import encode_manifest
from slatedb_core.manifest.model import Checkpoint, Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CheckpointOptions, DbOptions, GarbageCollectorOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.faults import FaultyStore
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db
from tests.gc import ZERO, Background, commit, new_db

GRACE0 = GarbageCollectorOptions(min_age=timedelta(0), db_delete_grace=timedelta(0))
QUIET = DbOptions(
    flush_interval=timedelta(milliseconds=5),
    manifest_poll_interval=timedelta(hours=1),  # a writer that never learns by polling
    compactor=None,
)


def _own(store: ObjectStore, path: str) -> list[str]:
    return sorted(m.path for m in store.list(path + "/") if "/gc/" not in m.path)


def _ssts_exist(store: ObjectStore, m: Manifest, path: str = "db") -> list[str]:
    """The SSTs ``m`` names that are missing."""
    return [str(s.id) for s in m.ssts if not store.exists(sst_path(path, s.id))]


# ---- item 1: a stalled writer must not bring a destroyed, collected database back ----------
@pytest.mark.parametrize("soft", [True, False])
def test_a_stalled_writer_cannot_resurrect_a_destroyed_and_collected_database(
    store: ObjectStore, soft: bool
) -> None:
    w = Db.open("db", store, QUIET)
    w.put(b"before", b"1")
    w.flush_memtable()
    destroy("db", store, soft=soft)
    if soft:
        assert run_gc_once("db", store, GRACE0).database_deleted
    assert _own(store, "db") == []

    with pytest.raises((Fenced, DatabaseDestroyed)):
        w.put(b"after", b"2")  # durable: its WAL SST lands in the empty path, then fails
    with pytest.raises(SlateDBError):
        w.flush_memtable()
    with pytest.raises(SlateDBError):
        w.close()
    # nothing came back by itself: no manifest, and the path refuses to become a database
    assert ManifestStore(store, "db").try_read_latest() is None
    with pytest.raises(DatabaseDestroyed):
        Db.open("db", store, QUIET)
    with pytest.raises(DatabaseDestroyed):
        DbReader.open("db", store)
    # a GC pass sweeps what the zombie left; the tombstone stays
    run_gc_once("db", store, GRACE0)
    assert _own(store, "db") == []
    assert ManifestStore(store, "db").is_tombstone()


def test_a_stalled_manifest_commit_after_destroy_and_gc_is_not_reported(
    store: ObjectStore,
) -> None:
    new_db(store)
    commit(ManifestStore(store, "db"), 2)
    faulty = FaultyStore(store)
    stale = ManifestStore(faulty, "db")
    base = stale.read_latest()
    stall = faulty.pause("late", "put_if_absent", "db/manifest/*")
    late = Background(
        lambda: stale.update(lambda m: dataclasses.replace(m, last_l0_seq=9), base=base)
    )
    assert stall.wait_reached()
    destroy("db", store, soft=False)
    stall.release()
    late.join()
    assert isinstance(late.error, DatabaseDestroyed), late.error
    assert ManifestStore(store, "db").try_read_latest() is None


# ---- item 2: no manifest ever names an SST GC may have deleted ------------------------------
def test_gc_at_min_age_0_between_upload_and_commit_never_leaves_a_dangling_checkpoint(
    store: ObjectStore,
) -> None:
    faulty = FaultyStore(store)
    db = Db.open("db", faulty, QUIET)
    db.put(b"k", b"v")
    db.flush()
    upload_done = faulty.pause("before-commit", "put_if_absent", "db/manifest/*")
    flush = Background(db.flush_memtable)
    assert upload_done.wait_reached()  # the L0 SST is uploaded, its commit not yet made
    run_gc_once("db", store, ZERO)  # min_age 0: the SST is old enough and unreferenced
    committed = faulty.pause("after-commit", "put_if_absent", "db/manifest/*", when="after")
    upload_done.release()
    assert committed.wait_reached()
    # a checkpoint taken right after the writer's create, before anything else it may do
    cp = create_checkpoint("db", store, CheckpointOptions(lifetime=timedelta(hours=1)))
    committed.release()
    flush.join()
    assert flush.error is None
    ms = ManifestStore(store, "db")
    pinned = ms.read(cp.manifest_id).manifest
    assert _ssts_exist(store, pinned) == []
    assert _ssts_exist(store, ms.read_latest().manifest) == []
    db.close()
    with DbReader.open("db", store, checkpoint=cp.id) as reader:
        assert reader.get(b"k") == b"v"


# ---- item 3: a commit GC moved the boundary over is settled, never applied twice ------------
def test_a_commit_passed_by_gc_before_its_boundary_check_is_applied_once(
    store: ObjectStore,
) -> None:
    ms = new_db(store)
    top = commit(ms, 2)  # 3
    faulty = FaultyStore(store)
    slow = ManifestStore(faulty, "db")
    checking = faulty.pause("check", "put_if_absent", "db/manifest/*", when="after")

    def plus_100(m: Manifest) -> Manifest:
        return dataclasses.replace(m, last_l0_seq=m.last_l0_seq + 100)

    committer = Background(lambda: slow.update(plus_100))
    assert checking.wait_reached()  # created top + 1, boundary not yet checked
    commit(ms, 1)  # another client builds top + 2 on it
    assert run_gc_once("db", store, ZERO).manifest_boundary == top + 1
    checking.release()
    result = committer.join()
    assert committer.error is None and result is not None and result.id == top + 1
    latest = ms.read_latest()
    assert latest.id == top + 2  # nothing re-applied on top
    assert latest.manifest.last_l0_seq == 2 + 100 + 1


def test_delete_checkpoint_passed_by_gc_reports_success(store: ObjectStore) -> None:
    ms = new_db(store)
    cp = create_checkpoint("db", store, CheckpointOptions(lifetime=timedelta(hours=1)))
    faulty = FaultyStore(store)
    checking = faulty.pause("check", "put_if_absent", "db/manifest/*", when="after")
    deleter = Background(lambda: delete_checkpoint("db", faulty, cp.id))
    assert checking.wait_reached()
    commit(ms, 2)  # the evidence (the next manifest) gets collected too
    run_gc_once("db", store, ZERO)
    checking.release()
    deleter.join()
    assert deleter.error is None, deleter.error
    assert list_checkpoints("db", store) == []


def test_the_codec_refuses_a_checkpoint_id_twice() -> None:
    cp = Checkpoint(uuid.uuid4(), 1, 0)
    with pytest.raises(InvalidArgument):
        encode_manifest(Manifest(checkpoints=(cp, dataclasses.replace(cp, manifest_id=2))))


# ---- item 4: destroying a database leaves nested databases alone ----------------------------
@pytest.mark.parametrize("soft", [True, False])
def test_destroying_a_database_leaves_nested_databases_alone(
    store: ObjectStore, soft: bool
) -> None:
    for path in ("a", "a/b", "a/wal/x"):
        with Db.open(path, store, QUIET) as db:
            db.put(b"k", path.encode())
            db.flush_memtable()
            db.put(b"wal-only", path.encode())
    destroy("a", store, soft=soft)
    if soft:
        assert run_gc_once("a", store, GRACE0).database_deleted
    for path in ("a/b", "a/wal/x"):
        with Db.open(path, store, QUIET) as db:
            assert db.get(b"k") == path.encode() and db.get(b"wal-only") == path.encode()
    with pytest.raises(DatabaseDestroyed):
        Db.open("a", store, QUIET)


# ---- items 5 and 6: a writer's open neither drops nor copies damaged L0 SSTs ----------------
def _l0_db_behind_boundary(store: ObjectStore) -> str:
    """A database whose only L0 SST holds ``k``=new over WAL-free older data, behind the
    compacted boundary; returns the SST's path."""
    with Db.open("db", store, QUIET) as db:
        db.put(b"k", b"old")
        db.flush_memtable()
        db.put(b"k", b"new")
        db.flush_memtable()
    run_gc_once("db", store, ZERO)  # the boundary now covers both SSTs
    m = ManifestStore(store, "db").read_latest().manifest
    return sst_path("db", m.l0[0].sst_id)


def test_a_missing_l0_sst_is_a_typed_error_not_an_older_value(store: ObjectStore) -> None:
    newest = _l0_db_behind_boundary(store)
    store.delete(newest)
    try:
        db = Db.open("db", store, QUIET)
    except SlateDBError as e:
        assert newest.rsplit("/", 1)[1].split(".")[0] in str(e)
        return
    with db:
        with pytest.raises(SlateDBError) as err:
            db.get(b"k")
        assert newest.rsplit("/", 1)[1].split(".")[0] in str(err.value)
    assert not store.exists(newest)


def test_a_corrupted_l0_sst_is_reported_and_never_copied(store: ObjectStore) -> None:
    newest = _l0_db_behind_boundary(store)
    good = store.get(newest).data
    store.put(newest, good[:-9] + bytes(9))
    before = _own(store, "db")
    try:
        with Db.open("db", store, QUIET) as db:
            with pytest.raises(CorruptionError):
                db.get(b"k")
    except CorruptionError:
        pass
    assert [p for p in _own(store, "db") if "/compacted/" in p] == [
        p for p in before if "/compacted/" in p
    ]
    store.put(newest, good)  # restoring the original repairs the database
    with Db.open("db", store, QUIET) as db:
        assert db.get(b"k") == b"new"


def test_a_plain_open_rewrites_no_l0_sst(store: ObjectStore) -> None:
    _l0_db_behind_boundary(store)
    before = [p for p in _own(store, "db") if "/compacted/" in p]
    with Db.open("db", store, QUIET):
        pass
    assert [p for p in _own(store, "db") if "/compacted/" in p] == before
