"""Review of the object-store Parquet input (spark_jobs/parquet_input.py) and of
spark_jobs/compare.py: no row read twice from a Spark write's leftovers, no column silently
converted or lost, no key in a message; compare never says "equal" for a table that differs."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from slatedb_core import open_store
from slatedb_core.errors import InvalidArgument
from spark_jobs.compare import compare
from spark_jobs.parquet_input import parquet_objects, read_input


def _parquet(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def _with_prefix(url: str, prefix: str) -> str:
    base, _, query = url.partition("?")
    return f"{base.rstrip('/')}/{prefix}?{query}"


ROWS = pa.table({"key": ["a", "b"], "amount": [1.5, 2.5]})


# ---- listing: what Spark's own reader would read, nothing more -----------------------------------
def test_uncommitted_task_outputs_of_a_spark_write_are_not_read(tmp_path: Path) -> None:
    """A Spark write to S3 (FileOutputCommitter) stages every task's file under
    ``_temporary/`` and copies it out at commit; a failed or running job leaves them there, and
    ``.spark-staging-*`` likewise. Spark's reader skips them; so must ours, or each row is read
    twice (before: only the file's own name was checked)."""
    store = open_store(tmp_path / "store")
    data = _parquet(ROWS)
    store.put("_in/orders/part-00000.parquet", data)
    store.put("_in/orders/_temporary/0/_temporary/attempt_1/part-00000.parquet", data)
    store.put("_in/orders/_temporary/0/task_1/part-00000.parquet", data)
    store.put("_in/orders/.spark-staging-1/part-00000.parquet", data)
    store.put("_in/orders/sub/part-00001.parquet", data)  # a plain nested folder: read
    store.put("_in/orders2/part-00000.parquet", data)  # a prefix of another prefix: not read
    got = [p for p, _ in parquet_objects(store, "_in/orders")]
    assert got == ["_in/orders/part-00000.parquet", "_in/orders/sub/part-00001.parquet"]


def test_partition_folders_are_refused_not_flattened(tmp_path: Path) -> None:
    """``date=2024-01-01/part.parquet``: Spark's reader adds a ``date`` column; reading the
    files alone would drop it without a word."""
    store = open_store(tmp_path / "store")
    store.put("in/date=2024-01-01/part-0.parquet", _parquet(ROWS))
    with pytest.raises(InvalidArgument, match="partition folder"):
        parquet_objects(store, "in")


# ---- objects that do not agree -----------------------------------------------------------------
@pytest.mark.spark
@pytest.mark.s3
def test_objects_must_agree_on_column_types(spark: SparkSession, s3_url: str) -> None:
    """One object's ``amount`` is a string: before, each was cast to the first object's types,
    so "2.5" became 2.5 (and 7 would have become "7") without a word."""
    store = open_store(s3_url)
    store.put("drift/part-0.parquet", _parquet(ROWS))
    store.put("drift/part-1.parquet", _parquet(pa.table({"key": ["c"], "amount": ["2.5"]})))
    with pytest.raises(Exception, match="has columns"):
        read_input(spark, _with_prefix(s3_url, "drift")).collect()

    # what is only a representation is the same column: large strings, a "not null" in one file
    strict = pa.schema([pa.field("key", pa.string(), nullable=False), ("amount", pa.float64())])
    store.put("same/part-0.parquet", _parquet(ROWS.cast(strict)))
    store.put(
        "same/part-1.parquet",
        _parquet(pa.table({"key": pa.array(["c", None], pa.large_string()), "amount": [3.5, 4.5]})),
    )
    got = sorted(read_input(spark, _with_prefix(s3_url, "same")).collect(), key=lambda r: r.amount)
    assert [(r.key, r.amount) for r in got] == [("a", 1.5), ("b", 2.5), ("c", 3.5), (None, 4.5)]


@pytest.mark.spark
@pytest.mark.s3
def test_messages_do_not_carry_the_keys(spark: SparkSession, s3_url: str) -> None:
    assert "secret_access_key=testing" in s3_url
    with pytest.raises(InvalidArgument) as e:
        read_input(spark, _with_prefix(s3_url, "nothing-here"))
    assert "no .parquet objects" in str(e.value)
    assert "testing" not in str(e.value)


# ---- compare -----------------------------------------------------------------------------------
@pytest.mark.spark
def test_compare_a_plain_value_table(spark: SparkSession) -> None:
    """The cluster test's own table (ingest --value-column payload: columns key, value). Before:
    "the table has no column(s) ['payload']"."""
    inp = spark.createDataFrame(
        [("k1", b"p1"), ("k2", b"p2"), ("k2", b"p2")], "order_id string, payload binary"
    )
    same = spark.createDataFrame(
        [("k1", b"p1"), ("k2", b"p2"), ("k2", b"p2")], "key string, value binary"
    )
    assert compare(inp, same, "order_id") == {
        "input_rows": 3,
        "table_rows": 3,
        "input_distinct_keys": 2,
        "missing_from_table": 0,
        "not_in_input": 0,
    }
    once = spark.createDataFrame(
        [("k1", b"p1"), ("k2", b"p2"), ("k3", b"")], "key string, value binary"
    )
    got = compare(inp, once, "order_id", "payload")
    assert (got["missing_from_table"], got["not_in_input"]) == (1, 1)
    # a string value column is stored as its UTF-8 bytes
    text = spark.createDataFrame([("k1", "é")], "order_id string, payload string")
    stored = spark.createDataFrame([("k1", "é".encode())], "key string, value binary")
    assert compare(text, stored, "order_id")["missing_from_table"] == 0


@pytest.mark.spark
def test_compare_never_converts_a_value_to_make_it_equal(spark: SparkSession) -> None:
    """Before, the table's columns were cast to the input's types: a table holding 1.7 and 2.2
    where the input had 1 and 2 was "equal" (and a string " 1" equal to the integer 1); and a
    column only the table has was ignored."""
    inp = spark.createDataFrame([("k1", 1), ("k2", 2)], "order_id string, amount int")
    table = spark.createDataFrame([("k1", 1.7), ("k2", 2.2)], "key string, amount double")
    with pytest.raises(ValueError, match="amount"):
        compare(inp, table, "order_id")
    extra = spark.createDataFrame(
        [("k1", 1, "x"), ("k2", 2, "y")], "key string, amount int, note string"
    )
    with pytest.raises(ValueError, match="columns"):
        compare(inp, extra, "order_id")
    changed = spark.createDataFrame([("k1", 1), ("k2", 3)], "key string, amount int")
    got = compare(inp, changed, "order_id")
    assert (got["missing_from_table"], got["not_in_input"]) == (1, 1)


# ---- spark-submit with a local master keeps the driver on loopback -----------------------------
SUBMITTED = """
import json
from spark_jobs.session import get_session
spark = get_session()
conf = spark.sparkContext.getConf()
print("RESULT " + json.dumps({
    "bind": conf.get("spark.driver.bindAddress", None),
    "host": conf.get("spark.driver.host", None),
    "ui": spark.sparkContext.uiWebUrl,
}))
spark.stop()
"""


@pytest.mark.spark
@pytest.mark.slow
def test_spark_submit_local_master_keeps_the_driver_on_loopback(tmp_path: Path) -> None:
    """``spark-submit --master local[1] job.py`` on a machine without ``SPARK_LOCAL_IP``: the
    session used to force 127.0.0.1 and no UI; since get_session defers to spark-submit, the
    driver bound to the host's address and its UI to 0.0.0.0:4040."""
    import json
    import os
    import subprocess
    import sys

    script = tmp_path / "job.py"
    script.write_text(SUBMITTED)
    env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_IP"}
    env.update(
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONPATH=str(Path(__file__).resolve().parents[2]),
    )
    submit = Path(sys.executable).parent / "spark-submit"
    res = subprocess.run(
        [str(submit), "--master", "local[1]", str(script)],
        capture_output=True,
        text=True,
        timeout=280,
        env=env,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    line = next(x for x in res.stdout.splitlines() if x.startswith("RESULT "))
    got = json.loads(line[len("RESULT ") :])
    assert got == {"bind": "127.0.0.1", "host": "127.0.0.1", "ui": None}
