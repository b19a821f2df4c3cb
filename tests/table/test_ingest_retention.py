"""Collecting ingest leftovers never lets a job apply twice, whatever ``ingest_min_age`` (issue 37,
hole 4: ``collect_garbage(ingest_min_age=0)`` deleted a committed job's done marker, and a later
attempt of the job, staging its rows afresh, committed them again over a delete acknowledged
since). The API, the CLI's ``--ingest-min-age`` and Dagster's ``ingest_retention`` all reach
``collect_leftovers``; each is driven here with 0."""

from __future__ import annotations

import json
from datetime import timedelta

import pyarrow as pa
import pytest
from click.testing import CliRunner

from slatedb_core.cli.main import cli
from slatedb_core.errors import IngestJobExpired, SlateDBError
from slatedb_core.layout import ingest_done_marker, ingest_plan_record
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.table import Table
from slatedb_core.table.ingest import (
    SKIPPED,
    WRITTEN,
    AppVersion,
    IngestPlan,
    attempt_dir,
    commit_shard,
    plan_ingest,
    stage_ssts,
)
from slatedb_core.table.ingest_cleanup import collect_leftovers
from slatedb_core.testing import FaultyStore
from tests.table.conftest import OPTS


def _rows(value: bytes) -> list[pa.RecordBatch]:
    return [pa.record_batch([pa.array([b"a"]), pa.array([value])], ["key", "value"])]


def _commit(store: ObjectStore, plan: IngestPlan, attempt: int) -> str:
    """Stage the job's rows afresh (as a re-run Spark map stage does) and commit shard 0."""
    srcs = [
        s.path
        for s in stage_ssts(
            store, plan, attempt_dir(plan, "run", 0, attempt), 0, _rows(b"1"), partition=0
        )
    ]
    return commit_shard(store, plan, "run", plan.shards[0], srcs, attempt=attempt).status


def _committed_then_deleted(store: ObjectStore, plan: IngestPlan) -> None:
    assert _commit(store, plan, 0) == WRITTEN
    with Table.open("t", store, OPTS) as t:
        with t.writer(0) as db:
            db.delete(b"a")  # acknowledged after the job's commit


def _get(store: ObjectStore) -> bytes | None:
    with Table.open("t", store, OPTS) as t:
        return t.get(b"a")


def _gc_api(store: ObjectStore) -> None:
    with Table.open("t", store, OPTS) as t:
        t.collect_garbage(min_age=timedelta(0), ingest_min_age=timedelta(0))


