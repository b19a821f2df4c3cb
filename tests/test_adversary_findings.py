"""Adversarial review of the RELIABILITY.md commits (1351034, 0fe1a63, d6f00c7): each test is a
deterministic scenario (FaultyStore pause points) that failed on the code it was written against
and passes since the fixes that followed (a tombstone for every destroyed database, bases that
carry their nonce, compactions and flushes that recognise their own landed commit)."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

import pytest

from slatedb_core.errors import DatabaseDestroyed
from slatedb_core.gc import run_gc_once
from slatedb_core.lifecycle.clone import create_clone
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.manifest.codec import decode_stamped_manifest
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions
from slatedb_core.store.faults import FaultyStore
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db
from tests.gc import ZERO, Background

QUIET = DbOptions(
    flush_interval=timedelta(milliseconds=5),
    manifest_poll_interval=timedelta(hours=1),
    compactor=None,
)


@pytest.fixture
def mem() -> ObjectStore:
    return open_store(f"memory://adversary-{uuid.uuid4().hex}")


def _plus_100(m: Manifest) -> Manifest:
    return dataclasses.replace(m, last_l0_seq=m.last_l0_seq + 100)


# ---- A (high): hard destroy of an unfinished clone, its stalled creator resurrects it -------
def test_a_stalled_clone_creator_cannot_resurrect_a_hard_destroyed_unfinished_clone(
    mem: ObjectStore,
) -> None:
    """d6f00c7: an uninitialized database gets no tombstone and its boundary files are deleted.
    A create_clone stalled inside mark_initialized (base read, create not yet sent) then creates
    manifest 2 in the empty path, passes the (missing = 0) boundary check and reports the clone
    created: a destroyed database is back, initialized, while destroy already released its final
    checkpoint in the parent, so the parent's GC later deletes the SSTs the clone reads."""
    with Db.open("p", mem, QUIET) as db:
        db.put(b"k", b"v")
        db.flush_memtable()
    faulty = FaultyStore(mem)
    stall = faulty.pause("init", "put_if_absent", "c/manifest/00000000000000000002.manifest")
    creator = Background(lambda: create_clone("c", "p", faulty))
    assert stall.wait_reached()  # the clone's last step: base read, create not yet sent
    destroy("c", mem, soft=False)
    stall.release()
    creator.join()
    latest = ManifestStore(mem, "c").try_read_latest()
    alive = latest is not None and latest.manifest.destroyed_at_s is None
    assert creator.error is not None and not alive, (
        f"create_clone reported success ({creator.error!r}) and c is a live database "
        f"({latest and latest.manifest.initialized}) after a successful hard destroy"
    )


def test_a_new_database_at_a_destroyed_unfinished_clone_path_serves_none_of_its_parent(
    mem: ObjectStore,
) -> None:
    """Same hole, other step: a create_clone stalled before copying the parent's WAL tail copies
    it into the empty path after the hard destroy (WAL copies are create-if-absent with no
    boundary check, and the boundaries are gone), then fails. The strays stay (GC sees no
    manifest and no tombstone, so it sweeps nothing) and a new database opened at the path
    replays them: it serves the parent's data, never written to it."""
    parent = Db.open("p", mem, QUIET)
    parent.put(b"secret", b"from-p")
    parent.flush()  # durable in p's WAL; p's writer stays open (no clean close)
    faulty = FaultyStore(mem)
    stall = faulty.pause("wal", "put_if_absent", "c/wal/*")
    creator = Background(lambda: create_clone("c", "p", faulty))
    assert stall.wait_reached()
    destroy("c", mem, soft=False)
    stall.release()
    creator.join()
    assert creator.error is not None  # the stalled clone fails (DatabaseNotFound)
    run_gc_once("c", mem, ZERO)  # sweeps what the stalled creator copied into the path
    assert [o.path for o in mem.list("c/") if "/gc/" not in o.path] == []
    with pytest.raises(DatabaseDestroyed):  # the tombstone: no new database by itself
        Db.open("c", mem, QUIET)
    parent.close()


# ---- B (medium): a commit built on a base without a nonce records no parent -----------------
def test_a_commit_passed_by_gc_is_not_reapplied_when_a_clone_built_on_it(mem: ObjectStore) -> None:
    """clone.same_format_store returns StoredManifest(id, m) without the nonce, so the clone's
    ephemeral checkpoint commit in the parent records no parent. A committer whose create GC
    passed before its boundary check then reads the next manifest, finds no parent, takes its
    committed write for void and applies its change a second time (here +100 twice)."""
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


# ---- C (medium): a compaction passed by GC before its boundary check is reported failed ------
def _db_with_l0(store: ObjectStore, n: int = 4) -> None:
    with Db.open("db", store, QUIET) as db:
        for i in range(n):
            db.put(b"k%d" % i, b"v")
            db.flush_memtable()


def test_a_committed_compaction_passed_by_gc_is_not_reported_failed(mem: ObjectStore) -> None:
    """The docs say every change of the engine recognises its own effect when it is re-applied
    after the evidence (the next manifest) was collected too. apply_compaction does not: on the
    latest manifest its sources are gone (it removed them itself), so the committed compaction
    raises CompactionSourceChanged, is counted failed and its record is closed as failed."""
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


# ---- D (low): a clone of a destroyed and collected parent reports DatabaseNotFound ----------
def test_a_clone_of_a_tombstoned_parent_raises_database_destroyed(mem: ObjectStore) -> None:
    """docs/clones-and-destroy.md: "Db.open, DbReader.open, checkpoints and clones of the path
    raise DatabaseDestroyed". clone.same_format_store reads the parent without the tombstone
    check (ManifestStore.raise_missing), so create_clone says DatabaseNotFound."""

    with Db.open("p", mem, QUIET) as db:
        db.put(b"k", b"v")
    destroy("p", mem, soft=False)
    with pytest.raises(DatabaseDestroyed):
        create_clone("c", "p", mem)


# ---- E (low): a memtable flush passed by GC is applied a second time after a compaction -----
def test_a_flush_passed_by_gc_is_not_applied_again_after_its_sst_was_compacted(
    mem: ObjectStore,
) -> None:
    """l0_flush_change recognises an earlier attempt only by its SST ids (NewSsts.committed_in).
    The flush commits (manifest top + 1), a compaction moves its SST into a sorted run, GC
    collects the next manifests (no parent evidence left): the flush re-applies, re-homes the
    same rows and puts them in L0 a second time, in front of the run that already holds them."""
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
