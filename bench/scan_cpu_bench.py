"""CPU of a full ``format("slatedb")`` read without Spark: what the Spark tasks run, in one process.

    .venv/bin/python bench/spark_read_bench.py --dir /tmp/rb28 --rounds 0 --readers floor  # data
    .venv/bin/python bench/scan_cpu_bench.py --dir /tmp/rb28 [--repeats 5] [--profile out.txt]

The reader plans the partitions once (as the driver does: a snapshot of table ``t`` in
``DIR/store``, the partitions of a full scan), then each repeat runs, for every partition, what
a Spark task runs (:meth:`spark_jobs.datasource_read.SlateDBReader.read`: open the shard's reader
at the checkpoint, scan the range, hand over Arrow batches), consuming every batch. Reported per
repeat: thread CPU seconds (``time.thread_time``, what counts on a shared machine), process CPU
seconds (``time.process_time``: also the object store's I/O threads, which read the files),
wall seconds and rows per thread-CPU second; then the best of the repeats. The rows are checked (count,
key order within and across partitions of a shard) once, outside the timing.

``--profile FILE``: one more repeat under pyinstrument, its text report written to FILE.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import pyarrow.compute as pc
from pyspark.sql.types import BinaryType, StructField, StructType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spark_jobs.datasource_read import SlateDBPartition, SlateDBReader

SCHEMA = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])


def plan(url: str) -> tuple[SlateDBReader, list[SlateDBPartition]]:
    reader = SlateDBReader({"url": url, "path": "t"}, SCHEMA)
    parts = [p for p in reader.partitions() if isinstance(p, SlateDBPartition)]
    return reader, parts


def one_pass(reader: SlateDBReader, parts: list[SlateDBPartition]) -> tuple[int, int]:
    """Rows and value bytes read by every partition's task."""
    rows = nbytes = 0
    for p in parts:
        for b in reader.read(p):
            rows += b.num_rows
            nbytes += b.column(1).nbytes
    return rows, nbytes


def check(reader: SlateDBReader, parts: list[SlateDBPartition]) -> int:
    """Rows read, after checking that keys strictly increase within each shard."""
    rows = 0
    last: dict[str, bytes] = {}
    for p in parts:
        shard = p.reads[0].db_path
        for b in reader.read(p):
            keys = b.column(0)
            n = b.num_rows
            if n > 1 and not pc.all(pc.less(keys.slice(0, n - 1), keys.slice(1))).as_py():
                raise AssertionError("keys out of order within a batch")
            first = keys[0].as_py()
            if shard in last and not last[shard] < first:
                raise AssertionError("keys out of order across batches")
            last[shard] = keys[n - 1].as_py()
            rows += n
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", required=True, help="spark_read_bench.py's --dir")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--profile", default=None, help="write a pyinstrument report here")
    args = p.parse_args()
    url = (Path(args.dir) / "store").resolve().as_uri()
    reader, parts = plan(url)
    rows = check(reader, parts)
    print(
        f"{len(parts)} partitions, {rows} rows (in key order), pid {os.getpid()}, "
        f"load {os.getloadavg()[0]:.2f}"
    )
    best_cpu = best_proc = best_wall = float("inf")
    for i in range(args.repeats):
        c0, p0, w0 = time.thread_time(), time.process_time(), time.perf_counter()
        n, _ = one_pass(reader, parts)
        cpu, wall = time.thread_time() - c0, time.perf_counter() - w0
        proc = time.process_time() - p0
        assert n == rows, (n, rows)
        best_cpu, best_proc = min(best_cpu, cpu), min(best_proc, proc)
        best_wall = min(best_wall, wall)
        print(
            f"repeat {i + 1}: cpu {cpu:.3f}s process {proc:.3f}s wall {wall:.3f}s  "
            f"{rows / cpu / 1e6:.2f}M rows/cpu-s"
        )
    print(
        f"best of {args.repeats}: cpu {best_cpu:.3f}s ({best_cpu / len(parts):.3f}s per "
        f"partition) process {best_proc:.3f}s wall {best_wall:.3f}s  "
        f"{rows / best_cpu / 1e6:.2f}M rows/cpu-s, load {os.getloadavg()[0]:.2f}"
    )
    if args.profile:
        from pyinstrument import Profiler

        prof = Profiler(interval=0.001)
        prof.start()
        one_pass(reader, parts)
        prof.stop()
        Path(args.profile).write_text(prof.output_text(unicode=False, color=False, show_all=False))
        print(f"profile written to {args.profile}")


if __name__ == "__main__":
    main()
