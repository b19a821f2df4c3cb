"""Adversarial review of the seqs that ``Db.ingest_ssts`` and a table ingest give ingested rows
(docs/format.md, "Ingested SSTs"): SlateDB 0.17 orders a key's versions by seq, our engine by
L0 position, so every interleaving below must leave both engines reading the same rows, and
those rows must be the ones the writes acknowledged."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from datetime import timedelta

import pyarrow as pa
import pytest

from slatedb_core.errors import InjectedFault
from slatedb_core.layout import sst_path
from slatedb_core.options import DbOptions
from slatedb_core.sst import KIND_VALUE, SstReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.table.ingest import (
    WRITTEN,
    IngestPlan,
    StagedSst,
    attempt_dir,
    commit_shard,
    plan_ingest,
    stage_ssts,
)
from slatedb_core.testing import FaultyStore
from slatedb_core.writer.db import Db
from slatedb_core.writer.engine import WriterEngine
from tests.interop.expect import Model, check_reads
from tests.interop.oracle import Oracle, settings
from tests.writer.ingest_steps import sst_of_rows

pytestmark = pytest.mark.slatedb

FAST = DbOptions(
    flush_interval=timedelta(milliseconds=10), manifest_poll_interval=timedelta(milliseconds=100)
)


def _read_both(oracle: Oracle, model: Model, path: str) -> None:
    reader = oracle.open_reader(path)
    check_reads(model, reader.get, reader.scan, who=f"SlateDB DbReader of {path}")
    reader.shutdown()
    w = oracle.open_db(path, settings(compactor=False))
    check_reads(model, w.get, w.scan, who=f"SlateDB Db of {path}")
    w.shutdown()


def _write_after(
    monkeypatch: pytest.MonkeyPatch, name: str, write: Callable[[WriterEngine], None]
) -> list[bool]:
    """Run ``write`` on another thread (and wait for it) right after the ingest's first call of
    the writer engine's ``<name>`` (a seq reservation) returns: the ingest holds the writer's
    L0 lock then, its seqs reserved. ``write`` is given the engine, to see its state. The list
    returned says whether it ran."""
    original = getattr(WriterEngine, name)
    done: list[bool] = []

    def hooked(engine: WriterEngine, *args: object) -> object:
        out = original(engine, *args)
        if not done:
            done.append(True)
            t = threading.Thread(target=write, args=(engine,))
            t.start()
            t.join()
        return out

    monkeypatch.setattr(WriterEngine, name, hooked)
    return done


@pytest.mark.parametrize("how", ["linked", "re-encoded", "bulk_ingest"])
def test_a_write_frozen_while_an_ingest_commits_stays_newer(
    oracle: Oracle, store: ObjectStore, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A put acknowledged while ``ingest_ssts`` (or ``bulk_ingest``) holds its seqs (it reads,
    re-encodes and copies the sources) takes a seq above theirs; when its memtable is frozen
    before the ingest commits (here: a flush asked for by another thread), it must still read as
    newer than the ingest, in our engine as in SlateDB's: the ingest's commit flushed it to L0
    behind the ingested SSTs, and our reads returned the ingested value over it."""
    model = Model()
    store.put(
        "staging/a.sst",
        sst_of_rows([(b"k1", 7, KIND_VALUE, b"ingested"), (b"k2", 7, KIND_VALUE, b"ingested2")]),
    )
    with Db.open("db", store, FAST) as db:
        db.put(b"k1", b"before")

        def write(engine: WriterEngine) -> None:
            db.put(b"k1", b"after")
            # a flush asked for meanwhile freezes the memtable holding the put at once, then
            # waits for the ingest's L0 lock
            threading.Thread(target=db.flush_memtable, daemon=True).start()
            while not engine.state.imm:
                threading.Event().wait(0.001)

        if how == "linked":  # as they are: seq 7 is above the writer's
            ran = _write_after(monkeypatch, "reserve_through", write)
            db.ingest_ssts(["staging/a.sst"], seqs=[7])
        elif how == "re-encoded":
            ran = _write_after(monkeypatch, "reserve_seqs_and_freeze", write)
            db.ingest_ssts(["staging/a.sst"])
        else:
            ran = _write_after(monkeypatch, "reserve_seqs_and_freeze", write)
            db.bulk_ingest(pa.table({"key": [b"k1", b"k2"], "value": [b"ingested", b"ingested2"]}))
        assert ran
        model.apply([(b"k1", b"after"), (b"k2", b"ingested2")])
        assert db.get(b"k1") == b"after"
        db.flush_memtable()
        assert db.get(b"k1") == b"after"
    _read_both(oracle, model, "db")
    with Db.open("db", store, FAST) as db:
        check_reads(model, db.get, lambda: list(db.scan()), who="our Db reopened")


