"""A manifest commit that GC passed before its boundary check is settled once (docs/gc-and-boundaries.md):
manifests record their parent's nonce, and every change recognises its own landed effect when it is
re-applied (SSTs, checkpoints, compactions, flushes, clones built on it)."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

import pytest

from slatedb_core.checkpoints import create_checkpoint, delete_checkpoint, list_checkpoints
from slatedb_core.errors import (
    InvalidArgument,
)
from slatedb_core.gc import run_gc_once
from slatedb_core.layout import sst_path
from slatedb_core.lifecycle.clone import create_clone
from slatedb_core.manifest.codec import decode_stamped_manifest, encode_manifest
from slatedb_core.manifest.model import Checkpoint, Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CheckpointOptions, DbOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.testing import FaultyStore
from slatedb_core.writer.db import Db
from tests.gc import ZERO, Background, commit, new_db

QUIET = DbOptions(
    flush_interval=timedelta(milliseconds=5),
    manifest_poll_interval=timedelta(hours=1),  # a writer that never learns by polling
    compactor=None,
)


def _ssts_exist(store: ObjectStore, m: Manifest, path: str = "db") -> list[str]:
    """The SSTs ``m`` names that are missing."""
    return [str(s.id) for s in m.ssts if not store.exists(sst_path(path, s.id))]


def _plus_100(m: Manifest) -> Manifest:
    return dataclasses.replace(m, last_l0_seq=m.last_l0_seq + 100)


# ---- C (medium): a compaction passed by GC before its boundary check is reported failed ------
def _db_with_l0(store: ObjectStore, n: int = 4) -> None:
    with Db.open("db", store, QUIET) as db:
        for i in range(n):
            db.put(b"k%d" % i, b"v")
            db.flush_memtable()


# ---- item 2: no manifest ever names an SST GC may have deleted ------------------------------
def test_gc_at_min_age_0_between_upload_and_commit_never_leaves_a_dangling_checkpoint(
    store: ObjectStore,
) -> None:
    """Found by the outside review, RELIABILITY.md findings 1-6 and 11 (was test_review_protocol.py)."""
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
    """Found by the outside review, RELIABILITY.md findings 1-6 and 11 (was test_review_protocol.py)."""
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
    """Found by the outside review, RELIABILITY.md findings 1-6 and 11 (was test_review_protocol.py)."""
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
    """Found by the outside review, RELIABILITY.md findings 1-6 and 11 (was test_review_protocol.py)."""
    cp = Checkpoint(uuid.uuid4(), 1, 0)
    with pytest.raises(InvalidArgument):
        encode_manifest(Manifest(checkpoints=(cp, dataclasses.replace(cp, manifest_id=2))))


# ---- B (medium): a commit built on a base without a nonce records no parent -----------------
def test_a_commit_passed_by_gc_is_not_reapplied_when_a_clone_built_on_it(mem: ObjectStore) -> None:
    """clone.same_format_store returns StoredManifest(id, m) without the nonce, so the clone's
    ephemeral checkpoint commit in the parent records no parent. A committer whose create GC
    passed before its boundary check then reads the next manifest, finds no parent, takes its
    committed write for void and applies its change a second time (here +100 twice).

    Found by the adversarial review of 1351034, 0fe1a63, d6f00c7 (was test_adversary_findings.py)."""
    with Db.open("db", mem, QUIET) as db:
        db.put(b"k", b"v")
        db.flush_memtable()
    ms = ManifestStore(mem, "db")
    before = ms.read_latest().manifest.last_l0_seq
    faulty = FaultyStore(mem)
    checking = faulty.pause("check", "put_if_absent", "db/manifest/*", when="after")
    committer = Background(lambda: ManifestStore(faulty, "db").update(_plus_100))
    assert checking.wait_reached()  # created, boundary not yet checked
    create_clone("c", "db", mem)  # commits its checkpoints on top of it
    run_gc_once("db", mem, ZERO)  # moves the manifest boundary over the committer's id
    checking.release()
    committer.join()
    assert committer.error is None
    parents = [
        decode_stamped_manifest(ms.seq.read(e.id), name="m")[1].parent for e in ms.list()[1:]
    ]
    assert ms.read_latest().manifest.last_l0_seq == before + 100, "the change was applied twice"
    assert None not in parents, "a manifest above the first records no parent nonce"


def test_a_committed_compaction_passed_by_gc_is_not_reported_failed(mem: ObjectStore) -> None:
    """The docs say every change of the engine recognises its own effect when it is re-applied
    after the evidence (the next manifest) was collected too. apply_compaction does not: on the
    latest manifest its sources are gone (it removed them itself), so the committed compaction
    raises CompactionSourceChanged, is counted failed and its record is closed as failed.

    Found by the adversarial review of 1351034, 0fe1a63, d6f00c7 (was test_adversary_findings.py)."""
    from slatedb_core.compactor.compactor import run_compaction_once
    from tests.gc import commit

    _db_with_l0(mem)
    ms = ManifestStore(mem, "db")
    top = ms.read_latest().id
    faulty = FaultyStore(mem)
    # top + 1: the compactor's epoch bump; top + 2: the compaction's commit
    checking = faulty.pause("check", "put_if_absent", ms.seq.path(top + 2), when="after")
    compactor = Background(lambda: run_compaction_once("db", faulty))
    assert checking.wait_reached()
    commit(ms, 2)  # two more commits: top + 3 (built on the compaction) and top + 4
    run_gc_once("db", mem, ZERO)  # boundary to top + 3; top + 2 and top + 3 are collected
    checking.release()
    stats = compactor.join()
    assert compactor.error is None, compactor.error
    latest = ms.read_latest().manifest
    assert latest.l0 == () and len(latest.compacted) == 1  # the compaction did commit
    assert stats is not None and stats.compactions == 1 and stats.failed == 0, stats


# ---- E (low): a memtable flush passed by GC is applied a second time after a compaction -----
def test_a_flush_passed_by_gc_is_not_applied_again_after_its_sst_was_compacted(
    mem: ObjectStore,
) -> None:
    """l0_flush_change recognises an earlier attempt only by its SST ids (NewSsts.committed_in).
    The flush commits (manifest top + 1), a compaction moves its SST into a sorted run, GC
    collects the next manifests (no parent evidence left): the flush re-applies, re-homes the
    same rows and puts them in L0 a second time, in front of the run that already holds them.

    Found by the adversarial review of 1351034, 0fe1a63, d6f00c7 (was test_adversary_findings.py)."""
    from slatedb_core.compactor.compactor import run_compaction_once
    from tests.gc import commit

    faulty = FaultyStore(mem)
    db = Db.open("db", faulty, QUIET)
    for i in range(3):
        db.put(b"k%d" % i, b"v")
        db.flush_memtable()
    ms = ManifestStore(mem, "db")
    top = ms.read_latest().id
    db.put(b"last", b"v")
    db.flush()
    checking = faulty.pause("check", "put_if_absent", ms.seq.path(top + 1), when="after")
    flush = Background(db.flush_memtable)
    assert checking.wait_reached()  # the flush's commit top + 1 is created, not yet checked
    assert run_compaction_once("db", mem) is not None  # 4 L0 SSTs -> one sorted run
    commit(ms, 1)
    run_gc_once("db", mem, ZERO)  # collects top + 2 (the evidence) and more
    checking.release()
    flush.join()
    assert flush.error is None
    latest = ms.read_latest().manifest
    db.close()
    assert latest.l0 == (), f"the flushed rows are named twice: {len(latest.l0)} L0 view(s) "
