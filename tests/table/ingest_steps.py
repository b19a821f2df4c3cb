"""The steps of a staged ingest, as the table tests and the table simulation
(:mod:`tests.sim.table_ingest`) drive them: ``plan_ingest`` on the driver, ``stage_ssts`` in a
map task, ``commit_shard`` in one task per shard (what ``spark_jobs.ingest`` does). Each step is
one call here so that a test can put a merge, a GC or a delete between any two.

Also the one batch of the exactly-once tests (:data:`BATCH`: 100 keys over two shards split at
:data:`MID`) and its re-run."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import timedelta

import pyarrow as pa
import pytest

from slatedb_core.errors import InjectedFault
from slatedb_core.gc.service import run_gc_once
from slatedb_core.manifest.model import AppVersion
from slatedb_core.options import GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.table.ingest import (
    WRITTEN,
    IngestPlan,
    ShardIngestStats,
    StagedSst,
    attempt_dir,
    commit_shard,
    plan_ingest,
    stage_ssts,
)
from slatedb_core.table.overwrite import commit_overwrite
from slatedb_core.testing import FaultyStore

KEYS = [b"k%03d" % i for i in range(100)]
MID = b"k050"  # shard 0: k000..k049, shard 1: k050..k099
BATCH = AppVersion("loader", 7)
ALL = {k: b"v-" + k for k in KEYS}
"""The batch's rows (a re-run of the same batch stages them again)."""


def rows_batch(rows: Mapping[bytes, bytes | None]) -> pa.RecordBatch:
    """``rows`` as one Arrow batch of the ingest's schema (keys sorted; a None value deletes)."""
    keys = sorted(rows)
    return pa.record_batch(
        [pa.array(keys, pa.binary()), pa.array([rows[k] for k in keys], pa.binary())],
        ["key", "value"],
    )


def stage(
    store: ObjectStore,
    plan: IngestPlan,
    rows: Mapping[bytes, bytes | None],
    *,
    run: str = "run",
    partition: int = 0,
    attempt: int = 0,
) -> list[StagedSst]:
    """The map task of input ``partition`` (attempt ``attempt`` of run ``run``) stages ``rows``."""
    directory = attempt_dir(plan, run, partition, attempt)
    return list(stage_ssts(store, plan, directory, 0, [rows_batch(rows)], partition=partition))


def commit(
    store: ObjectStore,
    plan: IngestPlan,
    staged: Iterable[StagedSst],
    index: int,
    *,
    run: str = "run",
    partition: int = -1,
    attempt: int = 0,
) -> ShardIngestStats:
    """The commit task of the plan's shard ``index``: the SSTs ``staged`` for it, with their
    seqs."""
    mine = [s for s in staged if s.shard.index == index]
    return commit_shard(
        store,
        plan,
        run,
        plan.shards[index],
        [s.path for s in mine],
        partition=partition,
        attempt=attempt,
        seqs=[s.seq for s in mine],
    )


def stage_and_commit(
    store: ObjectStore,
    plan: IngestPlan,
    rows: Mapping[bytes, bytes | None],
    *,
    run: str = "run",
    attempt: int = 0,
) -> str:
    """Attempt ``attempt`` of a one-shard job: stage ``rows`` afresh (as a re-run Spark map
    stage does) and commit shard 0 without their seqs; the commit's status."""
    staged = stage(store, plan, rows, run=run, attempt=attempt)
    return commit_shard(
        store, plan, run, plan.shards[0], [s.path for s in staged], attempt=attempt
    ).status


def by_shard(staged: Iterable[StagedSst]) -> dict[int, list[tuple[str, int]]]:
    """``staged`` as ``commit_overwrite`` takes it: (path, seq) per shard index."""
    out: dict[int, list[tuple[str, int]]] = {}
    for sst in staged:
        out.setdefault(sst.shard.index, []).append((sst.path, sst.seq))
    return out


def overwrite_dies_at(
    store: ObjectStore,
    plan: IngestPlan,
    staged: Mapping[int, list[tuple[str, int]]],
    put: str,
    *,
    run: str = "run",
) -> None:
    """An attempt of the overwrite's commit that dies at its first ``put_if_absent`` of an
    object matching ``put`` (every retry of it fails too), leaving what it did before."""
    crashing = FaultyStore(store)
    crashing.fail_next("put_if_absent", put, times=1000)
    with pytest.raises(InjectedFault):
        commit_overwrite(crashing, plan, run, staged)


def rerun(
    store: ObjectStore,
    job_id: str,
    txn: AppVersion = BATCH,
    rows: Mapping[bytes, bytes | None] = ALL,
) -> list[ShardIngestStats]:
    """A re-run of batch ``txn`` by a new job ``job_id`` on table ``t``'s latest map: every
    shard committed."""
    plan = plan_ingest("t", store, job_id=job_id, txn=txn)
    staged = stage(store, plan, rows)
    return [commit(store, plan, staged, i) for i in range(len(plan.shards))]


def half_committed(store: ObjectStore) -> tuple[IngestPlan, list[StagedSst]]:
    """A two-shard table ``t`` and job ``job-1`` of :data:`BATCH`, which committed shard 0 only
    (so far)."""
    Table.create("t", store, [MID]).close()
    plan = plan_ingest("t", store, job_id="job-1", txn=BATCH)
    staged = stage(store, plan, ALL)
    assert commit(store, plan, staged, 0).status == WRITTEN
    return plan, staged


def contents(store: ObjectStore) -> dict[bytes, bytes]:
    """Every row of table ``t``."""
    with Table.open("t", store) as t:
        return dict(t.scan())


def delete(store: ObjectStore, key: bytes) -> None:
    """Delete ``key`` of table ``t`` through its shard's writer."""
    with Table.open("t", store) as t, t.writer(t.shard_map.shard_for(key)) as db:
        db.delete(key)
        db.flush()


def stage_value(
    store: ObjectStore, plan: IngestPlan, value: bytes
) -> dict[int, list[tuple[str, int]]]:
    """Stage keys ``a``, ``k`` and ``x`` at ``value`` for ``plan``; (path, seq) per shard index
    (the sources an overwrite's commit takes)."""
    keys = [b"a", b"k", b"x"]
    batch = pa.record_batch([pa.array(keys), pa.array([value] * 3)], ["key", "value"])
    staged: dict[int, list[tuple[str, int]]] = {}
    for sst in stage_ssts(store, plan, attempt_dir(plan, "run", 0, 0), 0, [batch], partition=0):
        staged.setdefault(sst.shard.index, []).append((sst.path, sst.seq))
    return staged


def prune_retired(t: Table, store: ObjectStore) -> None:
    """Resume (soft-destroys the retired shards), GC them away, resume again (drops the
    databases the GC deleted from the map, rescale.resume), then collect the old map
    versions."""
    t.resume()
    gc = GarbageCollectorOptions(min_age=timedelta(0), db_delete_grace=timedelta(0))
    for path in t.shard_map.retired:
        assert run_gc_once(path, store, gc).database_deleted
    t.resume()
    t.collect_garbage(min_age=timedelta(0))
    t.refresh()
    assert t.shard_map.retired == ()