def _batch(ops: list[tuple[bytes, bytes | None]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"key": [k for k, _ in ops], "value": [v for _, v in ops]},
        schema=pa.schema([("key", pa.binary()), ("value", pa.binary())]),
    )


def test_a_table_ingest_commits_on_a_shard_whose_seqs_are_near_the_top(
    oracle: Oracle, store: ObjectStore
) -> None:
    """``ingest_ssts`` takes stated seqs up to 2^63 - 1, so a shard's ``last_l0_seq`` can be
    there; a job planned on it staged at seqs past that bound and every commit failed with
    InvalidArgument (after the whole input was staged). It must re-encode instead."""
    model = Model()
    Table.create("t", store).close()
    top = (1 << 63) - 1
    store.put("staging/a.sst", sst_of_rows([(b"k1", top, KIND_VALUE, b"stated")]))
    with Table.open("t", store) as t:
        path = t.shards[0].db_path
        with t.writer(0) as db:
            db.put(b"k0", b"w")
            db.ingest_ssts(["staging/a.sst"], seqs=[top])
    model.apply([(b"k0", b"w"), (b"k1", b"stated")])
    plan = plan_ingest("t", store)
    ops: list[tuple[bytes, bytes | None]] = [(b"k0", None), (b"k1", b"job"), (b"k2", b"job")]
    staged = list(
        stage_ssts(store, plan, attempt_dir(plan, "r", 0, 0), 0, [_batch(ops)], partition=0)
    )
    out = commit_shard(
        store, plan, "r", plan.shards[0], [s.path for s in staged], seqs=[s.seq for s in staged]
    )
    assert out.status == WRITTEN
    model.apply(ops)
    with Db.open(path, store, FAST) as db:
        db.put(b"k2", b"after")
        model.put(b"k2", b"after")
        check_reads(model, db.get, lambda: list(db.scan()), who="our Db")
    _read_both(oracle, model, path)


Ops = list[tuple[bytes, bytes | None]]


def _stage(store: ObjectStore, plan: IngestPlan, inputs: dict[int, Ops]) -> list[StagedSst]:
    """Input partition -> its rows, staged (run 0) in partition order."""
    out: list[StagedSst] = []
    for partition, ops in sorted(inputs.items()):
        out += stage_ssts(
            store,
            plan,
            attempt_dir(plan, "run", partition, 0),
            0,
            [_batch(ops)],
            partition=partition,
        )
    return out


def _commit(store: ObjectStore, plan: IngestPlan, staged: list[StagedSst], attempt: int = 0) -> str:
    out = commit_shard(
        store,
        plan,
        "run",
        plan.shards[0],
        [s.path for s in staged],
        seqs=[s.seq for s in staged],
        attempt=attempt,
    )
    assert out.status == WRITTEN
    return out.message


def _one_shard(store: ObjectStore, model: Model) -> str:
    """A one-shard table whose writer wrote (and flushed) k1; returns the shard's path."""
    Table.create("t", store).close()
    with Table.open("t", store) as t, t.writer(0) as db:
        db.put(b"k1", b"w")
        db.flush_memtable()
        model.put(b"k1", b"w")
        return t.shards[0].db_path


@pytest.mark.parametrize("first", [0, 1])
def test_two_jobs_planned_together_on_one_shard(
    oracle: Oracle, store: ObjectStore, first: int
) -> None:
    """Two jobs planned at once share a seq base; whichever commits second must win in both
    engines, whether its staged seqs are above the first's (linked) or not (re-encoded)."""
    model = Model()
    path = _one_shard(store, model)
    plans = [plan_ingest("t", store), plan_ingest("t", store)]
    assert plans[0].seq_base == plans[1].seq_base
    inputs: list[dict[int, Ops]] = [
        {0: [(b"k1", b"j0p0"), (b"k2", b"j0p0")], 3: [(b"k2", b"j0p3")]},
        {1: [(b"k1", b"j1p1"), (b"k2", b"j1p1"), (b"k3", b"j1")], 2: [(b"k3", None)]},
    ]
    staged = [_stage(store, plan, ins) for plan, ins in zip(plans, inputs, strict=True)]
    for job in (first, 1 - first):
        _commit(store, plans[job], staged[job])
        for _, ops in sorted(inputs[job].items()):
            model.apply(ops)
    with Db.open(path, store, FAST) as db:
        check_reads(model, db.get, lambda: list(db.scan()), who="our Db")
    _read_both(oracle, model, path)


