"""We write, SlateDB 0.17 reads: everything our writer puts on disk (WAL SSTs, L0 SSTs from
memtable flushes, ``put_arrow``, ``bulk_ingest``, ``ingest_ssts``, our compactor's sorted runs,
clones, projections, unions and a Spark ingest) must be read by SlateDB's own ``Db`` and
``DbReader``, key by key and in one scan (docs/format.md)."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

from slatedb_core.compactor import run_compaction_once
from slatedb_core.keys import KeyRange
from slatedb_core.lifecycle.clone import create_clone
from slatedb_core.lifecycle.union import UnionSource, create_union
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import COMPRESSIONS, CompactorOptions
from slatedb_core.sst import ENTRY_SCHEMA, KIND_TOMBSTONE, KIND_VALUE, encode_sst
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db
from tests.interop.expect import Model, check_reads, rows, scanner
from tests.interop.oracle import Oracle, settings
from tests.interop.rounds_steps import FAST, arrow, our_rounds

pytestmark = pytest.mark.slatedb

COMPACT_NOW = CompactorOptions(l0_trigger=2, min_merge_width=2)


def read_with_slatedb(oracle: Oracle, model: Model, path: str = "db") -> None:
    """SlateDB's DbReader, then SlateDB's Db (which fences our writer and replays our WAL)."""
    reader = oracle.open_reader(path)
    check_reads(model, reader.get, reader.scan, who=f"SlateDB DbReader of {path}")
    reader.shutdown()
    w = oracle.open_db(path, settings(compactor=False))
    check_reads(model, w.get, w.scan, who=f"SlateDB Db of {path}")
    # SlateDB flushes what it replayed from our WAL into an L0 SST of its own (its clock
    # resumes from the rows' create_ts), then shuts down cleanly
    w.flush_memtable()
    w.shutdown()


def test_our_writes_wal_l0_put_arrow_bulk_ingest_read_by_slatedb(
    oracle: Oracle, store: ObjectStore
) -> None:
    model = Model()
    with Db.open("db", store, FAST) as db:
        our_rounds(db, model, 2)
        db.put_arrow(arrow(model.apply(rows(5, 500, step=2, start=100))))
        db.put_arrow(arrow(model.apply([(b"k/00101", None), (b"arrow/x", b"")])))
        db.flush_memtable()
        db.bulk_ingest(arrow(model.apply(rows(6, 2000, start=150))))
        db.bulk_ingest(arrow(model.apply([(b"k/00152", None), (b"k/00154", None)])))
        # a tail in the WAL: durable, never flushed to L0
        db.put(b"k/00002", b"tail-overwrite")
        model.put(b"k/00002", b"tail-overwrite")
        db.delete(b"k/00160")
        model.delete(b"k/00160")
        db.put_arrow(arrow(model.apply(rows(7, 30, step=11))))
        check_reads(model, db.get, scanner(db), who="our Db (the writer itself)")
        # SlateDB's reader while our writer runs (its managed checkpoint lands in our manifest)
        live = oracle.open_reader()
        check_reads(model, live.get, live.scan, who="SlateDB DbReader beside our writer")
        live.shutdown()
        db.put(b"after/live", b"x")
        model.put(b"after/live", b"x")
    read_with_slatedb(oracle, model)


def test_our_ingest_ssts_read_by_slatedb(oracle: Oracle, store: ObjectStore) -> None:
    """SSTs encoded by :func:`encode_sst` (as Spark tasks do), attached by ``ingest_ssts``."""
    model = Model()

    def stage(name: str, ops: list[tuple[bytes, bytes | None]]) -> str:
        ops = sorted(dict(ops).items())
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array([k for k, _ in ops], pa.binary()),
                pa.array([1] * len(ops), pa.uint64()),
                pa.array([KIND_TOMBSTONE if v is None else KIND_VALUE for _, v in ops], pa.uint8()),
                pa.array([b"" if v is None else v for _, v in ops], pa.binary()),
            ],
            schema=ENTRY_SCHEMA,
        )
        path = f"staging/{name}.sst"
        store.put(path, encode_sst(batch)[0])
        return path

    with Db.open("db", store, FAST) as db:
        our_rounds(db, model, 1)
        first = stage("a", model.apply(rows(20, 1500, start=100)))
        second = stage("b", model.apply([*rows(21, 300, step=3, start=120), (b"k/00130", None)]))
        db.ingest_ssts([first, second])
        db.put(b"after", b"ingest")
        model.put(b"after", b"ingest")
    read_with_slatedb(oracle, model)


def test_our_compaction_read_by_slatedb(oracle: Oracle, store: ObjectStore) -> None:
    """Our compactor's sorted run (tombstones of the bottom run dropped), then newer L0 SSTs;
    SlateDB's Admin decodes our .compactions records."""
    model = Model()
    with Db.open("db", store, FAST) as db:
        our_rounds(db, model, 4)
    stats = run_compaction_once("db", store, COMPACT_NOW)
    assert stats is not None and stats.compactions >= 1
    m = ManifestStore(store, "db").read_latest().manifest
    assert m.compacted and not m.l0
    with Db.open("db", store, FAST) as db:
        our_rounds(db, model, 1, first=4)
    admin = oracle.admin()
    assert admin.compactions(), "SlateDB lists no .compactions record of ours"
    latest = admin.latest()
    assert len(latest.compacted) == len(m.compacted) and len(latest.l0) == 1
    read_with_slatedb(oracle, model)


