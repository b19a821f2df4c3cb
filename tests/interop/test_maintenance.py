"""Our maintenance on databases SlateDB 0.17 writes: our GC (boundary files, ``min_age`` 0) run
while SlateDB writes and compacts loses nothing SlateDB acknowledged; our compactor, and the
Dagster compaction asset, compact a SlateDB-written database, and SlateDB then reads it
(docs/format.md, docs/gc-and-boundaries.md)."""

from __future__ import annotations

import shutil
import threading
import time
from datetime import timedelta
from pathlib import Path

import dagster as dg
import pytest
from ulid import ULID

from orchestration.assets import compaction
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from slatedb_core.compactor import run_compaction_once
from slatedb_core.gc import GcStats, run_gc_once
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions, DbReaderOptions, GarbageCollectorOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db
from tests.interop.expect import Model, check_reads, rows, scanner
from tests.interop.oracle import Oracle, SlateWriter, settings
from tests.interop.rounds_steps import FAST, arrow, our_rounds, slate_rounds, slate_tail

pytestmark = pytest.mark.slatedb

GC_NOW = GarbageCollectorOptions(min_age=timedelta(0))
COMPACT_NOW = CompactorOptions(l0_trigger=2, min_merge_width=2)
READER = DbReaderOptions(manifest_poll_interval=timedelta(milliseconds=100))


def read_everywhere(oracle: Oracle, store: ObjectStore, model: Model, w: SlateWriter) -> None:
    """The writer itself, a fresh SlateDB DbReader, our DbReader, then a SlateDB writer opened
    anew (it reads the GC boundaries and the manifest we last wrote)."""
    check_reads(model, w.get, w.scan, who="SlateDB's running Db")
    r = oracle.open_reader()
    check_reads(model, r.get, r.scan, who="a new SlateDB DbReader")
    r.shutdown()
    with DbReader.open("db", store, options=READER) as reader:
        check_reads(model, reader.get, scanner(reader), who="our DbReader")
    w.shutdown()
    w = oracle.open_db(s=settings(compactor=False))
    check_reads(model, w.get, w.scan, who="SlateDB Db reopened")
    w.shutdown()


def test_our_gc_during_slatedb_writes_and_compactions_loses_nothing(
    oracle: Oracle, store: ObjectStore
) -> None:
    """GC passes back to back in a thread while SlateDB writes, flushes and compacts."""
    model = Model()
    # SlateDB's compactor pins the manifest it compacts with a checkpoint (900 s by default):
    # a short one lets the last pass collect the L0 SSTs it replaced
    w = oracle.open_db(s=settings(compactor=True, compactor_options__checkpoint_lifetime="1s"))
    stop = threading.Event()
    passes: list[GcStats] = []
    errors: list[BaseException] = []

    def collect() -> None:
        while not stop.is_set():
            try:
                passes.append(run_gc_once("db", store, GC_NOW))
            except BaseException as e:  # reported by the main thread
                errors.append(e)
                return

    gc = threading.Thread(target=collect, daemon=True)
    gc.start()
    try:
        slate_rounds(w, model, 4)
        oracle.admin().wait_until(lambda m: bool(m.compacted))
        slate_rounds(w, model, 4, first=4)
        slate_tail(w, model)
    finally:
        stop.set()
        gc.join(30)
    assert not errors, f"our GC failed on SlateDB's database: {errors[0]!r}"
    time.sleep(1.2)  # SlateDB's compaction checkpoints expire
    passes.append(run_gc_once("db", store, GC_NOW))
    deleted = {
        k: sum(getattr(p, k).deleted for p in passes) for k in ("manifest", "wal", "compacted")
    }
    assert all(deleted.values()), f"the GC collected nothing of some kind: {deleted}"
    assert (Path(oracle.root) / "db" / "gc" / "manifest.boundary").exists()
    read_everywhere(oracle, store, model, w)


def test_our_gc_keeps_an_sst_slatedb_has_written_but_not_committed(
    oracle: Oracle, store: ObjectStore
) -> None:
    """Deterministic form of the race above. SlateDB writes an SST (an L0 flush, a compaction's
    output) before the manifest naming it; its GC never deletes an SST newer than the newest L0
    of the manifest it read (nor newer than the oldest running compaction), whatever min_age,
    and neither may ours: SlateDB's writer does not know our gc/compacted.boundary. Staged: a
    copy of one of its L0 SSTs under a fresh ULID, as its next flush leaves it before the
    commit; an unreferenced copy older than its L0 SSTs is garbage for both GCs."""
    model = Model()
    w = oracle.open_db(s=settings(compactor=True, compactor_options__checkpoint_lifetime="1s"))
    slate_rounds(w, model, 4)
    admin = oracle.admin()
    admin.wait_until(lambda m: bool(m.compacted))
    slate_rounds(w, model, 1, first=4)
    w.shutdown()
    time.sleep(1.2)  # SlateDB's compaction checkpoints expire
    compacted = oracle.root / "db" / "compacted"
    newest = max(compacted.iterdir())  # its last L0 flush
    stale = compacted / f"{ULID.from_timestamp(ULID.from_str(newest.stem).timestamp - 60)}.sst"
    shutil.copy(newest, stale)
    in_flight = compacted / f"{ULID()}.sst"
    shutil.copy(newest, in_flight)
    admin.run_gc(min_age_ms=0)
    assert in_flight.exists() and not stale.exists()  # the oracle's rule
    shutil.copy(newest, stale)
    stats = run_gc_once("db", store, GC_NOW)
    assert in_flight.exists(), f"our GC deleted SlateDB's uncommitted SST: {stats.compacted}"
    r = oracle.open_reader()
    check_reads(model, r.get, r.scan, who="SlateDB DbReader after both GCs")