def test_a_slatedb_writer_between_plan_and_commit_and_after(
    oracle: Oracle, store: ObjectStore
) -> None:
    """SlateDB writes between the plan and the commit (flushed, and a WAL tail our fenced writer
    replays at the commit); the commit links the staged SSTs above them, and a SlateDB writer
    after the commit continues above the job's seqs (the manifest's last_l0_seq)."""
    model = Model()
    path = _one_shard(store, model)
    plan = plan_ingest("t", store)
    ops: Ops = [(b"k1", b"job"), (b"k2", b"job")]
    staged = _stage(store, plan, {0: ops})
    w = oracle.open_db(path, settings(compactor=False))
    w.put(b"k2", b"sdb")
    w.put(b"k3", b"sdb")
    w.flush_memtable()
    w.put(b"k3", b"tail")
    w.delete(b"k1")
    model.apply([(b"k2", b"sdb"), (b"k3", b"tail"), (b"k1", None)])
    _commit(store, plan, staged)
    model.apply(ops)
    w = oracle.open_db(path, settings(compactor=False))
    w.put(b"k1", b"sdb-after")
    w.delete(b"k2")
    model.apply([(b"k1", b"sdb-after"), (b"k2", None)])
    w.shutdown()
    with Db.open(path, store, FAST) as db:
        check_reads(model, db.get, lambda: list(db.scan()), who="our Db")
    _read_both(oracle, model, path)


@pytest.mark.parametrize("linked", [True, False])
def test_a_commit_whose_manifest_landed_unacknowledged_is_not_redone(
    oracle: Oracle, store: ObjectStore, linked: bool
) -> None:
    """The commit's manifest update lands but its answer is lost and cannot be settled (reads
    of it fail): the attempt fails; a user deletes an ingested key; the retry finds the commit
    (its checkpoint) and ingests nothing, so the delete stands in both engines."""
    model = Model()
    path = _one_shard(store, model)
    plan = plan_ingest("t", store)
    if not linked:  # staged at seq 0: the commit re-encodes
        plan = dataclasses.replace(plan, seq_base=0)
    ops: Ops = [(b"k1", b"job"), (b"k2", b"job")]
    staged = _stage(store, plan, {0: ops})
    model.apply(ops)
    faulty = FaultyStore(store)
    # armed once the commit writes its SSTs (the copy, or the re-encoded SST's create)
    pause = faulty.pause("armed", "copy" if linked else "put_if_absent", f"{path}/compacted/*")

    def arm() -> None:
        assert pause.wait_reached()
        faulty.fail_next("put_if_absent", f"{path}/manifest/0*", after_effect=True)
        faulty.fail_next("get", f"{path}/manifest/0*", times=100)
        pause.release()

    th = threading.Thread(target=arm)
    th.start()
    with pytest.raises(InjectedFault):
        _commit(faulty, plan, staged)
    th.join()
    with Table.open("t", store) as t, t.writer(0) as db:
        db.delete(b"k2")
        model.delete(b"k2")
    assert "earlier attempt" in _commit(store, plan, staged, attempt=1)
    with Db.open(path, store, FAST) as db:
        check_reads(model, db.get, lambda: list(db.scan()), who="our Db")
    _read_both(oracle, model, path)


@pytest.mark.parametrize("stated", [False, True])
def test_an_sst_slatedb_wrote_is_ingested_not_skipped_as_empty(
    oracle: Oracle, store: ObjectStore, stated: bool
) -> None:
    """SlateDB 0.17 writes no entry count in an SST's info (ours: 0, unknown; its stats count
    the rows): ``ingest_ssts`` took such a source for an empty one, skipped it and reported
    success with 0 rows ingested. (Stated: one WriteBatch's rows, which share one seq, above
    every seq of our writer.)"""
    w = oracle.open_db("src", settings(compactor=False))
    for i in range(10):
        w.put(b"a%d" % i, b"x")
    w.flush_memtable()
    w.write([(b"k1", b"sdb1"), (b"k3", None), (b"k2", b"sdb2")])
    w.flush_memtable()
    w.shutdown()
    ssts = [m.path for m in store.list("src/compacted/")]
    (sst,) = [p for p in ssts if SstReader.open(store, p).info.first_key == b"k1"]
    assert SstReader.open(store, sst).info.entry_count == 0  # unknown
    (seq,) = set(SstReader.open(store, sst).read_all().column("seq").to_pylist())
    store.put("staging/s.sst", bytes(store.get(sst).data))
    model = Model()
    with Db.open("db", store, FAST) as db:
        for k in (b"k1", b"k3", b"k4"):
            db.put(k, b"before")
            model.put(k, b"before")
        stats = db.ingest_ssts(["staging/s.sst"], seqs=[seq] if stated else None)
        model.apply([(b"k1", b"sdb1"), (b"k2", b"sdb2"), (b"k3", None)])
        assert (stats.rows, stats.ssts) == (3, 1)
        l0 = [bytes(store.get(sst_path("db", v.sst_id)).data) for v in db.manifest.manifest.l0]
        assert (bytes(store.get(sst).data) in l0) == stated  # linked only when stated
        check_reads(model, db.get, lambda: list(db.scan()), who="our Db")
    _read_both(oracle, model, "db")
