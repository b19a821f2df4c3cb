"""Check that a table holds exactly an input's rows: every input row once, nothing else.

``spark-submit spark_jobs/compare.py --input s3://lake/input/orders --url s3://lake/prod
--path events --key-column order_id [--value-column payload]`` reads the input (as the ingest
job does: spark_jobs/parquet_input.py) and the table (``format("slatedb")``), and compares them
as multisets of rows in one query (each distinct row with its count on each side: one scan of
the table, so one snapshot). A table written with ``--value-column`` holds the key and that
column; one written without records its value columns and their types and reads them back. Only
the key and a plain table's value are converted (string to bytes, one to one); any other column
whose type differs makes the comparison fail. It prints one JSON line of figures and exits 0
when the two are equal, 1 otherwise. For an ingest with deletes or an upsert over earlier rows,
compare with the expected rows instead.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType

from spark_jobs.datasource import SlateDBDataSource
from spark_jobs.parquet_input import read_input
from spark_jobs.session import SessionOptions, get_session

KEY, VALUE = "key", "value"
"""format("slatedb")'s key column, and its value column for a table of plain values."""
_SIDE = "__compare_side"
FIGURES = ("input_rows", "table_rows", "input_distinct_keys", "missing_from_table", "not_in_input")


def aligned(
    want: DataFrame, got: DataFrame, key_column: str, value_column: str | None = None
) -> tuple[DataFrame, DataFrame]:
    """The input (``want``) and the table (``got``) with the same columns, in the input's order,
    in the table's types. Only the key and a plain table's value are converted (string to bytes,
    as the ingest stores them: a one-to-one cast); any other column must have the same type on
    both sides, since the table records its value columns' types from its input. Converting one
    side's values to the other's type could make different rows look equal (1.7 as an int is 1,
    " 1" as an int is 1)."""
    if key_column not in got.columns:  # format("slatedb") names the key column "key"
        got = got.withColumnRenamed(KEY, key_column)
    if sorted(got.columns) == sorted([key_column, VALUE]) and VALUE not in want.columns:
        # a plain key/value table (ingest --value-column): its value is the input's value column
        if value_column is None:
            others = [c for c in want.columns if c != key_column]
            if len(others) != 1:
                raise ValueError(
                    f"the table holds key and value only; name the input's value "
                    f"column (--value-column) among {others}"
                )
            value_column = others[0]
        got = got.withColumnRenamed(VALUE, value_column)
        want = want.select(key_column, value_column)
    elif value_column is not None and value_column not in got.columns:
        raise ValueError(f"the table has no value column {value_column!r}: {got.columns}")
    if sorted(want.columns) != sorted(got.columns):
        raise ValueError(f"the input's columns {want.columns} are not the table's {got.columns}")
    converted = {key_column, value_column}
    cols = []
    for f in want.schema.fields:
        table_type = got.schema[f.name].dataType
        if f.dataType != table_type and f.name not in converted:
            raise ValueError(
                f"column {f.name!r} is {f.dataType.simpleString()} in the input and "
                f"{table_type.simpleString()} in the table"
            )
        cols.append((f.name, table_type))
    return (
        want.select([F.col(n).cast(t).alias(n) for n, t in cols]),
        got.select([F.col(n) for n, _ in cols]),
    )


def compare(
    input_df: DataFrame, table_df: DataFrame, key_column: str, value_column: str | None = None
) -> dict[str, int]:
    """The figures, from one query (one scan of each side, so one snapshot of the table even
    while it is being written): every distinct row with its count on each side."""
    want, got = aligned(input_df, table_df, key_column, value_column)
    cols = want.columns
    both = (
        want.withColumn(_SIDE, F.lit(1))
        .unionByName(got.withColumn(_SIDE, F.lit(-1)))
        .groupBy(*cols)
        .agg(
            F.sum(F.when(F.col(_SIDE) == 1, 1).otherwise(0)).alias("i"),
            F.sum(F.when(F.col(_SIDE) == -1, 1).otherwise(0)).alias("t"),
        )
    )
    row = both.agg(
        F.sum("i").alias("input_rows"),
        F.sum("t").alias("table_rows"),
        F.count_distinct(F.when(F.col("i") > 0, F.col(key_column))).alias("input_distinct_keys"),
        F.sum(F.greatest(F.col("i") - F.col("t"), F.lit(0))).alias("missing_from_table"),
        F.sum(F.greatest(F.col("t") - F.col("i"), F.lit(0))).alias("not_in_input"),
    ).collect()[0]
    return {k: int(row[k] or 0) for k in FIGURES}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="spark_jobs/compare.py", description=__doc__.split("\n")[0])
    p.add_argument("--input", required=True, help="as spark_jobs.ingest's --input")
    p.add_argument("--url", required=True, help="object store URL of the table")
    p.add_argument("--path", required=True, help="table path inside the store")
    p.add_argument("--key-column", default="key")
    p.add_argument(
        "--value-column",
        default=None,
        help="as spark_jobs.ingest's (default: the input's only other column)",
    )
    p.add_argument("--master", default=None, help="default: spark-submit's, else local[2]")
    args = p.parse_args(argv)
    spark = get_session(
        SessionOptions(master=args.master or "local[2]", app_name="slatedb-compare")
    )
    spark.dataSource.register(SlateDBDataSource)
    input_df = read_input(spark, args.input)
    key_field = next((f for f in input_df.schema.fields if f.name == args.key_column), None)
    key_type = (
        "binary" if key_field is not None and key_field.dataType == BinaryType() else "string"
    )
    table = (
        spark.read.format("slatedb")
        .option("url", args.url)
        .option("path", args.path)
        .option("key_type", key_type)
        .load()
    )
    figures = compare(input_df, table, args.key_column, args.value_column)
    equal = (
        figures["missing_from_table"] == 0
        and figures["not_in_input"] == 0
        and figures["input_rows"] == figures["table_rows"]
    )
    print(json.dumps({**figures, "equal": equal}))
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
