"""Our clean close drops the writer checkpoint (381989a); SlateDB 0.17 keeps none. Between them:
SlateDB's writer opens and reads all of ours after our close and our compaction and GC of what
it replaced, and our writer after SlateDB's; each engine's GC then keeps what the other needs.

From review54 (session 54) of 381989a."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from slatedb_core.compactor.compactor import run_compaction_once
from slatedb_core.errors import Fenced
from slatedb_core.gc import run_gc_once
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions, DbOptions, GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db
from tests.interop.expect import Model, check_reads, rows, scanner
from tests.interop.oracle import Oracle, settings

pytestmark = pytest.mark.slatedb

QUIET = DbOptions(manifest_poll_interval=timedelta(hours=1))
HOUR_OLD = GarbageCollectorOptions(min_age=timedelta(hours=1))


def later() -> float:
    return time.time() + 2 * 3600


def test_slatedb_after_our_close_compaction_and_gc_then_ours_again(
    oracle: Oracle, store: ObjectStore
) -> None:
    model = Model()
    with Db.open("db", store, QUIET) as db:
        for turn in range(4):
            for key, value in model.apply(rows(turn, 200, start=turn * 100)):
                db.put(key, value, await_durable=False)  # type: ignore[arg-type]
            db.flush_memtable()
        db.delete(b"k/00003")
        model.delete(b"k/00003")
        db.put(b"wal/tail", b"acknowledged")  # in the WAL only at the close
        model.put(b"wal/tail", b"acknowledged")
    m = ManifestStore(store, "db").read_latest().manifest
    assert [c for c in m.checkpoints if c.writer_epoch is not None] == []
    assert run_compaction_once("db", store, CompactorOptions(l0_trigger=2)) is not None
    run_gc_once("db", store, HOUR_OLD, now=later)

    w = oracle.open_db(s=settings(compactor=False))
    check_reads(model, w.get, w.scan, who="SlateDB's writer after our close, compaction and GC")
    w.write(model.apply(rows(9, 150, start=50)))
    w.flush_memtable()
    w.put(b"slate/tail", b"acknowledged")
    model.put(b"slate/tail", b"acknowledged")
    w.shutdown()

    run_gc_once("db", store, HOUR_OLD, now=later)
    with Db.open("db", store, QUIET) as db:
        check_reads(model, db.get, scanner(db), who="our writer after SlateDB's")
    oracle.admin().run_gc(min_age_ms=0)
    r = oracle.open_reader()
    check_reads(model, r.get, r.scan, who="SlateDB's reader after both GCs")


def test_our_close_after_slatedb_fenced_us_leaves_slatedb_writing(
    oracle: Oracle, store: ObjectStore
) -> None:
    """SlateDB's writer opens over ours (fencing it); our zombie's close then commits nothing
    over SlateDB's manifests, and SlateDB's writer goes on writing and flushing."""
    model = Model()
    ms = ManifestStore(store, "db")
    ours = Db.open("db", store, QUIET)
    ours.put(b"ours/acked", b"v")
    model.put(b"ours/acked", b"v")
    w = oracle.open_db(s=settings(compactor=False))
    latest = ms.read_latest()
    assert latest.manifest.writer_epoch != ours.writer_epoch
    try:
        ours.close()  # nothing buffered: nothing to lose, nothing to commit
    except Fenced:
        pass
    assert ms.read_latest().id == latest.id
    w.write(model.apply(rows(3, 100)))
    w.flush_memtable()
    w.put(b"slate/after", b"acknowledged")
    model.put(b"slate/after", b"acknowledged")
    check_reads(model, w.get, w.scan, who="SlateDB's writer after our zombie's close")
    w.shutdown()
    with Db.open("db", store, QUIET) as db:
        check_reads(model, db.get, scanner(db), who="our writer after SlateDB's")