def test_our_compactor_compacts_slatedb_database(oracle: Oracle, store: ObjectStore) -> None:
    """SlateDB's writer stays open (its own compactor off) while ours merges its L0 into a
    sorted run; it then flushes on top of our manifest."""
    model = Model()
    w = oracle.open_db(s=settings(compactor=False))
    slate_rounds(w, model, 4)
    stats = run_compaction_once("db", store, COMPACT_NOW)
    assert stats is not None and stats.compactions >= 1
    slate_rounds(w, model, 1, first=4)
    slate_tail(w, model)
    latest = oracle.admin().latest()
    assert latest.compacted and len(latest.l0) == 1, latest
    read_everywhere(oracle, store, model, w)


def test_dagster_compaction_asset_on_slatedb_database(
    oracle: Oracle, store: ObjectStore, root: Path
) -> None:
    model = Model()
    w = oracle.open_db(s=settings(compactor=False))
    slate_rounds(w, model, 5)
    w.shutdown()
    managed = ManagedDatabasesResource(databases=["db"], compactor_l0_trigger=4, gc_min_age="0s")
    (result,) = compaction(  # a pass yields one event: a materialization, or why it skipped
        context=dg.build_asset_context(partition_key="db"),
        store=ObjectStoreResource(url=root.as_uri()),
        managed=managed,
    )
    assert isinstance(result, dg.MaterializeResult) and result.metadata is not None
    meta = {
        k: v.value if isinstance(v, dg.MetadataValue) else v for k, v in result.metadata.items()
    }
    assert meta["before_l0_ssts"] == 5 and meta["l0_ssts"] == 0 and meta["compactions"], meta
    m = ManifestStore(store, "db").read_latest().manifest
    assert m.compacted and not m.l0
    w = oracle.open_db(s=settings(compactor=False))
    read_everywhere(oracle, store, model, w)


def test_slatedb_compactor_compacts_our_database(oracle: Oracle, store: ObjectStore) -> None:
    """The other way round: SlateDB's compactor merges the L0 SSTs our writer flushed (and an
    ingest's) into a sorted run of its own; our DbReader and Db then read it."""
    model = Model()
    with Db.open("db", store, FAST) as db:
        our_rounds(db, model, 4)
        db.bulk_ingest(arrow(model.apply(rows(8, 600, start=50))))
    w = oracle.open_db(s=settings(compactor=True))
    oracle.admin().wait_until(lambda m: bool(m.compacted) and not m.l0)
    w.shutdown()
    with DbReader.open("db", store, options=READER) as reader:
        check_reads(model, reader.get, scanner(reader), who="our DbReader")
    with Db.open("db", store, FAST) as db:
        check_reads(model, db.get, scanner(db), who="our Db")


def test_slatedb_gc_during_our_writes_and_compactions_loses_nothing(
    oracle: Oracle, store: ObjectStore
) -> None:
    """SlateDB's GC (min_age 0, passes back to back) while our writer flushes and ingests and
    our compactor compacts: it must keep what we have written and not yet committed, and our
    own objects it does not know (docs/format.md)."""
    model = Model()
    stop = threading.Event()
    errors: list[BaseException] = []
    admin = oracle.admin()

    def collect() -> None:
        while not stop.is_set():
            try:
                admin.run_gc(min_age_ms=0)
            except BaseException as e:  # reported by the main thread
                errors.append(e)
                return

    with Db.open("db", store, FAST) as db:
        # the GC thread drives the wheel on its own event loop
        gc_oracle = Oracle(oracle.root)
        admin = gc_oracle.admin()
        gc = threading.Thread(target=collect, daemon=True)
        gc.start()
        try:
            our_rounds(db, model, 3)
            run_compaction_once("db", store, COMPACT_NOW)
            db.bulk_ingest(arrow(model.apply(rows(9, 800, start=20))))
            our_rounds(db, model, 3, first=3)
            run_compaction_once("db", store, COMPACT_NOW)
            db.put(b"k/00004", b"tail")
            model.put(b"k/00004", b"tail")
        finally:
            stop.set()
            gc.join(30)
            gc_oracle.close()
        assert not errors, f"SlateDB's GC failed on our database: {errors[0]!r}"
        check_reads(model, db.get, scanner(db), who="our running Db")
    with DbReader.open("db", store, options=READER) as reader:
        check_reads(model, reader.get, scanner(reader), who="our DbReader")
    r = oracle.open_reader()
    check_reads(model, r.get, r.scan, who="SlateDB DbReader")
