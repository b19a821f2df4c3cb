"""Exactly-once batches of the Spark ingest (``spark_jobs.ingest.ingest(app_id=,
batch_version=)`` and ``--app-id``/``--batch-version``): a batch at or below an app's recorded
version is a no-op on every shard that has it, decided with each shard's commit, so a re-run
after a partial failure completes exactly the missing shards."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from slatedb_core.errors import InvalidArgument
from slatedb_core.layout import ingest_dir
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.table import AppVersion, Table, table_app_versions
from slatedb_core.table.ingest import SKIPPED, WRITTEN, plan_ingest
from slatedb_core.testing import FaultRule, FaultyStore
from spark_jobs.ingest import IngestStats, ingest, main

pytestmark = pytest.mark.spark

TABLE = "t"
SPLITS = [b"k0300", b"k0600"]


def frame(spark: SparkSession, rows: dict[bytes, bytes]) -> DataFrame:
    return spark.createDataFrame(list(rows.items()), "key binary, value binary")


def data(n: int, tag: bytes = b"v", start: int = 0) -> dict[bytes, bytes]:
    return {b"k%04d" % i: tag + b"%d" % i for i in range(start, n)}


def contents(store: ObjectStore) -> dict[bytes, bytes]:
    with Table.open(TABLE, store) as t:
        return dict(t.scan())


def statuses(stats: IngestStats) -> list[str]:
    return [s.status for s in sorted(stats.shards, key=lambda s: s.shard_index)]


@pytest.fixture
def store(store_url: str) -> ObjectStore:
    store = open_store(store_url)
    Table.create(TABLE, store, split_points=SPLITS).close()
    return store


def test_a_batch_is_applied_once(spark: SparkSession, store_url: str, store: ObjectStore) -> None:
    first = ingest(
        frame(spark, data(900)),
        store_url,
        TABLE,
        value_column="value",
        app_id="loader",
        batch_version=3,
    )
    assert statuses(first) == [WRITTEN] * 3 and first.rows == 900
    # the same batch again, with other values: nothing is written
    again = ingest(
        frame(spark, data(900, b"w")),
        store_url,
        TABLE,
        value_column="value",
        app_id="loader",
        batch_version=3,
    )
    assert statuses(again) == [SKIPPED] * 3 and again.rows == 0 and again.shards_written == 0
    assert all(s.partition == -1 for s in again.shards)  # decided up front: no Spark job ran
    assert all("'loader' batch 3" in s.message and "version 3" in s.message for s in again.shards)
    # an older batch after it: nothing either
    older = ingest(
        frame(spark, data(900, b"o")),
        store_url,
        TABLE,
        value_column="value",
        app_id="loader",
        batch_version=2,
    )
    assert statuses(older) == [SKIPPED] * 3
    assert contents(store) == data(900)
    assert table_app_versions(store, TABLE, "loader") == {0: 3, 1: 3, 2: 3}
    # the next batch applies; without a txn, ingests are as before
    ingest(
        frame(spark, data(900, b"n")),
        store_url,
        TABLE,
        value_column="value",
        app_id="loader",
        batch_version=4,
    )
    assert contents(store) == data(900, b"n")
    plain = ingest(frame(spark, data(900, b"p")), store_url, TABLE, value_column="value")
    assert statuses(plain) == [WRITTEN] * 3 and contents(store) == data(900, b"p")


def test_shards_without_rows_record_the_batch_too(
    spark: SparkSession, store_url: str, store: ObjectStore
) -> None:
    """A batch with rows for shard 0 only records its version on all three: its re-run with
    rows for every shard writes none of them."""
    stats = ingest(
        frame(spark, data(300)),
        store_url,
        TABLE,
        value_column="value",
        app_id="app",
        batch_version=0,
    )
    assert statuses(stats) == [WRITTEN] * 3
    assert [s.rows for s in sorted(stats.shards, key=lambda s: s.shard_index)] == [300, 0, 0]
    assert table_app_versions(store, TABLE, "app") == {0: 0, 1: 0, 2: 0}
    rerun = ingest(
        frame(spark, data(900, b"w")),
        store_url,
        TABLE,
        value_column="value",
        app_id="app",
        batch_version=0,
    )
    assert statuses(rerun) == [SKIPPED] * 3
    assert contents(store) == data(300)


@dataclass(frozen=True)
class FailingShard:
    """Store factory: in the tasks, every manifest write of one shard's database fails (after a
    delay, so that the other commit task finishes before Spark gives up on the job)."""

    url: str
    db_path: str

    def __call__(self) -> ObjectStore:
        from pyspark import TaskContext

        store = open_store(self.url)
        if TaskContext.get() is None:  # the driver
            return store
        rule = FaultRule(
            op="put_if_absent",
            path_glob=f"{self.db_path}/manifest/*",
            fail_before=1.0,
            latency_s=1.0,
        )
        return FaultyStore(store, rules=[rule])


@pytest.mark.slow  # moved to the slow suite: make test stays well under 20 minutes
def test_a_rerun_after_a_partial_failure_completes_exactly_the_missing_shard(
    spark: SparkSession, store_url: str, store: ObjectStore
) -> None:
    rows = data(900)
    failing = plan_ingest(TABLE, store).shards[1].db_path
    with pytest.raises(Exception, match="InjectedFault"):
        ingest(
            frame(spark, rows),
            store_url,
            TABLE,
            value_column="value",
            app_id="loader",
            batch_version=7,
            store_factory=FailingShard(store_url, failing),
        )
    assert table_app_versions(store, TABLE, "loader") == {0: 7, 1: None, 2: 7}
    assert contents(store) == {**data(300), **data(900, start=600)}
    # the re-run (a new job), with other values: only the missing shard is written
    rerun = ingest(
        frame(spark, data(900, b"w")),
        store_url,
        TABLE,
        value_column="value",
        app_id="loader",
        batch_version=7,
    )
    assert statuses(rerun) == [SKIPPED, WRITTEN, SKIPPED] and rerun.rows == 300
    assert contents(store) == {**data(300), **data(600, b"w", start=300), **data(900, start=600)}
    assert table_app_versions(store, TABLE, "loader") == {0: 7, 1: 7, 2: 7}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batch_version": 1}, "batch_version needs app_id"),
        ({"app_id": "app"}, "app_id needs batch_version"),
        ({"app_id": "", "batch_version": 1}, "app_id must be 1 to 256"),
        ({"app_id": "x" * 257, "batch_version": 1}, "app_id must be 1 to 256"),
        ({"app_id": 5, "batch_version": 1}, "app_id must be a str"),
        ({"app_id": "app", "batch_version": "1"}, "batch_version must be an int"),
        ({"app_id": "app", "batch_version": -1}, "batch_version must be in"),
        ({"app_id": "app", "batch_version": 1 << 63}, "batch_version must be in"),
    ],
)
def test_bad_options_fail_before_anything_is_written(
    spark: SparkSession,
    store_url: str,
    store: ObjectStore,
    kwargs: dict[str, object],
    match: str,
) -> None:
    with pytest.raises(InvalidArgument, match=match):
        ingest(frame(spark, data(10)), store_url, TABLE, value_column="value", **kwargs)  # type: ignore[arg-type]
    assert list(store.list(ingest_dir(TABLE) + "/")) == []
    assert contents(store) == {}


def test_a_plan_with_another_txn_is_refused(
    spark: SparkSession, store_url: str, store: ObjectStore
) -> None:
    plan = plan_ingest(TABLE, store, txn=AppVersion("app", 1))
    with pytest.raises(InvalidArgument, match="app_id/batch_version"):
        ingest(
            frame(spark, data(10)),
            store_url,
            TABLE,
            value_column="value",
            plan=plan,
            app_id="app",
            batch_version=2,
        )
    # the plan's own txn is used when the call names none
    stats = ingest(frame(spark, data(900)), store_url, TABLE, value_column="value", plan=plan)
    assert statuses(stats) == [WRITTEN] * 3
    assert table_app_versions(store, TABLE, "app") == {0: 1, 1: 1, 2: 1}


def test_the_entry_point_takes_app_id_and_batch_version(
    spark: SparkSession,
    store_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = f"{tmp_path}/in.parquet"
    frame(spark, data(600)).repartition(2).write.parquet(source)
    args = ["--input", source, "--url", store_url, "--path", "cli", "--value-column", "value"]
    # bad options fail before --create writes anything
    # one line and exit 1, no traceback (issue 40, item 6)
    assert main([*args, "--create", "k0300", "--batch-version", "1"]) == 1
    assert "batch_version needs app_id" in capsys.readouterr().err
    assert main([*args, "--create", "k0300", "--app-id", "a"]) == 1
    assert "app_id needs batch_version" in capsys.readouterr().err
    assert list(open_store(store_url).list("cli/")) == []
    with pytest.raises(SystemExit):
        main([*args, "--app-id", "a", "--batch-version", "one"])
    assert "--batch-version" in capsys.readouterr().err
    assert main([*args, "--create", "k0300", "--app-id", "a", "--batch-version", "5"]) == 0
    assert "600 rows into 2 shard(s)" in capsys.readouterr().out
    assert main([*args, "--app-id", "a", "--batch-version", "5"]) == 0
    assert "0 rows into 0 shard(s)" in capsys.readouterr().out
    assert table_app_versions(open_store(store_url), "cli", "a") == {0: 5, 1: 5}
