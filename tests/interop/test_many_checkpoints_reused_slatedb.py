"""SlateDB 0.17 reads manifests our engine decoded at once and wrote back reusing their bytes
(review 42 of issue 42, goal 2: SSTs, views and the checkpoints sharing one vtable are decoded
as numpy columns from 32 of them on; the seeded encoder keeps their bytes). A chain with 40
plain checkpoints, a few named ones and 40 L0 SSTs is reopened (one decode, one seed) and
committed to again; the latest manifest SlateDB lists agrees with ours and SlateDB's reader
reads the rows (SlateDB's own writer would stall on 40 L0 SSTs with its compactor off)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from slatedb_core.checkpoints import delete_checkpoint, refresh_checkpoint
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CheckpointOptions, DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db
from tests.interop.expect import Model, check_reads, rows
from tests.interop.oracle import Oracle

pytestmark = pytest.mark.slatedb

FAST = DbOptions(
    flush_interval=timedelta(milliseconds=10),
    manifest_poll_interval=timedelta(milliseconds=50),
    l0_max_ssts=200,
)


def _agree(oracle: Oracle, store: ObjectStore) -> int:
    """The latest manifest SlateDB lists agrees with ours, checkpoints and views included."""
    ours = ManifestStore(store, "db")
    vm = oracle.admin().manifests()[-1]
    m = ours.read(vm.id).manifest
    assert [str(v.id) for v in vm.l0] == [str(v.view_id) for v in m.l0]
    theirs = {
        uuid.UUID(c.id): (c.manifest_id, c.expire_time_secs or None, c.name) for c in vm.checkpoints
    }
    mine = {c.id: (c.manifest_id, c.expire_time_s, c.name) for c in m.checkpoints}
    assert theirs == mine
    return len(mine)


def test_slatedb_reads_a_reopened_chain_of_many_checkpoints(
    oracle: Oracle, store: ObjectStore
) -> None:
    model = Model()
    cps: list[uuid.UUID] = []
    with Db.open("db", store, FAST) as db:
        for i in range(40):
            for k, v in model.apply(rows(i, 5, start=i * 3)):
                db.put(k, v or b"", await_durable=False)
            db.flush_memtable()
            name = f"n{i}" if i % 13 == 0 else None
            life = CheckpointOptions(lifetime=timedelta(hours=1 + i), name=name)
            cps.append(db.create_checkpoint(options=life).id)
    assert _agree(oracle, store) >= 40
    for round_ in range(2):  # reopen: the manifest decoded at once, the encoder seeded
        with Db.open("db", store, FAST) as db:
            for k, v in model.apply(rows(100 + round_, 20)):
                db.put(k, v or b"", await_durable=False)
            db.flush_memtable()
            refresh_checkpoint("db", store, cps[5 + round_], timedelta(hours=90))
            delete_checkpoint("db", store, cps[20 + round_])
            db.create_checkpoint(options=CheckpointOptions(lifetime=timedelta(hours=3)))
            for k, v in model.apply(rows(200 + round_, 20)):
                db.put(k, v or b"", await_durable=False)
            db.flush_memtable()
        assert _agree(oracle, store) >= 40
        r = oracle.open_reader()
        check_reads(model, r.get, r.scan, who=f"SlateDB DbReader after reopen {round_}")
        r.shutdown()
