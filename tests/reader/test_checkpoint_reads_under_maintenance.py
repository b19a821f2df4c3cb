"""The end-to-end scenario: a writer, a compactor and GC with min_age 0 all running, while
readers on checkpoints keep reading exactly their snapshot."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from slatedb_core.compactor import Compactor
from slatedb_core.gc import GarbageCollector, run_gc_once
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import (
    CheckpointOptions,
    CheckpointScope,
    CompactorOptions,
    DbOptions,
    DbReaderOptions,
    GarbageCollectorOptions,
    ReaderMode,
)
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db

OPTS = DbOptions(
    flush_interval=timedelta(milliseconds=10), manifest_poll_interval=timedelta(milliseconds=50)
)
GC0 = GarbageCollectorOptions(min_age=timedelta(0), interval=timedelta(milliseconds=20))


def test_checkpoint_reader_is_stable_under_writer_compactor_and_gc(store: ObjectStore) -> None:
    model: dict[bytes, bytes] = {}
    with Db.open("db", store, OPTS) as db:
        for i in range(200):
            k, v = f"k{i:04}".encode(), b"v0"
            db.put(k, v, await_durable=False)
            model[k] = v
        snap = db.create_checkpoint(CheckpointScope.ALL)
        short = db.create_checkpoint(
            CheckpointScope.ALL, CheckpointOptions(lifetime=timedelta(seconds=1))
        )
        snapshot = dict(model)
        stop = threading.Event()
        acked: dict[bytes, bytes] = {}
        errors: list[BaseException] = []

        def write() -> None:
            try:
                rnd = 1
                while not stop.is_set():
                    for i in range(0, 200, 7):
                        k, v = f"k{i:04}".encode(), f"v{rnd}".encode()
                        db.put(k, v)
                        acked[k] = v
                    db.flush_memtable()
                    rnd += 1
            except BaseException as e:  # surfaced below
                errors.append(e)

        compactor = Compactor(
            "db",
            store,
            CompactorOptions(
                poll_interval=timedelta(milliseconds=30), l0_trigger=2, min_merge_width=2
            ),
        ).start()
        gc = GarbageCollector("db", store, GC0).start()
        writer = threading.Thread(target=write)
        writer.start()
        opts = DbReaderOptions(mode=ReaderMode.CHECKPOINT)
        try:
            deadline = time.monotonic() + 3
            reads = 0
            while time.monotonic() < deadline:
                with DbReader.open("db", store, checkpoint=snap.id, options=opts) as reader:
                    assert dict(reader.scan()) == snapshot
                    reads += 1
            assert reads >= 2
        finally:
            stop.set()
            writer.join(30)
            compactor.stop()
            gc.stop()
        assert not errors, errors
        model.update(acked)
        # the expired checkpoint is gone and what only it pinned can be collected
        run_gc_once("db", store, GarbageCollectorOptions(min_age=timedelta(0)))
        latest = ManifestStore(store, "db").read_latest().manifest
        assert latest.checkpoint(short.id) is None
        assert latest.checkpoint(snap.id) is not None
        assert ManifestStore(store, "db").latest_id() is not None
        assert not store.exists(f"db/manifest/{short.manifest_id:020d}.manifest") or (
            short.manifest_id == snap.manifest_id
        )
    with Db.open("db", store, OPTS) as db:
        assert dict(db.scan()) == model
        with DbReader.open(
            "db", store, checkpoint=snap.id, options=DbReaderOptions(mode=ReaderMode.CHECKPOINT)
        ) as reader:
            assert dict(reader.scan()) == snapshot


def test_gc_deleting_a_flushed_sst_before_its_commit_loses_nothing(store: ObjectStore) -> None:
    """The upload-to-commit race GC's min_age alone cannot close (slatedb_core.meta.
    compacted_boundary): GC deletes the writer's new L0 SST before the manifest that references
    it lands; the writer must notice and re-home the SST."""
    from slatedb_core.testing import FaultyStore

    faulty = FaultyStore(store)
    db = Db.open("db", faulty, OPTS)
    try:
        for i in range(50):
            db.put(f"k{i:02}".encode(), b"v", await_durable=False)
        db.flush()
        pp = faulty.pause("commit", "put_if_absent", "db/manifest/*", when="before")
        flusher = threading.Thread(target=db.flush_memtable)
        flusher.start()
        assert pp.wait_reached(10)
        uploaded = [m.path for m in store.list("db/compacted")]
        assert len(uploaded) == 1
        stats = run_gc_once("db", store, GarbageCollectorOptions(min_age=timedelta(0)))
        assert stats.compacted.deleted == 1 and not store.exists(uploaded[0])
        pp.release()
        flusher.join(30)
        assert not flusher.is_alive()
        m = ManifestStore(store, "db").read_latest().manifest
        assert len(m.l0) == 1 and store.exists(f"db/compacted/{m.l0[0].sst_id}.sst")
        # the open writer serves the re-homed SST too, not the deleted one it first committed
        assert db.manifest.manifest.l0 == m.l0
        assert all(db.get(f"k{i:02}".encode()) == b"v" for i in range(50))
    finally:
        db.close()
    with Db.open("db", store, OPTS) as again:
        assert all(again.get(f"k{i:02}".encode()) == b"v" for i in range(50))
