"""Checkpoints are manifest records (SlateDB RFC 0004): one made by either engine is listed by
both, with the same id, manifest id and name, and the other engine's ``DbReader`` opened on it
reads the state it pinned, not the writes after it (docs/format.md)."""

from __future__ import annotations

import copy
import uuid
from datetime import timedelta

import pytest

from slatedb_core.checkpoints import create_checkpoint, list_checkpoints
from slatedb_core.options import CheckpointOptions, CheckpointScope, DbOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db
from tests.interop.expect import Model, check_reads, rows, scanner
from tests.interop.oracle import Oracle, settings

pytestmark = pytest.mark.slatedb

FAST = DbOptions(
    flush_interval=timedelta(milliseconds=10), manifest_poll_interval=timedelta(milliseconds=100)
)


def test_slatedb_checkpoint_listed_and_read_by_ours(oracle: Oracle, store: ObjectStore) -> None:
    model = Model()
    w = oracle.open_db(s=settings(compactor=False))
    w.write(model.apply(rows(0, 1200)))
    w.flush_memtable()
    w.write(model.apply((k, None) for k, _ in rows(0, 30, step=17)))
    w.flush_memtable()  # the checkpoint's state is all in L0 (no WAL tail to argue about)
    admin = oracle.admin()
    cid = admin.create_checkpoint(name="slatedb-made")
    pinned = copy.deepcopy(model)
    # after the checkpoint: an L0 flush and a WAL tail it must not show
    w.write(model.apply(rows(1, 500, start=600)))
    w.flush_memtable()
    w.delete(b"k/00000")
    model.delete(b"k/00000")
    slate_view = {uuid.UUID(c.id): c for c in admin.checkpoints()}
    ours = {c.id: c for c in list_checkpoints("db", store)}
    assert cid in ours, f"SlateDB's checkpoint {cid} is not listed by us: {sorted(ours)}"
    assert ours[cid].name == "slatedb-made"
    assert ours[cid].manifest_id == slate_view[cid].manifest_id
    assert set(ours) == set(slate_view)
    with DbReader.open("db", store, checkpoint=cid) as reader:
        check_reads(pinned, reader.get, scanner(reader), who="our DbReader on SlateDB's checkpoint")
    r = oracle.open_reader()
    check_reads(model, r.get, r.scan, who="SlateDB DbReader at the latest state")


def test_our_checkpoints_listed_and_read_by_slatedb(oracle: Oracle, store: ObjectStore) -> None:
    """One from the writer (``Db.create_checkpoint``, which flushes first) and one from the
    admin API with a lifetime; both outlive our writer's close."""
    model = Model()
    with Db.open("db", store, FAST) as db:
        for key, value in model.apply(rows(0, 1200)):
            assert value is not None
            db.put(key, value, await_durable=False)
        db.delete(b"k/00007")
        model.delete(b"k/00007")
        first = db.create_checkpoint(CheckpointScope.ALL, CheckpointOptions(name="ours-writer"))
        pinned_first = copy.deepcopy(model)
        for key, value in model.apply(rows(1, 400, start=1000)):
            assert value is not None
            db.put(key, value, await_durable=False)
        db.flush_memtable()
        second = create_checkpoint(
            "db", store, CheckpointOptions(lifetime=timedelta(hours=1), name="ours-admin")
        )
        pinned_second = copy.deepcopy(model)
        db.put(b"k/00001", b"after-both")  # WAL tail, after both checkpoints
        model.put(b"k/00001", b"after-both")
    listed = {uuid.UUID(c.id): c for c in oracle.admin().checkpoints()}
    ours = {c.id: c for c in list_checkpoints("db", store)}
    for cp, name in ((first, "ours-writer"), (second, "ours-admin")):
        assert cp.id in listed, f"our checkpoint {cp.id} is not listed by SlateDB"
        assert listed[cp.id].name == name and listed[cp.id].manifest_id == cp.manifest_id
    assert listed[second.id].expire_time_secs == ours[second.id].expire_time_s
    assert set(listed) == set(ours)
    for cp, pinned in ((first, pinned_first), (second, pinned_second)):
        r = oracle.open_reader(checkpoint=cp.id)
        check_reads(pinned, r.get, r.scan, who=f"SlateDB DbReader on our checkpoint {cp.id}")
        r.shutdown()
    r = oracle.open_reader()
    check_reads(model, r.get, r.scan, who="SlateDB DbReader at the latest state")
