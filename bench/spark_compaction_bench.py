"""Compaction on Spark (key-range subcompactions) vs the single-process compactor, same database.

    .venv/bin/python bench/spark_compaction_bench.py                 # 4M rows, 16 B keys, 100 B values
    .venv/bin/python bench/spark_compaction_bench.py --rows 1000000 --subcompactions 4

One database is written once (``--ingests`` bulk ingests of random keys, so L0 holds that many
overlapping generations, plus overwrites of earlier keys), then copied, so both compactors start
from the same bytes on the local filesystem. Each then compacts until its scheduler has nothing
left: ``run_compaction_once`` in this process, and ``spark_jobs.compact.compact`` with the
compactions cut into subcompaction tasks (the Spark session is started before the clock starts).
Both must end with the same number of live rows.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from slatedb_core.compactor import run_compaction_once
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions, DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db
from spark_jobs.compact import compact
from spark_jobs.session import SessionOptions, get_session

KEY_BYTES, VALUE_BYTES = 16, 100
PATH = "db"


def build(root: Path, rows: int, ingests: int) -> None:
    store = open_store(root.as_uri())
    rng = np.random.default_rng(3)
    per = rows // ingests
    earlier: np.ndarray | None = None
    with Db.open(PATH, store, DbOptions(l0_max_ssts=1000)) as db:
        for _ in range(ingests):
            keys = rng.integers(0, 256, size=(per, KEY_BYTES), dtype=np.uint8)
            if earlier is not None:  # a tenth of each ingest overwrites the previous one
                keys[: per // 10] = earlier[: per // 10]
            earlier = keys
            values = rng.integers(0, 256, size=(per, VALUE_BYTES), dtype=np.uint8)
            key_arr = pa.FixedSizeBinaryArray.from_buffers(
                pa.binary(KEY_BYTES), per, [None, pa.py_buffer(keys.tobytes())]
            ).cast(pa.binary())
            value_arr = pa.FixedSizeBinaryArray.from_buffers(
                pa.binary(VALUE_BYTES), per, [None, pa.py_buffer(values.tobytes())]
            ).cast(pa.binary())
            db.bulk_ingest(pa.table({"key": key_arr, "value": value_arr}))


def describe(root: Path) -> str:
    m = ManifestStore(open_store(root.as_uri()), PATH).read_latest().manifest
    size = sum(s.info.size_bytes for s in m.ssts)
    return f"{len(m.l0)} L0 SSTs, {len(m.compacted)} sorted run(s), {len(m.ssts)} SSTs, {size / 1e6:.0f} MB"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=4_000_000)
    p.add_argument("--ingests", type=int, default=8)
    p.add_argument("--subcompactions", type=int, default=4)
    p.add_argument("--max-sst-mb", type=int, default=64)
    p.add_argument("--master", default="local[2]")
    args = p.parse_args()
    options = CompactorOptions(max_sst_size_bytes=args.max_sst_mb * 1024 * 1024)
    tmp = Path(tempfile.mkdtemp(prefix="spark-compaction-bench-"))
    try:
        started = time.perf_counter()
        build(tmp / "original", args.rows, args.ingests)
        print(
            f"built {args.rows:,} rows in {time.perf_counter() - started:.1f}s: "
            f"{describe(tmp / 'original')}"
        )
        shutil.copytree(tmp / "original", tmp / "single")
        shutil.copytree(tmp / "original", tmp / "spark")
        shutil.rmtree(tmp / "original")

        started = time.perf_counter()
        single = run_compaction_once(PATH, open_store((tmp / "single").as_uri()), options)
        single_s = time.perf_counter() - started
        assert single is not None
        print(
            f"single-process run_compaction_once: {single_s:.1f}s, {single.compactions} "
            f"compaction(s), {single.rows_in:,} -> {single.rows_out:,} rows, "
            f"{single.bytes_in / 1e6:.0f} -> {single.bytes_out / 1e6:.0f} MB; "
            f"{describe(tmp / 'single')}"
        )

        spark = get_session(SessionOptions(master=args.master, app_name="spark-compaction-bench"))
        spark.sparkContext.setLogLevel("ERROR")
        try:
            spark.sparkContext.parallelize(range(4), 4).count()  # workers up before timing
            started = time.perf_counter()
            stats = compact(
                spark,
                (tmp / "spark").as_uri(),
                PATH,
                subcompactions=args.subcompactions,
                options=options,
            )
            spark_s = time.perf_counter() - started
        finally:
            spark.stop()
        assert stats is not None
        print(stats.summary())
        print(
            f"spark compaction: {spark_s:.1f}s with {args.subcompactions} subcompactions on "
            f"{args.master}; {describe(tmp / 'spark')}"
        )
        assert stats.rows_out == single.rows_out, (stats.rows_out, single.rows_out)
        print(
            f"ratio spark / single-process: {spark_s / single_s:.2f}x "
            f"(same live rows: {stats.rows_out:,})"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
