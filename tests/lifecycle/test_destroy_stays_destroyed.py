"""A destroyed database stays destroyed (docs/clones-and-destroy.md): a stalled writer, manifest
commit or clone creator cannot bring a destroyed and collected path back to life, a new database
at such a path serves none of what was there, and destroy leaves nested databases alone."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from slatedb_core.errors import (
    DatabaseDestroyed,
    Fenced,
    SlateDBError,
)
from slatedb_core.gc import run_gc_once
from slatedb_core.lifecycle.clone import create_clone
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.lifecycle.union import UnionSource, create_union
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions, GarbageCollectorOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.testing import FaultyStore
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


# ---- F2 (medium): a stalled clone/union creator pins its parent forever after a hard destroy ---
def _create(kind: str, store: ObjectStore) -> object:
    if kind == "clone":
        return create_clone("c", "p", store)
    return create_union("c", [UnionSource("p")], store)


# ---- item 1: a stalled writer must not bring a destroyed, collected database back ----------
@pytest.mark.parametrize("soft", [True, False])
def test_a_stalled_writer_cannot_resurrect_a_destroyed_and_collected_database(
    store: ObjectStore, soft: bool
) -> None:
    """Found by the outside review, RELIABILITY.md findings 1-6 and 11 (was test_review_protocol.py)."""
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
    """Found by the outside review, RELIABILITY.md findings 1-6 and 11 (was test_review_protocol.py)."""
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


# ---- item 4: destroying a database leaves nested databases alone ----------------------------
@pytest.mark.parametrize("soft", [True, False])
def test_destroying_a_database_leaves_nested_databases_alone(
    store: ObjectStore, soft: bool
) -> None:
    """Found by the outside review, RELIABILITY.md findings 1-6 and 11 (was test_review_protocol.py)."""
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


# ---- A (high): hard destroy of an unfinished clone, its stalled creator resurrects it -------
def test_a_stalled_clone_creator_cannot_resurrect_a_hard_destroyed_unfinished_clone(
    mem: ObjectStore,
) -> None:
    """d6f00c7: an uninitialized database gets no tombstone and its boundary files are deleted.
    A create_clone stalled inside mark_initialized (base read, create not yet sent) then creates
    manifest 2 in the empty path, passes the (missing = 0) boundary check and reports the clone
    created: a destroyed database is back, initialized, while destroy already released its final
    checkpoint in the parent, so the parent's GC later deletes the SSTs the clone reads.

    Found by the adversarial review of 1351034, 0fe1a63, d6f00c7 (was test_adversary_findings.py)."""
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
    replays them: it serves the parent's data, never written to it.

    Found by the adversarial review of 1351034, 0fe1a63, d6f00c7 (was test_adversary_findings.py)."""
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


# ---- D (low): a clone of a destroyed and collected parent reports DatabaseNotFound ----------
def test_a_clone_of_a_tombstoned_parent_raises_database_destroyed(mem: ObjectStore) -> None:
    """docs/clones-and-destroy.md: "Db.open, DbReader.open, checkpoints and clones of the path
    raise DatabaseDestroyed". clone.same_format_store reads the parent without the tombstone
    check (ManifestStore.raise_missing), so create_clone says DatabaseNotFound.

    Found by the adversarial review of 1351034, 0fe1a63, d6f00c7 (was test_adversary_findings.py)."""

    with Db.open("p", mem, QUIET) as db:
        db.put(b"k", b"v")
    destroy("p", mem, soft=False)
    with pytest.raises(DatabaseDestroyed):
        create_clone("c", "p", mem)


@pytest.mark.parametrize("kind", ["clone", "union"])
def test_f2_a_destroyed_unfinished_clone_leaves_no_final_checkpoint_in_its_parent(
    mem: ObjectStore, kind: str
) -> None:
    """A create_clone (or create_union) stalled right after manifest 1, before its origin
    record: a hard destroy of the unfinished database c tombstones it and releases what it
    holds in p. The creator then resumes: it writes c/clone.origin into the tombstoned path
    (no boundary check; GC sweeps it later) and commits the never-expiring final checkpoint
    "clone:c" in the parent (ensure_final_checkpoints never looks at the destination's
    tombstone) before mark_initialized fails with DatabaseDeleted. Nothing ever deletes that
    checkpoint: c has no manifest (its GC has nothing to detach), so p's SSTs stay pinned for
    good and p can never be hard-destroyed (InvalidDeletion: an active checkpoint).

    Found by the second adversarial review, 75d9b85..c37bcdc (was test_adversary_findings_2.py)."""
    with Db.open("p", mem, QUIET) as db:
        db.put(b"k", b"v")
        db.flush_memtable()
    faulty = FaultyStore(mem)
    stall = faulty.pause("origin", "put_if_absent", "c/clone.origin")
    creator = Background(lambda: _create(kind, faulty))
    assert stall.wait_reached()  # manifest 1 of c exists, nothing else yet
    destroy("c", mem, soft=False)
    stall.release()
    creator.join()
    assert creator.error is not None  # the creator does fail (DatabaseDeleted)
    run_gc_once("c", mem, ZERO)
    run_gc_once("p", mem, ZERO)
    never_expiring = [
        c
        for c in ManifestStore(mem, "p").read_latest().manifest.checkpoints
        if c.expire_time_s is None and c.writer_epoch is None
    ]
    assert never_expiring == [], f"orphaned final checkpoint(s) in p: {never_expiring}"
