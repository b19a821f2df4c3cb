"""Db destroy (SlateDB RFC 0004, "Deleting a Database"): soft and hard, and what GC does afterwards."""

from __future__ import annotations

import contextlib
import json
import time
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from slatedb_core.checkpoints import create_checkpoint, delete_checkpoint
from slatedb_core.cli.destroy import register
from slatedb_core.errors import (
    DatabaseDestroyed,
    DatabaseNotFound,
    Fenced,
    InvalidDeletion,
    SlateDBError,
)
from slatedb_core.gc import run_gc_once
from slatedb_core.lifecycle.clone import create_clone
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.meta.boundary import TOMBSTONE, ULID_MS_TOMBSTONE
from slatedb_core.options import CheckpointOptions, DbOptions, GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db
from tests.cli.cli_steps import group_with

FAST = DbOptions(
    flush_interval=timedelta(milliseconds=10), manifest_poll_interval=timedelta(milliseconds=100)
)
GRACE0 = GarbageCollectorOptions(min_age=timedelta(0), db_delete_grace=timedelta(0))
GRACE_DAY = GarbageCollectorOptions(min_age=timedelta(0), db_delete_grace=timedelta(days=1))


def objects(store: ObjectStore, prefix: str = "") -> dict[str, int]:
    return {m.path: m.size for m in store.list(prefix)}


def assert_tombstone(store: ObjectStore, path: str) -> None:
    """Only the tombstone is left: the four boundary files, moved past every id (the WAL's
    keeps its lease, docs/gc-and-boundaries.md "The boundary lease")."""
    left = {m.path: store.get(m.path).data for m in store.list(path + "/")}
    wal = left.get(f"{path}/gc/wal.boundary", b"")
    assert wal.split(b" ")[0] == str(TOMBSTONE).encode() and len(wal.split(b" ")) == 2
    left[f"{path}/gc/wal.boundary"] = wal.split(b" ")[0]
    assert left == {
        f"{path}/gc/manifest.boundary": str(TOMBSTONE).encode(),
        f"{path}/gc/compactions.boundary": str(TOMBSTONE).encode(),
        f"{path}/gc/wal.boundary": str(TOMBSTONE).encode(),
        f"{path}/gc/compacted.boundary": str(ULID_MS_TOMBSTONE).encode(),
    }


def outside(store: ObjectStore, path: str) -> dict[str, int]:
    return {p: s for p, s in objects(store).items() if not p.startswith(path + "/")}


def make_db(store: ObjectStore, path: str, n: int = 5, tag: str = "v") -> None:
    with Db.open(path, store, FAST) as db:
        for i in range(n):
            db.put(f"k{i}".encode(), f"{tag}{i}".encode())
        db.flush_memtable()
        db.put(b"wal-only", tag.encode())  # durable only in the WAL


def latest(store: ObjectStore, path: str) -> ManifestStore:
    return ManifestStore(store, path)


def test_soft_destroy_fences_a_live_writer_and_marks_the_db(store: ObjectStore) -> None:
    db = Db.open("db", store, FAST)
    try:
        db.put(b"a", b"1")
        assert any(c.writer_epoch is not None for c in db.manifest.manifest.checkpoints)

        destroy("db", store, soft=True)

        with pytest.raises(Fenced):
            db.put(b"b", b"2")
    finally:
        with contextlib.suppress(SlateDBError):
            db.close()
    m = latest(store, "db").read_latest().manifest
    assert m.destroyed_at_s is not None and abs(m.destroyed_at_s - time.time()) < 60
    assert all(c.writer_epoch is None for c in m.checkpoints)
    with pytest.raises(DatabaseDestroyed):
        Db.open("db", store, FAST)
    with pytest.raises(DatabaseDestroyed):
        create_checkpoint("db", store)
    with pytest.raises(DatabaseDestroyed):
        create_clone("clone", "db", store)


def test_soft_destroy_is_idempotent_and_needs_a_db(store: ObjectStore) -> None:
    make_db(store, "db")
    destroy("db", store)
    ms = latest(store, "db")
    before = ms.read_latest()
    destroy("db", store)
    assert ms.read_latest() == before
    for soft in (True, False):
        with pytest.raises(DatabaseNotFound):
            destroy("nothing", store, soft=soft)


def test_gc_waits_for_grace_and_checkpoints_then_deletes_everything(store: ObjectStore) -> None:
    make_db(store, "db")
    make_db(store, "dbx")  # a sibling whose name extends ours: never touched
    create_checkpoint("db", store, CheckpointOptions(lifetime=timedelta(hours=1)))
    destroy("db", store)
    others = outside(store, "db")

    stats = run_gc_once("db", store, GRACE_DAY)
    assert stats.destroyed and not stats.database_deleted and objects(store, "db/")
    stats = run_gc_once("db", store, GRACE0)  # grace over, but the checkpoint is active
    assert stats.destroyed and not stats.database_deleted and objects(store, "db/")
    # expired: no longer blocks
    later = time.time() + 2 * 3600
    stats = run_gc_once("db", store, GRACE0, now=lambda: later)
    assert stats.database_deleted and stats.database_objects.deleted > 0
    assert_tombstone(store, "db")
    assert outside(store, "db") == others
    with Db.open("dbx", store, FAST) as db:
        assert db.get(b"k1") == b"v1" and db.get(b"wal-only") == b"v"
    assert run_gc_once("db", store, GRACE0).latest_manifest_id is None  # gone: nothing to do


