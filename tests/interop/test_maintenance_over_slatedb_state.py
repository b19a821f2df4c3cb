"""Our clone, compactor and GC keep what SlateDB 0.17 state needs: a projected clone of a WAL
tail batch under one seq, a SlateDB snapshot's older versions, a database a SlateDB writer used
after a destroy, each checked against the real wheel.

From the adversarial review of the SlateDB 0.17 format work (RELIABILITY.md, "Interop with
SlateDB 0.17"); the file was test_review_findings.py."""

from __future__ import annotations

from datetime import timedelta

import pytest

from slatedb_core.compactor import run_compaction_once
from slatedb_core.errors import DatabaseDestroyed
from slatedb_core.gc import run_gc_once
from slatedb_core.keys import KeyRange
from slatedb_core.lifecycle.clone import create_clone
from slatedb_core.options import CompactorOptions, DbReaderOptions, GarbageCollectorOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db
from tests.interop.oracle import Oracle, settings

pytestmark = pytest.mark.slatedb


def test_projected_clone_of_a_wal_tail_batch_with_one_seq(
    oracle: Oracle, store: ObjectStore
) -> None:
    """SlateDB gives every row of one write batch the same seq; clipping such a WAL SST for a
    projected clone re-encodes rows of equal seqs (it raised InvalidArgument before)."""
    w = oracle.open_db(s=settings(compactor=False))
    w.write([(b"a", b"1"), (b"m", b"2"), (b"n", b"3"), (b"z", b"4")])  # one batch, one seq
    w.flush_wal()
    create_clone("clone", "db", store, projection=KeyRange(b"b", b"y"))
    reader = DbReader.open("clone", store, options=DbReaderOptions())
    try:
        assert list(reader.scan()) == [(b"m", b"2"), (b"n", b"3")]
    finally:
        reader.close()
    theirs = oracle.open_reader("clone")
    assert theirs.scan() == [(b"m", b"2"), (b"n", b"3")]


def test_our_compactor_keeps_what_a_slatedb_snapshot_reads(
    oracle: Oracle, store: ObjectStore
) -> None:
    """A SlateDB snapshot at seq s must keep reading the versions it saw (it dropped k=v1 and
    d's value under the snapshot before; then our compaction refused; since issue 38 it keeps
    the versions above ``recent_snapshot_min_seq`` and the first at or below, lsm/retention.py)."""
    w = oracle.open_db(s=settings(compactor=False))
    w.put(b"k", b"v1")
    w.put(b"d", b"alive")
    w.flush_memtable()
    snap = w.snapshot()
    w.put(b"k", b"v2")
    w.delete(b"d")
    w.flush_memtable()
    assert run_compaction_once("db", store, CompactorOptions(l0_trigger=1)) is not None
    assert (oracle.run(snap.get(b"k")), oracle.run(snap.get(b"d"))) == (b"v1", b"alive")
    assert (w.get(b"k"), w.get(b"d")) == (b"v2", None)


def test_our_gc_keeps_a_destroyed_database_a_slatedb_writer_used_since(
    oracle: Oracle, store: ObjectStore
) -> None:
    """SlateDB does not know a database is soft-destroyed: its writer opens it and acknowledges
    writes. Our GC must not then delete what it acknowledged (it deleted every object before)."""
    with Db.open("db", store) as db:
        db.put(b"a", b"1")
    Db.destroy("db", store, soft=True)
    w = oracle.open_db(s=settings(compactor=False))
    w.put(b"after-destroy", b"acked")
    w.flush_memtable()
    stats = run_gc_once(
        "db", store, GarbageCollectorOptions(min_age=timedelta(0), db_delete_grace=timedelta(0))
    )
    assert stats.destroyed and not stats.database_deleted
    assert w.get(b"after-destroy") == b"acked"
    w.shutdown()
    assert oracle.open_reader().get(b"after-destroy") == b"acked"
    with pytest.raises(DatabaseDestroyed):  # still destroyed for this engine
        Db.open("db", store)
