"""``format("slatedb")`` refuses an option it does not know on reads, as on writes, naming the
known ones and the closest (issue 40, item 2: ``.option("chekpoint", ...)`` used to read the
latest state instead of the snapshot)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from slatedb_core.errors import InvalidArgument
from spark_jobs.datasource import SlateDBDataSource
from spark_jobs.datasource_options import check_option_names

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def table_url(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    spark.dataSource.register(SlateDBDataSource)
    url = (tmp_path_factory.mktemp("unknown_options") / "store").as_uri()
    df = spark.createDataFrame([("a", b"1"), ("b", b"2")], "k string, v binary")
    (
        df.write.format("slatedb")
        .option("url", url)
        .option("path", "t")
        .option("key", "k")
        .option("value", "v")
        .mode("append")
        .save()
    )
    yield url


def test_misspelt_read_option_is_refused_naming_the_right_one(
    spark: SparkSession, table_url: str
) -> None:
    reader = spark.read.format("slatedb").option("url", table_url).option("path", "t")
    with pytest.raises(Exception, match="chekpoint") as raised:
        reader.option("chekpoint", "x").load().collect()
    message = str(raised.value)
    assert "did you mean 'checkpoint'" in message, message
    assert "merge_operator" in message, message  # the known names are listed


def test_spark_generic_path_option_is_accepted(spark: SparkSession, table_url: str) -> None:
    """``load(path)`` passes the path as Spark's own ``path`` option."""
    rows = spark.read.format("slatedb").option("url", table_url).load("t").collect()
    assert sorted(bytes(r.key) for r in rows) == [b"a", b"b"]


def test_one_check_for_reads_and_writes() -> None:
    """The shared check, as both option parsers call it: case-insensitive names, a suggestion."""
    check_option_names({"URL": "x", "Path": "t"}, frozenset({"url", "path"}), "a read")
    with pytest.raises(InvalidArgument, match=r"unknown option 'pth' \(did you mean 'path'\?\)"):
        check_option_names({"url": "x", "pth": "t"}, frozenset({"url", "path"}), "a read")
