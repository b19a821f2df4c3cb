"""Check that a table holds exactly an input's rows: every input row once, nothing else.

``spark-submit spark_jobs/compare.py --input s3://lake/input/orders --url s3://lake/prod
--path events --key-column order_id`` reads the input (as the ingest job does:
spark_jobs/parquet_input.py) and the table (``format("slatedb")``, one snapshot taken at
planning), and compares them as multisets of rows with ``exceptAll`` both ways, after bringing
both sides to the same column types (a table written without ``--value-column`` records its
value columns and reads them back). It prints one JSON line of figures and exits 0 when the two
are equal, 1 otherwise. For an ingest with deletes or an upsert over earlier rows, compare with
the expected rows instead.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs.datasource import SlateDBDataSource
from spark_jobs.parquet_input import read_input
from spark_jobs.session import SessionOptions, get_session


def aligned(left: DataFrame, right: DataFrame) -> tuple[DataFrame, DataFrame]:
    """Both frames with the left's columns, in its order, each cast to the left's type."""
    missing = [c for c in left.columns if c not in right.columns]
    if missing:
        raise ValueError(f"the table has no column(s) {missing}; it has {right.columns}")
    cols = [(f.name, f.dataType) for f in left.schema.fields]
    return (
        left.select([F.col(n).cast(t).alias(n) for n, t in cols]),
        right.select([F.col(n).cast(t).alias(n) for n, t in cols]),
    )


def compare(input_df: DataFrame, table_df: DataFrame, key_column: str) -> dict[str, int]:
    if key_column not in table_df.columns:  # format("slatedb") names the key column "key"
        table_df = table_df.withColumnRenamed("key", key_column)
    want, got = aligned(input_df, table_df)
    if dict(want.dtypes)[key_column] == "binary":
        got = got.withColumn(key_column, F.col(key_column).cast("binary"))
    return {
        "input_rows": want.count(),
        "table_rows": got.count(),
        "input_distinct_keys": want.select(key_column).distinct().count(),
        "missing_from_table": want.exceptAll(got).count(),
        "not_in_input": got.exceptAll(want).count(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="spark_jobs/compare.py", description=__doc__.split("\n")[0])
    p.add_argument("--input", required=True, help="as spark_jobs.ingest's --input")
    p.add_argument("--url", required=True, help="object store URL of the table")
    p.add_argument("--path", required=True, help="table path inside the store")
    p.add_argument("--key-column", default="key")
    p.add_argument("--master", default=None, help="default: spark-submit's, else local[2]")
    args = p.parse_args(argv)
    spark = get_session(SessionOptions(master=args.master or "local[2]", app_name="slatedb-compare"))
    spark.dataSource.register(SlateDBDataSource)
    table = (spark.read.format("slatedb").option("url", args.url).option("path", args.path)
             .option("key_type", "string").load())
    figures = compare(read_input(spark, args.input), table, args.key_column)
    equal = (figures["missing_from_table"] == 0 and figures["not_in_input"] == 0
             and figures["input_rows"] == figures["table_rows"])
    print(json.dumps({**figures, "equal": equal}))
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
