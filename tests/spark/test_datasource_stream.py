"""``df.writeStream.format("slatedb")``: every micro-batch once per shard, under the query's id
(kept across restarts) as app id and the batch id as version; a query killed between the
commits of two shards and restarted applies the batch to exactly the shards that missed it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from slatedb_core import Table, open_store
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions
from spark_jobs.datasource import SlateDBDataSource

pytestmark = [pytest.mark.spark, pytest.mark.slow]

HERE = Path(__file__).parent / "stream_crash"
TABLE = "events"
SPLITS = [b"k1", b"k2"]


def batch_file(directory: Path, n: int, rows: dict[str, str]) -> None:
    directory.mkdir(exist_ok=True)
    (directory / f"batch-{n:03d}.json").write_text(
        "".join(json.dumps({"id": k, "v": v}) + "\n" for k, v in rows.items())
    )


def run_driver(source: Path, url: str, checkpoint: Path, kill_marker: Path | None) -> int:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(HERE), str(Path(__file__).parents[2]), env.get("PYTHONPATH", "")]
    )
    env.pop("SLATEDB_TEST_KILL_AFTER_SHARD_COMMITS", None)
    if kill_marker is not None:
        env["SLATEDB_TEST_KILL_AFTER_SHARD_COMMITS"] = str(kill_marker)
    proc = subprocess.run(
        [sys.executable, str(HERE / "driver.py"), str(source), url, TABLE, str(checkpoint)],
        env=env,
        start_new_session=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if kill_marker is None and proc.returncode != 0:
        raise AssertionError(f"driver failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc.returncode


def recorded(url: str) -> dict[int, dict[str, int]]:
    """Shard index -> the app versions its latest manifest records."""
    store = open_store(url)
    with Table.open(TABLE, store) as t:
        return {
            s.index: {
                a.app_id: a.version
                for a in ManifestStore(store, s.db_path).read_latest().manifest.transactions
            }
            for s in t.shards
        }


def test_a_query_killed_between_shard_commits_applies_each_batch_once(tmp_path: Path) -> None:
    url = (tmp_path / "store").as_uri()
    store = open_store(url)
    Table.create(TABLE, store, split_points=SPLITS).close()
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    first = {f"k{s}-{i}": f"a{i}" for s in range(3) for i in range(5)}
    batch_file(source, 0, first)
    marker = tmp_path / "killed"

    # 1. the query dies (SIGKILL of driver, JVM and workers) right after one shard committed
    code = run_driver(source, url, checkpoint, marker)
    assert marker.exists(), f"the driver ended ({code}) before committing a shard"
    assert code != 0
    committed = int(marker.read_text())
    after_kill = recorded(url)
    applied = [i for i, apps in after_kill.items() if apps]
    assert applied == [committed]
    (app_id,) = after_kill[committed]
    assert app_id.startswith("stream:") and after_kill[committed][app_id] == 0

    # 2. later acknowledged writes to the shard that has batch 0: a re-applied batch 0 would
    #    undo them
    victim, changed = f"k{committed}-0", f"k{committed}-1"
    with Table.open(TABLE, store) as t, t.writer(committed, DbOptions()) as db:
        db.delete(victim.encode())
        db.put(changed.encode(), b"later")
        db.flush()

    # 3. restarted with the same checkpoint: batch 0 again (the shards that missed it), then 1
    second = {f"k{s}-{i}": f"b{i}" for s in range(3) for i in range(10, 13)}
    batch_file(source, 1, second)
    run_driver(source, url, checkpoint, None)

    with Table.open(TABLE, store) as t:
        got = {k.decode(): v for k, v in t.scan()}
    want = {
        k: json.dumps({"v": v}, separators=(",", ":")).encode()
        for k, v in {**first, **second}.items()
    }
    del want[victim]
    want[changed] = b"later"
    assert got == want
    assert recorded(url) == {i: {app_id: 1} for i in range(3)}


@pytest.fixture(scope="module")
def registered(spark: SparkSession) -> SparkSession:
    spark.dataSource.register(SlateDBDataSource)
    return spark


def test_stream_from_a_rate_source(registered: SparkSession, tmp_path: Path) -> None:
    """In-process: a rate source's rows land once each; the app id option names the stream."""
    spark = registered
    url = (tmp_path / "store").as_uri()
    stream = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 50)
        .load()
        .selectExpr(
            "format_string('r%06d', value) AS id", "CAST(CAST(value AS STRING) AS BINARY) AS v"
        )
    )
    query = (
        stream.writeStream.format("slatedb")
        .option("url", url)
        .option("path", TABLE)
        .option("key", "id")
        .option("value", "v")
        .option("app_id", "rate-loader")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    deadline = time.monotonic() + 120
    try:
        while query.lastProgress is None or query.lastProgress["batchId"] < 2:
            assert time.monotonic() < deadline, "the stream made no progress"
            assert query.exception() is None, query.exception()
            time.sleep(0.5)
    finally:
        query.stop()
    store = open_store(url)
    with Table.open(TABLE, store) as t:
        got = dict(t.scan())
    assert got, "no rows landed"
    assert all(int(v) == int(k[1:]) for k, v in got.items())
    versions = recorded(url)
    assert set(versions[0]) == {"rate-loader"} and versions[0]["rate-loader"] >= 1
