"""GC detaching a clone from its parent once no manifest it keeps references the parent's SSTs
(SlateDB RFC 0004 "Garbage Collector", step 8)."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

from slatedb_core.checkpoints import delete_checkpoint
from slatedb_core.compactor import run_compaction_once
from slatedb_core.gc import run_gc_once
from slatedb_core.lifecycle.clone import create_clone
from slatedb_core.manifest.model import ExternalDb, Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions, DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db
from tests.gc import ZERO, add_checkpoint, new_db, put_sst

FAST = DbOptions(
    flush_interval=timedelta(milliseconds=10), manifest_poll_interval=timedelta(milliseconds=100)
)


def test_gc_detaches_a_clone_once_compaction_dropped_the_parents_ssts(
    store: ObjectStore,
) -> None:
    with Db.open("parent", store, FAST) as db:
        for i in range(5):
            db.put(f"old{i}".encode(), b"p")
        db.flush_memtable()
    create_clone("clone", "parent", store)
    cms, pms = ManifestStore(store, "clone"), ManifestStore(store, "parent")
    (entry,) = cms.read_latest().manifest.external_dbs
    assert entry.sst_ids and entry.final_checkpoint_id is not None

    stats = run_gc_once("clone", store, ZERO)  # still referenced: nothing to detach
    assert stats.detached == () and cms.read_latest().manifest.external_dbs == (entry,)

    with Db.open("clone", store, FAST) as db:
        for i in range(5):
            db.delete(f"old{i}".encode())
        db.put(b"new", b"c")
        db.flush_memtable()
    assert run_compaction_once("clone", store, CompactorOptions(l0_trigger=1)) is not None
    (after,) = cms.read_latest().manifest.external_dbs
    assert after.sst_ids == ()
    # The closed writer left no checkpoint pinning a pre-compaction manifest that uses the
    # parent's SSTs (tests/gc/test_after_writer_close.py), so this pass detaches at once.
    stats = run_gc_once("clone", store, ZERO)

    assert stats.detached == ("parent",) and stats.external_checkpoints_released == 1
    assert cms.read_latest().manifest.external_dbs == ()
    assert pms.read_latest().manifest.checkpoint(entry.final_checkpoint_id) is None
    with Db.open("clone", store, FAST) as db:
        assert db.get(b"new") == b"c" and db.get(b"old0") is None
    assert run_gc_once("clone", store, ZERO).detached == ()  # done once


def _clone_of(store: ObjectStore) -> tuple[ManifestStore, ManifestStore, uuid.UUID]:
    """A parent with a final checkpoint and a clone manifest referencing one parent SST."""
    pms = new_db(store, "parent")
    final, _ = add_checkpoint(pms)
    sst = put_sst(store, "parent")
    entry = ExternalDb("parent", uuid.uuid4(), final, (sst,))
    cms = new_db(store, "clone", Manifest(external_dbs=(entry,)))
    return pms, cms, final


def test_a_checkpointed_manifest_that_still_references_the_parent_blocks_detach(
    store: ObjectStore,
) -> None:
    pms, cms, final = _clone_of(store)
    cp, _ = add_checkpoint(cms, manifest_id=1)  # pins the manifest with the parent's SST
    cms.update(
        lambda m: dataclasses.replace(
            m, external_dbs=tuple(dataclasses.replace(e, sst_ids=()) for e in m.external_dbs)
        )
    )

    assert run_gc_once("clone", store, ZERO).detached == ()
    assert pms.read_latest().manifest.checkpoint(final) is not None

    delete_checkpoint("clone", store, cp)
    stats = run_gc_once("clone", store, ZERO)
    assert stats.detached == ("parent",)
    assert cms.read_latest().manifest.external_dbs == ()
    assert pms.read_latest().manifest.checkpoint(final) is None


def test_detach_tolerates_a_final_checkpoint_that_is_already_gone(store: ObjectStore) -> None:
    _pms, cms, final = _clone_of(store)
    delete_checkpoint("parent", store, final)  # e.g. an earlier pass crashed after this
    cms.update(
        lambda m: dataclasses.replace(
            m, external_dbs=tuple(dataclasses.replace(e, sst_ids=()) for e in m.external_dbs)
        )
    )
    stats = run_gc_once("clone", store, ZERO)
    assert stats.detached == ("parent",) and stats.external_checkpoints_released == 0
    assert cms.read_latest().manifest.external_dbs == ()


def test_an_unfinished_clone_is_never_detached(store: ObjectStore) -> None:
    pms, cms, final = _clone_of(store)
    cms.update(
        lambda m: dataclasses.replace(
            m,
            initialized=False,
            external_dbs=tuple(dataclasses.replace(e, sst_ids=()) for e in m.external_dbs),
        )
    )
    assert run_gc_once("clone", store, ZERO).detached == ()
    assert pms.read_latest().manifest.checkpoint(final) is not None