def test_gc_deletes_after_the_checkpoint_is_deleted(store: ObjectStore) -> None:
    make_db(store, "db")
    cp = create_checkpoint("db", store)
    destroy("db", store)
    assert not run_gc_once("db", store, GRACE0).database_deleted
    delete_checkpoint("db", store, cp.id)  # allowed on a destroyed database
    assert run_gc_once("db", store, GRACE0).database_deleted
    assert_tombstone(store, "db")


def test_hard_destroy_is_refused_with_an_active_checkpoint(store: ObjectStore) -> None:
    make_db(store, "db")
    make_db(store, "db2")
    cp = create_checkpoint("db", store)
    before = objects(store, "db/")
    with pytest.raises(InvalidDeletion):
        destroy("db", store, soft=False)
    assert objects(store, "db/") == before
    assert latest(store, "db").read_latest().manifest.destroyed_at_s is None

    delete_checkpoint("db", store, cp.id)
    others = outside(store, "db")
    destroy("db", store, soft=False)  # the (never expiring) writer checkpoint does not block
    assert_tombstone(store, "db")
    assert outside(store, "db") == others
    with pytest.raises(DatabaseDestroyed):  # the tombstone remembers (item 1 of RELIABILITY.md)
        create_checkpoint("db", store)
    with pytest.raises((DatabaseNotFound, DatabaseDestroyed)):
        create_clone("c", "db", store)


def test_hard_destroy_after_soft_destroy_finishes_the_job(store: ObjectStore) -> None:
    make_db(store, "db")
    destroy("db", store)
    destroy("db", store, soft=False)
    assert_tombstone(store, "db")


def test_destroying_a_parent_keeps_its_clones_working(store: ObjectStore) -> None:
    make_db(store, "parent", tag="p")
    create_clone("clone", "parent", store)
    with Db.open("clone", store, FAST) as db:
        db.put(b"own", b"c")
    others = outside(store, "parent")

    with pytest.raises(InvalidDeletion):  # the clone's final checkpoint pins the parent
        destroy("parent", store, soft=False)
    destroy("parent", store)
    stats = run_gc_once("parent", store, GRACE0, now=lambda: time.time() + 3600)
    assert stats.destroyed and not stats.database_deleted

    assert outside(store, "parent") == others
    with Db.open("clone", store, FAST) as db:
        assert [db.get(f"k{i}".encode()) for i in range(5)] == [f"p{i}".encode() for i in range(5)]
        assert db.get(b"wal-only") == b"p" and db.get(b"own") == b"c"
    assert not run_gc_once("clone", store, GRACE0).destroyed


@pytest.mark.parametrize("soft", [True, False])
def test_destroying_a_clone_releases_its_final_checkpoint(store: ObjectStore, soft: bool) -> None:
    make_db(store, "parent")
    clone = create_clone("clone", "parent", store)
    (entry,) = clone.external_dbs
    assert entry.final_checkpoint_id is not None
    pm = latest(store, "parent")
    assert pm.read_latest().manifest.checkpoint(entry.final_checkpoint_id) is not None

    destroy("clone", store, soft=soft)
    if soft:
        # still pinned until GC deletes the clone
        assert pm.read_latest().manifest.checkpoint(entry.final_checkpoint_id) is not None
        stats = run_gc_once("clone", store, GRACE0)
        assert stats.database_deleted and stats.external_checkpoints_released == 1
    assert_tombstone(store, "clone")
    parent = pm.read_latest().manifest
    assert parent.checkpoint(entry.final_checkpoint_id) is None
    # nothing of the clone pins the parent any more (the clone's ephemeral source checkpoint
    # was created with a lifetime): a hard destroy of the parent goes through after it expires
    with Db.open("parent", store, FAST) as db:
        assert db.get(b"k0") == b"v0"
    destroy("parent", store, soft=False, now=lambda: time.time() + 3600)
    assert_tombstone(store, "parent")


# ---- CLI ------------------------------------------------------------------------------------


GROUP = group_with(register)


def run_cli(url: str, *args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(GROUP, ["--url", url, "--path", "db", *args])
    return r.exit_code, r.stdout, r.stderr


def test_cli_destroy(tmp_path: Path) -> None:
    url = (tmp_path / "lake").as_uri()
    store = open_store(url)
    make_db(store, "db")
    assert run_cli(url, "destroy", "--hard")[0] == 2  # no --yes and no terminal
    assert run_cli(url, "destroy", "--yes")[0] == 2  # neither mode
    assert run_cli(url, "destroy", "--soft", "--hard", "--yes")[0] == 2
    assert latest(store, "db").read_latest().manifest.destroyed_at_s is None

    cp = create_checkpoint("db", store)
    code, _, err = run_cli(url, "destroy", "--hard", "--yes")
    assert code == 1 and "InvalidDeletion" in err

    code, out, _ = run_cli(url, "destroy", "--soft", "--yes", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["mode"] == "soft" and isinstance(doc["destroyed_at_s"], int)

    delete_checkpoint("db", store, cp.id)
    code, out, _ = run_cli(url, "destroy", "--hard", "--yes")
    assert code == 0 and "hard" in out
    assert_tombstone(store, "db")
    code, _, err = run_cli(url, "destroy", "--soft", "--yes")
    assert code == 1 and "DatabaseDeleted" in err
