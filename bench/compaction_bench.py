"""Compaction throughput on the local filesystem store. Prints figures; asserts nothing.

N rows (16-byte random keys, 100-byte random values, seeded numpy RNG) are bulk-ingested in
``--chunks`` chunks, each becoming L0 SSTs of ``l0_sst_size_bytes``. Every chunk spans the whole
key space, so the L0 SSTs overlap and the merge interleaves all of them (the hard case, not the
disjoint fast path). ``--overwrite`` makes that fraction of each later chunk rewrite keys of
earlier chunks, so deduplication is exercised too. Then one ``run_compaction_once`` with
``l0_trigger=1`` compacts all of L0 into one sorted run, and we print MB/s (of input SST bytes)
and rows/s (of input entries), with the peak RSS of the process.

Usage: python bench/compaction_bench.py [--rows 10000000] [--chunks 8] [--max-sst-mb 256]
       [--compression none|lz4|zstd] [--overwrite 0.1] [--dir PATH] [--profile] [--ingest-only]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slatedb_core.compactor import run_compaction_once
from slatedb_core.options import CompactorOptions, DbOptions, MiB
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db

KEY_LEN = 16
VALUE_LEN = 100
DB_PATH = "db"


def make_chunk(n: int, rng: np.random.Generator, reuse: np.ndarray | None) -> pa.Table:
    """``n`` rows; the first ``len(reuse)`` keys repeat earlier ones (overwrites)."""
    kbuf = rng.integers(0, 256, (n, KEY_LEN), dtype=np.uint8)
    if reuse is not None and len(reuse):
        kbuf[: len(reuse)] = reuse
    vbuf = rng.integers(0, 256, n * VALUE_LEN, dtype=np.uint8)
    koffs = np.arange(n + 1, dtype=np.int32) * KEY_LEN
    voffs = np.arange(n + 1, dtype=np.int32) * VALUE_LEN
    keys = pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(koffs), pa.py_buffer(kbuf.reshape(-1))]
    )
    vals = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(voffs), pa.py_buffer(vbuf)])
    return pa.table({"key": keys, "value": vals})


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--max-sst-mb", type=int, default=256)
    ap.add_argument("--compression", default="none")
    ap.add_argument("--overwrite", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dir", default=None, help="store directory (default: a fresh temp dir)")
    ap.add_argument("--profile", action="store_true", help="pyinstrument the compaction")
    ap.add_argument(
        "--ingest-only",
        action="store_true",
        help="stop after writing L0 (keep --dir to compact copies of it)",
    )
    args = ap.parse_args()

    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="compaction-bench-"))
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    store = open_store(root.as_uri())
    rng = np.random.default_rng(args.seed)
    db_opts = DbOptions(l0_max_ssts=1024, compression=args.compression)
    print(
        f"rows={args.rows:,} chunks={args.chunks} key={KEY_LEN}B value={VALUE_LEN}B "
        f"max_sst={args.max_sst_mb}MiB compression={args.compression} "
        f"overwrite={args.overwrite:.0%} store={root}"
    )

    t0 = time.perf_counter()
    per_chunk = -(-args.rows // args.chunks)
    previous: np.ndarray | None = None
    with Db.open(DB_PATH, store, db_opts) as db:
        left = args.rows
        while left > 0:
            n = min(per_chunk, left)
            reuse = None
            if previous is not None and args.overwrite > 0:
                k = min(int(n * args.overwrite), len(previous))
                reuse = previous[rng.choice(len(previous), k, replace=False)]
            chunk = make_chunk(n, rng, reuse)
            if args.overwrite > 0:
                keys = np.frombuffer(chunk.column("key").chunk(0).buffers()[2], np.uint8)
                previous = keys[: n * KEY_LEN].reshape(n, KEY_LEN)[:10_000].copy()
            db.bulk_ingest(chunk)
            left -= n
        m = db.manifest.manifest
    ingest_s = time.perf_counter() - t0
    l0_bytes = sum(s.info.size_bytes for s in m.ssts)
    print(
        f"ingest: {ingest_s:7.2f} s  {len(m.l0)} L0 SSTs, {l0_bytes / 1e6:,.1f} MB  "
        f"({args.rows / ingest_s:,.0f} rows/s)"
    )

    if args.ingest_only:
        return
    opts = CompactorOptions(
        l0_trigger=1, max_sst_size_bytes=args.max_sst_mb * MiB, compression=args.compression
    )
    profiler = None
    if args.profile:
        from pyinstrument import Profiler

        profiler = Profiler()
        profiler.start()
    rss_before = peak_rss_mb()
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    stats = run_compaction_once(DB_PATH, store, opts)
    wall = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    if profiler is not None:
        profiler.stop()
        print(profiler.output_text(unicode=True, color=False))
    if stats is None:
        print("nothing compacted")
        return
    print(f"compaction: {wall:7.2f} s wall, {stats.compactions} compaction(s)")
    print(f"  in : {stats.input_ssts} SSTs, {stats.bytes_in / 1e6:,.1f} MB, {stats.rows_in:,} rows")
    print(
        f"  out: {stats.output_ssts} SSTs, {stats.bytes_out / 1e6:,.1f} MB, {stats.rows_out:,} rows"
    )
    print(
        f"  throughput: {stats.bytes_in / 1e6 / wall:,.1f} MB/s in, "
        f"{stats.bytes_out / 1e6 / wall:,.1f} MB/s out, {stats.rows_in / wall:,.0f} rows/s"
    )
    print(
        f"  cpu: {cpu1.ru_utime - cpu0.ru_utime:.2f} s user, "
        f"{cpu1.ru_stime - cpu0.ru_stime:.2f} s system"
    )
    print(
        f"  peak RSS: {rss_before:,.0f} MB after ingest, {peak_rss_mb():,.0f} MB after compaction"
    )
    if not args.dir:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