def test_our_clone_and_projection_read_by_slatedb(oracle: Oracle, store: ObjectStore) -> None:
    model = Model()
    with Db.open("db", store, FAST) as db:
        our_rounds(db, model, 2)
        db.put(b"k/00001", b"wal-only")  # the clone copies the parent's WAL tail
        model.put(b"k/00001", b"wal-only")
    create_clone("clone", "db", store)
    projection = KeyRange(b"k/00200", b"k/00900")
    create_clone("proj", "db", store, projection=projection)
    projected = Model()
    projected.rows = {k: v for k, v in model.rows.items() if projection.contains(k)}
    read_with_slatedb(oracle, model, "clone")
    read_with_slatedb(oracle, projected, "proj")


def test_our_union_read_by_slatedb(oracle: Oracle, store: ObjectStore) -> None:
    """The union of two databases holding adjacent key ranges (compacted first: a union takes no
    WAL)."""
    left, right = Model(), Model()
    with Db.open("left", store, FAST) as db:
        for key, value in left.apply(rows(1, 800)):
            assert value is not None
            db.put(key, value, await_durable=False)
        db.delete(b"k/00010")
        left.delete(b"k/00010")
        db.flush_memtable()
    with Db.open("right", store, FAST) as db:
        db.put_arrow(arrow(right.apply(rows(2, 900, start=800))))
        db.flush_memtable()
    create_union(
        "union",
        [
            UnionSource("left", range=KeyRange(None, b"k/00800")),
            UnionSource("right", range=KeyRange(b"k/00800", None)),
        ],
        store,
    )
    union = Model()
    union.rows = {**left.rows, **right.rows}
    read_with_slatedb(oracle, union, "union")


@pytest.mark.parametrize("compression", [c for c in COMPRESSIONS if c != "none"])
def test_our_compressed_ssts_read_by_slatedb(
    oracle: Oracle, store: ObjectStore, compression: str
) -> None:
    """Every codec our writer offers (``DbOptions.compression``) on L0 SSTs, ingested SSTs and
    the WAL, read by SlateDB."""
    model = Model()
    with Db.open("db", store, dataclasses.replace(FAST, compression=compression)) as db:
        our_rounds(db, model, 2)
        db.bulk_ingest(arrow(model.apply(rows(6, 1500, start=150))))
        db.put(b"k/00002", b"tail-overwrite")
        model.put(b"k/00002", b"tail-overwrite")
    read_with_slatedb(oracle, model)