def _gc_cli(store: ObjectStore) -> None:
    r = CliRunner().invoke(
        cli,
        [
            "--url",
            store.url,
            "--path",
            "t",
            "table",
            "gc",
            "--min-age",
            "0s",
            "--ingest-min-age",
            "0s",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["ingest_objects"] > 0


def _gc_dagster(store: ObjectStore) -> None:
    """The rescaling asset (which collects the table's garbage), ``ingest_retention="0s"``."""
    import dagster as dg

    from orchestration.assets import rescaling
    from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource

    managed = ManagedDatabasesResource(gc_min_age="0s", ingest_retention="0s")
    result = rescaling(
        context=dg.build_asset_context(partition_key="t"),
        store=ObjectStoreResource(url=store.url),
        managed=managed,
    )
    assert isinstance(result, dg.MaterializeResult)
    deleted = (result.metadata or {})["ingest_leftovers_deleted"]
    assert isinstance(deleted, dg.IntMetadataValue) and (deleted.value or 0) > 0


GCS = {"api": _gc_api, "cli": _gc_cli, "dagster": _gc_dagster}


@pytest.mark.parametrize("gc", sorted(GCS))
def test_a_job_whose_marker_was_collected_never_commits_again(gc: str) -> None:
    store = open_store(f"memory://retention-{gc}")
    Table.create("t", store, [], options=OPTS).close()
    plan = plan_ingest("t", store, job_id="job")
    _committed_then_deleted(store, plan)
    GCS[gc](store)
    assert not store.exists(ingest_done_marker("t", "job", plan.shards[0].shard_id))
    with pytest.raises(IngestJobExpired, match="planning the job again writes them again"):
        _commit(store, plan, 1)
    assert _get(store) is None  # the acknowledged delete stands


def test_a_job_planned_but_not_committed_is_refused_once_collected(mem: ObjectStore) -> None:
    """Nothing of the job committed yet: refused all the same (its staged SSTs may be gone too);
    the store keeps what it had and a new plan commits."""
    Table.create("t", mem, [], options=OPTS).close()
    plan = plan_ingest("t", mem, job_id="job")
    collect_leftovers(mem, "t", timedelta(0))
    with pytest.raises(IngestJobExpired):
        _commit(mem, plan, 0)
    assert _get(mem) is None
    assert _commit(mem, plan_ingest("t", mem), 0) == WRITTEN
    assert _get(mem) == b"1"


def test_a_txn_job_is_settled_by_its_shards_records_after_collection(mem: ObjectStore) -> None:
    """With a txn the shard's manifest records the batch: the job is SKIPPED, not refused."""
    Table.create("t", mem, [], options=OPTS).close()
    plan = plan_ingest("t", mem, job_id="job", txn=AppVersion("app", 1))
    _committed_then_deleted(mem, plan)
    collect_leftovers(mem, "t", timedelta(0))
    assert _commit(mem, plan, 1) == SKIPPED
    assert _get(mem) is None


def test_markers_are_kept_when_the_plan_record_could_not_be_deleted(mem: ObjectStore) -> None:
    """The plan record goes first: a pass that fails to delete it deletes none of the job's
    markers, so a marker is never gone while its job's plan record is there."""
    Table.create("t", mem, [], options=OPTS).close()
    plan = plan_ingest("t", mem, job_id="job")
    assert _commit(mem, plan, 0) == WRITTEN
    faulty = FaultyStore(mem)
    faulty.fail_next("delete", ingest_plan_record("t", "job"))
    with pytest.raises(SlateDBError):
        collect_leftovers(faulty, "t", timedelta(0))
    assert mem.exists(ingest_done_marker("t", "job", plan.shards[0].shard_id))
    collect_leftovers(mem, "t", timedelta(0))
    assert not mem.exists(ingest_done_marker("t", "job", plan.shards[0].shard_id))
    assert not mem.exists(ingest_plan_record("t", "job"))


def test_staged_ssts_collected_under_a_running_job_are_a_typed_error(mem: ObjectStore) -> None:
    """Review with real Spark failures: a table GC at ingest_min_age=0 collects the staged SSTs
    of a job still running; its commit (with a txn, settled by the shards' records, so no plan
    record check) failed with a bare ObjectNotFound on an ``_ingest/...`` path that said nothing
    of the cause. It is IngestJobExpired now, which names it; the shard is left unwritten."""
    from slatedb_core.manifest.model import AppVersion
    from slatedb_core.table.ingest import attempt_dir, commit_shard, plan_ingest, stage_ssts

    Table.create("t", mem).close()
    plan = plan_ingest("t", mem, job_id="j", txn=AppVersion("app", 1))
    rows = [pa.record_batch([pa.array([b"a"]), pa.array([b"1"])], ["key", "value"])]
    staged = list(stage_ssts(mem, plan, attempt_dir(plan, "run", 0, 0), 0, rows, partition=0))
    with Table.open("t", mem) as t:
        t.collect_garbage(min_age=timedelta(0), ingest_min_age=timedelta(0))
    with pytest.raises(IngestJobExpired, match="staged"):
        commit_shard(
            mem, plan, "run", plan.shards[0], [s.path for s in staged], seqs=[s.seq for s in staged]
        )
    with Table.open("t", mem) as t:
        assert t.get(b"a") is None
