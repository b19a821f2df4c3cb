"""bench/spark_read_bench.py runs end to end on a tiny table (its own Spark session, so in a
subprocess: the benchmark stops its session when done)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]  # a Spark session of its own: ~60 s

ROOT = Path(__file__).resolve().parents[2]


def test_the_read_bench_runs_tiny_and_every_reader_finds_the_same_rows(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "spark_read_bench.py"),
            "--rows",
            "3000",
            "--shards",
            "2",
            "--partitions",
            "2",
            "--rounds",
            "1",
            "--dir",
            str(tmp_path),
            "--readers",
            "slatedb,read_table,parquet,floor",
        ],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=ROOT,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    # the bench raises if two readers found different row counts for a query
    assert "rows found: {'full': 3000, 'eq': 1, 'in': 10, 'range': " in out.stdout
    assert "best of 1" in out.stdout
