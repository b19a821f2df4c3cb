"""Ingested SSTs and seqs: SlateDB orders a key's versions by seq, not by LSM position
(docs/format.md, "Ingested SSTs"), so what ``ingest_ssts`` and a table ingest commit must carry
seqs above every earlier write and ascending with the sources. A table ingest stages its rows at
the plan's seqs and the commit links them as they are; anything else is re-encoded with fresh
seqs. SlateDB 0.17 reads every outcome the same as we do."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pyarrow as pa
import pytest

from slatedb_core.errors import InvalidArgument, UnsupportedFeature
from slatedb_core.layout import sst_path
from slatedb_core.options import DbOptions
from slatedb_core.sst import KIND_TOMBSTONE, KIND_VALUE
from slatedb_core.sst.format import KIND_MERGE
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.table.ingest import (
    SEQ_GAP,
    WRITTEN,
    attempt_dir,
    commit_shard,
    plan_ingest,
    stage_ssts,
)
from slatedb_core.writer.db import Db
from tests.interop.expect import Model, check_reads
from tests.interop.oracle import Oracle, settings
from tests.writer.ingest_steps import sst_of_rows

pytestmark = pytest.mark.slatedb

FAST = DbOptions(
    flush_interval=timedelta(milliseconds=10), manifest_poll_interval=timedelta(milliseconds=100)
)


def _batch(ops: list[tuple[bytes, bytes | None]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"key": [k for k, _ in ops], "value": [v for _, v in ops]},
        schema=pa.schema([("key", pa.binary()), ("value", pa.binary())]),
    )


def _read_both(oracle: Oracle, model: Model, path: str) -> None:
    reader = oracle.open_reader(path)
    check_reads(model, reader.get, reader.scan, who=f"SlateDB DbReader of {path}")
    reader.shutdown()
    w = oracle.open_db(path, settings(compactor=False))
    check_reads(model, w.get, w.scan, who=f"SlateDB Db of {path}")
    w.shutdown()


def _l0_bytes(store: ObjectStore, path: str) -> list[bytes]:
    with Db.open(path, store, FAST) as db:
        ids = [v.sst_id for v in db.manifest.manifest.l0]
    return [bytes(store.get(sst_path(path, i)).data) for i in ids]


def _stage_and_commit(
    store: ObjectStore, model: Model, seq_base: int | None
) -> tuple[list[bytes], list[bytes]]:
    """Two input partitions over overlapping keys staged into a one-shard table whose writer
    wrote first; committed with the staged seqs. Returns the staged and the L0 SSTs' bytes."""
    Table.create("t", store).close()
    with Table.open("t", store) as t, t.writer(0) as db:
        for i in range(0, 60, 3):
            db.put(b"k%03d" % i, b"writer%d" % i)
            model.put(b"k%03d" % i, b"writer%d" % i)
        db.flush()
    plan = plan_ingest("t", store)
    assert plan.seq_base >= SEQ_GAP
    if seq_base is not None:
        plan = dataclasses.replace(plan, seq_base=seq_base)
    staged = []
    inputs: list[list[tuple[bytes, bytes | None]]] = [
        [(b"k%03d" % i, b"p0-%d" % i) for i in range(0, 60, 2)],
        [(b"k%03d" % i, None if i % 4 == 0 else b"p1-%d" % i) for i in range(0, 40, 5)],
    ]
    for partition, ops in enumerate(inputs):
        staged += list(
            stage_ssts(
                store,
                plan,
                attempt_dir(plan, "run", partition, 0),
                0,
                [_batch(ops)],
                partition=partition,
            )
        )
        model.apply(ops)
    shard = plan.shards[0]
    out = commit_shard(
        store, plan, "run", shard, [s.path for s in staged], seqs=[s.seq for s in staged]
    )
    assert out.status == WRITTEN and out.ssts == 2
    with Table.open("t", store) as t, t.writer(0) as db:
        db.put(b"k000", b"after")
        model.put(b"k000", b"after")
    return [bytes(store.get(s.path).data) for s in staged], _l0_bytes(store, shard.db_path)


def test_staged_seqs_above_the_writer_are_linked_as_they_are(
    oracle: Oracle, store: ObjectStore
) -> None:
    model = Model()
    staged, l0 = _stage_and_commit(store, model, None)
    assert all(s in l0 for s in staged)  # linked, not re-encoded
    with Table.open("t", store) as t:
        path = t.shards[0].db_path
    _read_both(oracle, model, path)


def test_staged_seqs_a_writer_passed_are_re_encoded(oracle: Oracle, store: ObjectStore) -> None:
    """A base below the writer's seqs (writes outran the plan, or a concurrent job committed
    first): the commit re-encodes with fresh seqs, so the ingest still wins in SlateDB."""
    model = Model()
    staged, l0 = _stage_and_commit(store, model, 2)
    assert not any(s in l0 for s in staged)
    with Table.open("t", store) as t:
        path = t.shards[0].db_path
    _read_both(oracle, model, path)


def test_ingest_ssts_re_encodes_sources_with_their_own_seqs(
    oracle: Oracle, store: ObjectStore
) -> None:
    """Sources encoded elsewhere with any seqs (here below the writer's, and a multi-version
    source whose older version must not resurface): later sources win, in both engines."""
    model = Model()
    with Db.open("db", store, FAST) as db:
        for i in range(30):
            db.put(b"k%02d" % i, b"w%d" % i)
            model.put(b"k%02d" % i, b"w%d" % i)
        store.put(
            "staging/a.sst",
            sst_of_rows(
                [
                    (b"k01", 7, KIND_VALUE, b"a-new"),
                    (b"k01", 3, KIND_VALUE, b"a-old"),
                    (b"k02", 1, KIND_TOMBSTONE, b""),
                    (b"k40", 1, KIND_VALUE, b"a40"),
                ]
            ),
        )
        store.put(
            "staging/b.sst",
            sst_of_rows([(b"k02", 1, KIND_VALUE, b"b2"), (b"k40", 1, KIND_TOMBSTONE, b"")]),
        )
        model.apply([(b"k01", b"a-new"), (b"k02", None), (b"k40", b"a40")])
        model.apply([(b"k02", b"b2"), (b"k40", None)])
        # stated seqs that would put b under a are not used as they are
        stats = db.ingest_ssts(["staging/a.sst", "staging/b.sst"], seqs=[10**12, 10**12 - 1])
        assert stats.ssts == 2 and stats.rows == 5  # a's older k01 version dropped
        assert db.get(b"k01") == b"a-new" and db.get(b"k02") == b"b2" and db.get(b"k40") is None
    _read_both(oracle, model, "db")


def test_ingest_ssts_refuses_merge_operands_and_bad_seqs(store: ObjectStore) -> None:
    store.put("staging/m.sst", sst_of_rows([(b"k1", 1, KIND_MERGE, b"+1")]))
    store.put("staging/v.sst", sst_of_rows([(b"k1", 1, KIND_VALUE, b"v")]))
    with Db.open("db", store, FAST) as db:
        db.put(b"k1", b"before")
        with pytest.raises(UnsupportedFeature):
            db.ingest_ssts(["staging/m.sst"])
        for bad in ([1, 2], [0], [True], ["1"], "1", [1 << 63]):
            with pytest.raises(InvalidArgument):
                db.ingest_ssts(["staging/v.sst"], seqs=bad)  # type: ignore[arg-type]
        assert db.get(b"k1") == b"before"
        m = db.manifest.manifest
        assert len(m.l0) == 0 or all(v.sst_id for v in m.l0)
        db.ingest_ssts(["staging/v.sst"])
        assert db.get(b"k1") == b"v"
