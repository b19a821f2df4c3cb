"""GC of the SSTs a compaction replaced once the writer has closed.

From a reviewer's note of session 53, "run_gc_once after the writer closed deleted no compacted
SSTs in 20 passes". Reproduced (helper gc54, session 54): the writer's checkpoint (SlateDB RFC
0004, "Writers": no expiry, moved only by the writer's own commits and polls) stayed in the
manifest after a clean ``close()``, pinning the manifest the writer last committed. A compaction
after the close (or one the writer had not polled yet when it closed) made that manifest's L0 SSTs
unreferenced by the latest manifest, but the pinned manifest still named them, so no GC pass
deleted them until another writer opened the database: a space leak of the whole L0 (and every
compacted SST the compaction replaced) for as long as the database stays closed. SlateDB 0.17's
writer keeps no checkpoint in the manifest, and its GC deletes them in the same situation.
"""

from __future__ import annotations

import pytest

from slatedb_core.compactor.compactor import run_compaction_once
from slatedb_core.errors import Fenced
from slatedb_core.gc import run_gc_once
from slatedb_core.layout import compacted_dir
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db
from tests.gc import names
from tests.gc.writer_close_steps import HOUR_OLD, QUIET, later, live_ssts, write_l0s


def test_l0s_a_compaction_replaced_after_the_writer_closed_are_collected(
    store: ObjectStore,
) -> None:
    with Db.open("db", store, QUIET) as db:
        write_l0s(db, 6)
    stats = run_compaction_once("db", store, CompactorOptions(l0_trigger=2))
    assert stats is not None and stats.input_ssts == 6
    assert len(names(store, compacted_dir("db"))) == 7

    run_gc_once("db", store, HOUR_OLD, now=later)

    assert names(store, compacted_dir("db")) == live_ssts(store)
    assert len(live_ssts(store)) == 1
    with Db.open("db", store, QUIET) as db:
        assert [db.get(f"k{i}".encode()) for i in range(6)] == [f"v{i}".encode() for i in range(6)]


def test_ssts_a_compaction_replaced_before_the_writer_saw_it_are_collected(
    store: ObjectStore,
) -> None:
    with Db.open("db", store, QUIET) as db:
        write_l0s(db, 4)
        assert run_compaction_once("db", store, CompactorOptions(l0_trigger=2)) is not None
        db.put(b"after", b"compaction")  # in the WAL only: close flushes the WAL, not L0
    run_gc_once("db", store, HOUR_OLD, now=later)

    assert names(store, compacted_dir("db")) == live_ssts(store)
    with Db.open("db", store, QUIET) as db:
        assert db.get(b"k3") == b"v3" and db.get(b"after") == b"compaction"


def test_a_writer_holds_its_checkpoint_while_open_and_drops_it_on_a_clean_close(
    store: ObjectStore,
) -> None:
    ms = ManifestStore(store, "db")
    with Db.open("db", store, QUIET) as db:
        write_l0s(db, 2)
        mine = [c for c in ms.read_latest().manifest.checkpoints if c.writer_epoch is not None]
        assert [c.writer_epoch for c in mine] == [db.writer_epoch]
    assert [c for c in ms.read_latest().manifest.checkpoints if c.writer_epoch is not None] == []


def test_a_fenced_writer_closing_leaves_the_new_writers_checkpoint(store: ObjectStore) -> None:
    ms = ManifestStore(store, "db")
    old = Db.open("db", store, QUIET)
    write_l0s(old, 1)
    with Db.open("db", store, QUIET) as new:
        with pytest.raises(Fenced):
            old.put(b"late", b"write")
        with pytest.raises(Fenced):
            old.close()
        (cp,) = [c for c in ms.read_latest().manifest.checkpoints if c.writer_epoch is not None]
        assert cp.writer_epoch == new.writer_epoch


def test_closing_a_writer_of_a_destroyed_database_writes_no_manifest(store: ObjectStore) -> None:
    ms = ManifestStore(store, "db")
    db = Db.open("db", store, QUIET)
    write_l0s(db, 1)
    destroy("db", store, soft=True)
    latest = ms.read_latest().id
    try:
        db.close()
    except Exception:  # the soft destroy fenced it (RFC 0004, "Deleting a Database")
        pass
    assert ms.read_latest().id == latest
