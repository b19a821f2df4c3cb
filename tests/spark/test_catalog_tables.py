"""``format("slatedb")`` used through Spark's catalog, a table by name (issue 40 review finding:
the catalog paths gave a confusing "unknown options" message).

What PySpark 4.3 hands the data source, as observed with real Spark:

* ``CREATE TABLE t USING slatedb OPTIONS (...)`` without columns asks ``schema()`` with the
  OPTIONS plus the table's properties: ``location``, ``owner``, ``provider``, ``external``,
  ``comment``, a copy of each OPTION as ``option.<name>`` and any TBLPROPERTIES. Those are not
  the user's options and must not be refused as unknown; a misspelt OPTION still is.
* Reading or writing such a table by name (``SELECT``, ``spark.table``, ``INSERT INTO``,
  ``insertInto``, ``CREATE TABLE ... AS SELECT``) reaches ``reader()``/``writer()`` with no
  options at all (``writeStream.toTable``: only ``checkpointLocation``): the error says so, with
  the way that works.
* ``saveAsTable`` and ``writeTo(...).create()`` pass the writer's options: they write.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from slatedb_core.errors import CatalogOptionsMissing, InvalidArgument
from spark_jobs.datasource import SlateDBDataSource
from spark_jobs.datasource_options import check_option_names

pytestmark = pytest.mark.spark

KNOWN = frozenset({"url", "path", "checkpoint"})


@pytest.fixture(scope="module")
def db(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A catalog database of this module (its managed tables under a temporary folder)."""
    spark.dataSource.register(SlateDBDataSource)
    name = f"catalog40_{uuid.uuid4().hex[:8]}"
    location = (tmp_path_factory.mktemp("catalog") / "warehouse").as_uri()
    spark.sql(f"CREATE DATABASE {name} LOCATION '{location}'")
    try:
        yield name
    finally:
        spark.sql(f"DROP DATABASE {name} CASCADE")


