"""SlateDB 0.17 decodes every manifest our reusing encoder writes (issue 41/42 adversarial
review): a writer's chain of mixed commits (memtable flushes, checkpoints created, refreshed
and deleted by other manifest stores, compactions, GC passes), then SlateDB's own writer in
between and ours again (a seed from a manifest SlateDB wrote, which has no reusable bytes).
Each manifest SlateDB lists agrees with our decode of it, field by field, and SlateDB's reader
reads the rows."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from slatedb_core.checkpoints import delete_checkpoint, refresh_checkpoint
from slatedb_core.compactor import run_compaction_once
from slatedb_core.gc import run_gc_once
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import (
    CheckpointOptions,
    CompactorOptions,
    DbOptions,
    GarbageCollectorOptions,
)
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db
from tests.interop.expect import Model, check_reads, rows
from tests.interop.oracle import Oracle, settings

pytestmark = pytest.mark.slatedb

FAST = DbOptions(
    flush_interval=timedelta(milliseconds=10), manifest_poll_interval=timedelta(milliseconds=50)
)


def _agree(oracle: Oracle, store: ObjectStore) -> int:
    """Every manifest SlateDB lists agrees with ours; returns how many were compared."""
    ours = ManifestStore(store, "db")
    listed = oracle.admin().manifests()
    for vm in listed:
        m = ours.read(vm.id).manifest
        who = f"manifest {vm.id}"
        assert vm.writer_epoch == m.writer_epoch, who
        assert vm.compactor_epoch == m.compactor_epoch, who
        assert vm.replay_after_wal_id == m.replay_after_wal_id, who
        assert vm.last_l0_seq == m.last_l0_seq, who
        assert vm.last_l0_clock_tick == m.last_l0_clock_tick, who
        assert [str(v.id) for v in vm.l0] == [str(v.view_id) for v in m.l0], who
        assert [(r.id, [str(v.id) for v in r.sst_views]) for r in vm.compacted] == [
            (r.id, [str(v.view_id) for v in r.views]) for r in m.compacted
        ], who
        theirs = {
            uuid.UUID(c.id): (c.manifest_id, c.expire_time_secs or None, c.name)
            for c in vm.checkpoints
        }
        mine = {c.id: (c.manifest_id, c.expire_time_s, c.name) for c in m.checkpoints}
        for cid, want in mine.items():
            assert theirs.get(cid) == want, (who, cid)
    return len(listed)


def test_slatedb_reads_every_manifest_of_a_mixed_chain(oracle: Oracle, store: ObjectStore) -> None:
    model = Model()
    cps: list[uuid.UUID] = []
    seen = 0
    with Db.open("db", store, FAST) as db:
        for i in range(12):
            for k, v in model.apply(rows(i, 40, start=i * 7)):
                db.put(k, v or b"", await_durable=False)
            db.flush_memtable()
            if i % 3 == 0:
                cps.append(
                    db.create_checkpoint(
                        options=CheckpointOptions(lifetime=timedelta(hours=1), name=f"c{i}")
                    ).id
                )
            if i % 3 == 1 and cps:
                refresh_checkpoint("db", store, cps[-1], timedelta(hours=2 + i))
            if i % 4 == 3:
                run_compaction_once("db", store, CompactorOptions())
            if i % 5 == 4 and cps:
                delete_checkpoint("db", store, cps.pop(0))
                run_gc_once("db", store, GarbageCollectorOptions(min_age=timedelta(0)))
            seen += _agree(oracle, store)  # each step's manifests, before a GC pass takes them
    assert seen > 12
    r = oracle.open_reader()
    check_reads(model, r.get, r.scan, who="SlateDB DbReader after our chain")
    r.shutdown()
    # SlateDB's writer in between (its manifests carry no reusable bytes), then ours again
    w = oracle.open_db(s=settings(compactor=False))
    w.write(model.apply(rows(50, 30)))
    w.flush_memtable()
    w.shutdown()
    with Db.open("db", store, FAST) as db:
        for i in range(3):
            for k, v in model.apply(rows(60 + i, 20)):
                db.put(k, v or b"", await_durable=False)
            db.flush_memtable()
        cid = db.create_checkpoint().id
        refresh_checkpoint("db", store, cid, timedelta(hours=5))
        db.flush_memtable()
    _agree(oracle, store)
    r = oracle.open_reader()
    check_reads(model, r.get, r.scan, who="SlateDB DbReader after SlateDB's writer and ours")
    r.shutdown()
