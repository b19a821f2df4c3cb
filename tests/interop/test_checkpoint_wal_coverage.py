"""A checkpoint our admin API (and so a table snapshot) takes of the latest state covers the WAL
SSTs durable when it was taken, in the manifest field both engines bound a checkpoint reader's
WAL replay with (``wal_id_last_seen``; SlateDB derives ``next_wal_sst_id`` from it): SlateDB's
``DbReader`` at the checkpoint serves the rows ours does, writes acknowledged before the
checkpoint included and later ones left out (adversarial review, "a table snapshot can miss
acknowledged writes that are still only in the WAL")."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest

from slatedb_core.checkpoints import create_checkpoint
from slatedb_core.options import DbOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db
from tests.interop.expect import Model, check_reads, rows, scanner
from tests.interop.oracle import Oracle, settings

pytestmark = pytest.mark.slatedb

FAST = DbOptions(flush_interval=timedelta(milliseconds=10))


def _both_read(oracle: Oracle, store: ObjectStore, cid: object, pinned: Model) -> None:
    with DbReader.open("db", store, checkpoint=cid) as ours:  # type: ignore[arg-type]
        check_reads(pinned, ours.get, scanner(ours), who="our DbReader at our checkpoint")
    theirs = oracle.open_reader(checkpoint=cid)  # type: ignore[arg-type]
    check_reads(pinned, theirs.get, theirs.scan, who="SlateDB DbReader at our checkpoint")


def test_our_checkpoint_of_our_wal_tail_reads_the_same_in_both_engines(
    oracle: Oracle, store: ObjectStore
) -> None:
    model = Model()
    with Db.open("db", store, FAST) as db:
        for key, value in model.apply(rows(0, 300)):
            assert value is not None
            db.put(key, value, await_durable=False)
        db.flush_memtable()
        for key, value in model.apply(rows(1, 40, step=7)):  # overwrites, only in the WAL
            assert value is not None
            db.put(key, value)
        db.delete(b"k/00003")
        model.delete(b"k/00003")
    cid = create_checkpoint("db", store).id  # the writer is closed: its WAL tail is all there is
    pinned = copy.deepcopy(model)
    with Db.open("db", store, FAST) as db:
        db.put(b"k/00001", b"after")  # acknowledged after the checkpoint
    _both_read(oracle, store, cid, pinned)


def test_our_checkpoint_of_slatedb_wal_tail_reads_the_same_in_both_engines(
    oracle: Oracle, store: ObjectStore
) -> None:
    model = Model()
    w = oracle.open_db(s=settings(compactor=False))
    w.write(model.apply(rows(0, 200)))
    w.flush_memtable()
    for key, value in model.apply(rows(1, 30, step=5)):  # durable, only in SlateDB's WAL
        assert value is not None
        w.put(key, value)
    cid = create_checkpoint("db", store).id  # SlateDB's writer is live
    pinned = copy.deepcopy(model)
    w.put(b"k/00000", b"after")
    w.put(b"zz", b"after")
    w.flush_memtable()  # SlateDB's writer commits over the manifest our checkpoint raised
    w.put(b"k/00002", b"after")
    _both_read(oracle, store, cid, pinned)
    model.put(b"k/00000", b"after")
    model.put(b"zz", b"after")
    model.put(b"k/00002", b"after")
    assert w.scan() == model.live()