@pytest.fixture(scope="module")
def url(spark: SparkSession, db: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store holding table ``t`` (keys a, b), written the supported way."""
    url = (tmp_path_factory.mktemp("catalog_store") / "store").as_uri()
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
    return url


def _missing(raised: BaseException, verb: str) -> str:
    """The data source's own line in Spark's error: one line, typed, with the next step."""
    lines = [x for x in str(raised).splitlines() if "CatalogOptionsMissing:" in x]
    assert lines, str(raised)[-2000:]
    line = lines[-1]
    assert "Spark's catalog" in line, line
    assert f"spark.{verb}.format('slatedb')" in line or f"df.{verb}.format('slatedb')" in line, line
    return line


def _read_keys(spark: SparkSession, url: str, path: str) -> list[bytes]:
    rows = spark.read.format("slatedb").option("url", url).load(path).collect()
    return sorted(bytes(r.key) for r in rows)


@pytest.mark.parametrize(
    "clause",
    [
        "",
        "COMMENT 'orders' TBLPROPERTIES ('team'='ops')",
    ],
)
def test_create_table_is_not_refused_for_spark_catalog_properties(
    spark: SparkSession, db: str, url: str, clause: str
) -> None:
    """Spark adds location/owner/provider/option.url (and the table's own properties) to what
    ``schema()`` sees: those are not unknown options. The table gets its columns."""
    name = f"{db}.created_{uuid.uuid4().hex[:6]}"
    spark.sql(f"CREATE TABLE {name} USING slatedb OPTIONS (url '{url}', path 't') {clause}")
    assert spark.table(name).columns == ["key", "value"]


def test_create_table_with_location_is_not_refused(spark: SparkSession, db: str, url: str) -> None:
    """``LOCATION`` is Spark's ``path`` (and adds ``external``)."""
    name = f"{db}.located"
    spark.sql(f"CREATE EXTERNAL TABLE {name} USING slatedb OPTIONS (url '{url}') LOCATION 't'")
    assert spark.table(name).columns == ["key", "value"]


def test_misspelt_table_option_is_refused_once_naming_the_right_one(
    spark: SparkSession, db: str, url: str
) -> None:
    with pytest.raises(Exception, match="chekpoint") as raised:
        spark.sql(
            f"CREATE TABLE {db}.misspelt USING slatedb "
            f"OPTIONS (url '{url}', path 't', chekpoint 'x')"
        )
    line = [x for x in str(raised.value).splitlines() if "InvalidArgument:" in x][-1]
    assert "unknown option 'chekpoint' (did you mean 'checkpoint'?)" in line, line
    for injected in ("option.", "location", "owner", "provider"):
        assert f"'{injected}" not in line, line
    assert "merge_operator" in line, line  # the known names are listed


@pytest.mark.parametrize("how", ["sql", "table"])
def test_reading_a_table_by_name_says_the_catalog_passed_no_options(
    spark: SparkSession, db: str, url: str, how: str
) -> None:
    name = f"{db}.read_{how}"
    spark.sql(f"CREATE TABLE {name} (key binary, value binary) USING slatedb OPTIONS (url '{url}')")
    frame = spark.sql(f"SELECT * FROM {name}") if how == "sql" else spark.table(name)
    with pytest.raises(Exception, match="CatalogOptionsMissing") as raised:
        frame.collect()
    _missing(raised.value, "read")


def test_inserting_into_a_table_by_name_says_the_catalog_passed_no_options(
    spark: SparkSession, db: str, url: str
) -> None:
    name = f"{db}.inserted"
    spark.sql(f"CREATE TABLE {name} (key binary, value binary) USING slatedb OPTIONS (url '{url}')")
    with pytest.raises(Exception, match="CatalogOptionsMissing") as raised:
        spark.sql(f"INSERT INTO {name} VALUES (X'63', X'33')")
    _missing(raised.value, "write")
    assert _read_keys(spark, url, "t") == [b"a", b"b"]  # nothing was written


def test_create_table_as_select_says_the_catalog_passed_no_options(
    spark: SparkSession, db: str, url: str
) -> None:
    with pytest.raises(Exception, match="CatalogOptionsMissing") as raised:
        spark.sql(
            f"CREATE TABLE {db}.ctas USING slatedb OPTIONS (url '{url}', path 'ctas', key 'k') "
            "AS SELECT 'q' AS k, X'01' AS v"
        )
    _missing(raised.value, "write")


def test_save_as_table_writes_and_reading_it_by_name_says_how_to_read(
    spark: SparkSession, db: str, url: str
) -> None:
    """``saveAsTable`` hands the writer its options: the rows are written (append, then an
    overwrite). The catalog entry it leaves cannot be read or inserted into by name."""
    name = f"{db}.saved"
    writer = (
        spark.createDataFrame([("x", b"7")], "k string, v binary")
        .write.format("slatedb")
        .option("url", url)
        .option("path", "saved")
        .option("key", "k")
        .option("value", "v")
    )
    writer.mode("append").saveAsTable(name)
    assert _read_keys(spark, url, "saved") == [b"x"]
    writer.mode("overwrite").saveAsTable(name)
    assert _read_keys(spark, url, "saved") == [b"x"]
    with pytest.raises(Exception, match="CatalogOptionsMissing") as raised:
        spark.table(name).collect()
    _missing(raised.value, "read")
    with pytest.raises(Exception, match="CatalogOptionsMissing") as raised:
        spark.createDataFrame([("y", b"8")], "k string, v binary").write.insertInto(name)
    _missing(raised.value, "write")


def test_no_options_at_all_is_a_typed_one_line_error() -> None:
    for what in ("a read", "a write"):
        with pytest.raises(CatalogOptionsMissing) as raised:
            check_option_names({}, KNOWN, what)
        assert isinstance(raised.value, InvalidArgument)
        assert "\n" not in str(raised.value)
        assert ".option('url', ...)" in str(raised.value)


def test_spark_injected_names_are_not_user_options() -> None:
    """The shapes Spark 4.3 was seen to hand over; ``__``-prefixed names are Spark's own."""
    catalog = {
        "location": "t",
        "url": "u",
        "option.url": "u",
        "external": "true",
        "owner": "root",
        "comment": "c",
        "team": "ops",  # a TBLPROPERTIES entry: not an OPTION
        "path": "t",
        "provider": "slatedb",
    }
    check_option_names(catalog, KNOWN, "a read")
    check_option_names({"url": "u", "path": "t", "__spark_internal__": "x"}, KNOWN, "a read")
    with pytest.raises(InvalidArgument, match=r"unknown option 'pth' \(did you mean 'path'\?\)"):
        check_option_names({**catalog, "pth": "t", "option.pth": "t"}, KNOWN, "a read")
    with pytest.raises(InvalidArgument, match="unknown option 'owner'"):
        check_option_names({"url": "u", "path": "t", "owner": "me"}, KNOWN, "a read")


def test_stream_into_a_table_by_name_says_the_catalog_passed_no_options(
    spark: SparkSession, db: str, url: str, tmp_path: Path
) -> None:
    """``writeStream.toTable`` into a catalog table: the writer gets only Spark's own
    ``checkpointLocation``, none of the table's OPTIONS."""
    name = f"{db}.streamed"
    spark.sql(f"CREATE TABLE {name} (key binary, value binary) USING slatedb OPTIONS (url '{url}')")
    source = tmp_path / "source"
    spark.createDataFrame([(b"s", b"1")], "key binary, value binary").write.parquet(str(source))
    query = (
        spark.readStream.schema("key binary, value binary")
        .parquet(str(source))
        .writeStream.option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .toTable(name)
    )
    with pytest.raises(Exception, match="CatalogOptionsMissing") as raised:
        query.awaitTermination(60)
    line = _missing(raised.value, "writeStream")
    assert line.count("\n") == 0
