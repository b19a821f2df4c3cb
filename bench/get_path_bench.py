"""Point reads, ours beside RocksDB (rocksdict), in one process on the same data.

16-byte random keys, 100-byte values, 200k rows on local disk; ``get`` of random existing keys
and ``get_many`` of 1,000 keys at a time (RocksDB: ``Rdict.get(list)``, its multi-get), each from
three layouts: memtable only, after a flush to L0, after a compaction to one sorted run. Every
figure is the best of ``--reps`` runs over a warm cache, printed with its spread; ours and
RocksDB's runs alternate, so that a busy machine slows both alike.

    .venv/bin/python bench/get_path_bench.py [--rows 200000] [--gets 100000] [--reps 3]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import cast

import numpy as np
from rocksdict import Options, Rdict, WriteBatch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._data import make_table
from slatedb_core.compactor.compactor import run_compaction_once
from slatedb_core.options import CompactorOptions
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db

BATCH = 1000


Rate = tuple[float, float]  # (best rate, spread as (best - worst) / best)


def best_of(
    reps: int,
    n: int,
    ours: Callable[[], object],
    theirs: Callable[[], object],
    clock: Callable[[], float],
) -> tuple[Rate, Rate]:
    """Each side's best rate and spread over ``reps`` runs of ``n`` operations by ``clock``,
    the two sides alternating so that both see the same machine load."""
    rates: tuple[list[float], list[float]] = ([], [])
    for _ in range(reps):
        for fn, out in ((ours, rates[0]), (theirs, rates[1])):
            t0 = clock()
            fn()
            out.append(n / (clock() - t0))
    a, b = rates
    return (max(a), (max(a) - min(a)) / max(a)), (max(b), (max(b) - min(b)) / max(b))


def fmt(r: Rate) -> str:
    return f"{r[0] / 1e3:7.1f}k/s ±{100 * r[1]:3.0f}%"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--gets", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="cpu: the calling thread's CPU time (time.thread_time), steadier on a "
        "shared machine; both sides make their calls on this thread",
    )
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    table = make_table(args.rows, rng)
    keys = table.column("key").to_pylist()
    values = table.column("value").to_pylist()
    expected = dict(zip(keys, values, strict=True))
    gk = [keys[i] for i in rng.integers(0, len(keys), args.gets)]
    want = [expected[k] for k in gk]

    root = tempfile.mkdtemp(prefix="get-path-bench-")
    store = open_store(f"file://{root}/ours")
    db = Db.open("db", store)
    db.put_arrow(table)
    opts = Options(raw_mode=True)
    rdb = Rdict(f"{root}/rocks", opts)
    wb = WriteBatch(raw_mode=True)
    for k, v in zip(keys, values, strict=True):
        wb.put(k, v)
    rdb.write(wb)

    def ours_get() -> None:
        get = db.get
        got = [get(k) for k in gk]
        assert got == want

    def ours_many() -> None:
        got: list[bytes | None] = []
        gm = db.get_many
        for i in range(0, len(gk), BATCH):
            got += gm(gk[i : i + BATCH])
        assert got == want

    def rocks_get() -> None:
        get = rdb.get
        got = [get(k) for k in gk]
        assert got == want

    def rocks_many() -> None:
        got: list[bytes | None] = []
        gm = rdb.get
        for i in range(0, len(gk), BATCH):
            got += cast(list[bytes | None], gm(gk[i : i + BATCH]))
        assert got == want

    clock = time.perf_counter if args.clock == "wall" else time.thread_time
    print(
        f"{args.rows:,} rows, {args.gets:,} random gets; best of {args.reps} (spread), "
        f"{args.clock} clock"
    )
    print(f"{'layout':<14} {'op':<14} {'ours':>20} {'RocksDB':>20} {'ours/RocksDB':>13}")
    for layout in ("memtable", "L0", "sorted run"):
        if layout == "L0":
            db.flush_memtable()
            rdb.flush()
        elif layout == "sorted run":
            db.close()
            run_compaction_once(
                "db", store, CompactorOptions(l0_trigger=1, poll_interval=timedelta(seconds=1))
            )
            db = Db.open("db", store)
            rdb.compact_range(None, None)
        ours_get()  # warm the caches
        rocks_get()
        for op, o, r in (
            ("get", ours_get, rocks_get),
            (f"get_many x{BATCH}", ours_many, rocks_many),
        ):
            a, b = best_of(args.reps, len(gk), o, r, clock)
            print(
                f"{layout:<14} {op:<14} {fmt(a):>20} {fmt(b):>20} {a[0] / b[0]:12.2f}x", flush=True
            )
    m = db.manifest.manifest
    print(f"ours at the end: {len(m.l0)} L0 SSTs, {len(m.compacted)} sorted runs")
    db.close()
    rdb.close()
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
