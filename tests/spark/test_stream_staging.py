"""A stream's ``abort()`` deletes only what its own micro-batch's tasks staged, under the run
their messages name; with no message naming one it deletes nothing (issue 37, known problem
7d: an abort with no task message fell back to the writer's own plan, a guess at the run that
could name another run's staging). Driven through the writer's API, as PySpark's streaming sink
runner calls it (pyspark/sql/worker/python_streaming_sink_runner.py)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from slatedb_core import Table, open_store
from slatedb_core.layout import ingest_dir, ingest_staging_dir
from slatedb_core.store.objectstore import ObjectStore
from spark_jobs import datasource_write as dw
from spark_jobs.datasource_options import WriteOptions

pytestmark = pytest.mark.spark

SCHEMA = StructType([StructField("k", StringType()), StructField("v", BinaryType())])


@pytest.fixture
def url(tmp_path: Path) -> str:
    return (tmp_path / "store").as_uri()


def stream_options(url: str) -> WriteOptions:
    return WriteOptions.parse(
        {"url": url, "path": "t", "key": "k", "value": "v"}, SCHEMA, False, stream=True
    )


def stage(wp: dw.WritePlan, batch_id: int) -> dw.StagedRefs:
    """What one task of micro-batch ``batch_id`` planned as ``wp`` stages, as its message."""
    rows = pa.record_batch({"k": pa.array(["a", "z"]), "v": pa.array([b"1", b"2"])})
    plan = dw.batch_plan(wp, batch_id, None)
    return dw.StagedRefs(dw.stage_partition(wp, plan, iter([rows])), None, wp)


def staged(store: ObjectStore) -> set[str]:
    return {m.path for m in store.list(ingest_dir("t") + "/") if "/staged/" in m.path}


def run_dir(wp: dw.WritePlan, batch_id: int) -> str:
    return ingest_staging_dir("t", dw.batch_plan(wp, batch_id, None).job_id, wp.run_id) + "/"


def test_an_abort_with_no_task_message_deletes_no_staging(url: str) -> None:
    store = open_store(url)
    Table.create("t", store, [b"m"]).close()
    o = stream_options(url)
    running = dw.plan_write(o)  # a run whose tasks staged batch 5 and may still commit it
    stage(running, 5)
    before = staged(store)
    assert before
    for messages in ([], [None, None]):
        dw.SlateDBStreamWriter(dw.plan_write(o)).abort(list(messages), 5)  # Spark's new writer
        dw.SlateDBStreamWriter(running).abort(list(messages), 5)  # even one holding that plan
    assert staged(store) == before


def test_an_abort_deletes_its_runs_staging_of_its_batch_only(url: str) -> None:
    store = open_store(url)
    Table.create("t", store, [b"m"]).close()
    o = stream_options(url)
    ours, other = dw.plan_write(o), dw.plan_write(o)
    message = stage(ours, 5)
    stage(ours, 6)  # the same run's next batch
    stage(other, 5)  # another run's batch of the same id
    dw.SlateDBStreamWriter(dw.plan_write(o)).abort([message, None], 5)
    left = staged(store)
    assert not any(p.startswith(run_dir(ours, 5)) for p in left)
    assert any(p.startswith(run_dir(ours, 6)) for p in left)
    assert any(p.startswith(run_dir(other, 5)) for p in left)
