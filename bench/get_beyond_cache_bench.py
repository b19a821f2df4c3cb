"""Point gets past the block cache, ours beside RocksDB (rocksdict), one process, same data.

Issue 42, goal 1. ``--rows`` random 16-byte keys with 100-byte values are written in 8 equal
batches, each flushed (ours: ``flush_memtable``; RocksDB: ``flush`` with auto compaction off), so
both hold 8 overlapping L0 SSTs; then both compact to one sorted run (ours with
``--block-size`` blocks too: the compactor's block size is its own option). At each layout: random
``get`` and ``get_many`` (1,000 keys a call; RocksDB: ``Rdict.get(list)``) of present keys and of
absent keys, warm (after one untimed pass over the same keys), of present keys asked for the
first time at the layout ("fresh": a new random set per run and side, so no block a timed pass
reads was cached by the one before it), and the first ``--cold`` gets after a reopen; and a
full scan (ours ``scan_arrow``, RocksDB its iterator). Figures are CPU per key (the calling
thread's ``time.thread_time``; both engines answer on that thread), the median of ``--reps``
runs, ours and RocksDB alternating, with the load average at each layout; default options on
both sides.

    .venv/bin/python bench/get_beyond_cache_bench.py [--rows 1000000] [--gets 20000] [--reps 3]
        [--layouts l0,compacted] [--block-size N] [--value-len 100]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
from rocksdict import Options, Rdict, WriteBatch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._data import VALUE_LEN, make_table
from slatedb_core.compactor.compactor import run_compaction_once
from slatedb_core.options import CompactorOptions, DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db

BATCH = 1000
CHUNKS = 8
clock = time.thread_time


def best(
    reps: int, n: int, ours: Callable[[], object], theirs: Callable[[], object]
) -> tuple[float, float]:
    """Median CPU µs per key of each side over ``reps`` alternating runs of ``n`` keys."""
    a: list[float] = []
    b: list[float] = []
    for _ in range(reps):
        for fn, out in ((ours, a), (theirs, b)):
            t0 = clock()
            fn()
            out.append((clock() - t0) / n * 1e6)
    return statistics.median(a), statistics.median(b)


def rocks_rows(rdb: Rdict) -> int:
    """RocksDB's full scan as the bench times it: every key and value read, rows counted."""
    it = rdb.iter()
    it.seek_to_first()
    n = 0
    while it.valid():
        it.key()
        it.value()
        n += 1
        it.next()
    return n


def row(layout: str, op: str, ours: float, theirs: float) -> None:
    print(f"{layout:<12} {op:<26} {ours:9.2f} {theirs:9.2f} {ours / theirs:8.2f}x", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--gets", type=int, default=20_000)
    ap.add_argument("--cold", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--block-size", type=int, default=None, help="ours; default: DbOptions'")
    ap.add_argument("--layouts", default="l0,compacted")
    ap.add_argument(
        "--value-len", type=int, default=VALUE_LEN, help="bytes per value (128+: two-byte varints)"
    )
    args = ap.parse_args()
    rng = np.random.default_rng(42)
    table = make_table(args.rows, rng)
    if args.value_len != VALUE_LEN:  # the same keys, longer or shorter values
        vbuf = rng.integers(0, 256, args.rows * args.value_len, dtype=np.uint8)
        offs = np.arange(args.rows + 1, dtype=np.int32) * args.value_len
        values_arr = pa.Array.from_buffers(
            pa.binary(), args.rows, [None, pa.py_buffer(offs), pa.py_buffer(vbuf)]
        )
        table = pa.table({"key": table.column("key"), "value": values_arr})
    keys = table.column("key").to_pylist()
    values = table.column("value").to_pylist()
    pick = rng.integers(0, len(keys), args.gets)
    present = [keys[i] for i in pick]
    want = [values[i] for i in pick]
    absent = [bytes(k) for k in rng.integers(0, 256, (args.gets, 16), dtype=np.uint8)]
    cold_keys = [keys[i] for i in rng.integers(0, len(keys), args.cold)]
    # keys asked for the first time at a layout, a set per rep and side (blocks not cached yet:
    # "warm" repeats its keys, so a cache that holds what one pass reads answers the next)
    fresh_picks = [
        [rng.integers(0, len(keys), args.gets) for _ in range(2 * args.reps)]
        for _ in args.layouts.split(",")
    ]
    cold_want = dict(zip(keys, values, strict=True))
    cold_want_l = [cold_want[k] for k in cold_keys]
    del cold_want

    root = tempfile.mkdtemp(prefix="get-beyond-cache-")
    store = open_store(f"file://{root}/ours")
    dbo = DbOptions() if args.block_size is None else DbOptions(block_size=args.block_size)
    opts = Options(raw_mode=True)
    opts.set_disable_auto_compactions(True)
    t0 = time.perf_counter()
    db = Db.open("db", store, options=dbo)
    rdb = Rdict(f"{root}/rocks", opts)
    step = -(-args.rows // CHUNKS)
    for c in range(CHUNKS):
        part = table.slice(c * step, step)
        db.put_arrow(part)
        db.flush_memtable()
        wb = WriteBatch(raw_mode=True)
        for k, v in zip(
            keys[c * step : (c + 1) * step], values[c * step : (c + 1) * step], strict=True
        ):
            wb.put(k, v)
        rdb.write(wb)
        rdb.flush()
    print(
        f"{args.rows:,} rows (16 B keys, {args.value_len} B values) in {CHUNKS} flushes, "
        f"written in {time.perf_counter() - t0:.0f} s; ours block_size={dbo.block_size}, "
        f"block_cache_bytes={dbo.block_cache_bytes}; CPU µs per key, median of {args.reps}"
    )
    print(f"{'layout':<12} {'op':<26} {'ours':>9} {'RocksDB':>9} {'ratio':>9}")

    def ours_get(ks: list[bytes], exp: list[bytes | None]) -> Callable[[], None]:
        def run() -> None:
            get = db.get
            got = [get(k) for k in ks]
            assert got == exp

        return run

    def rocks_get(ks: list[bytes], exp: list[bytes | None]) -> Callable[[], None]:
        def run() -> None:
            get = rdb.get
            got = [get(k) for k in ks]
            assert got == exp

        return run

    def many(getter: Callable[..., Any], ks: list[bytes], exp: list[bytes | None]) -> None:
        got: list[bytes | None] = []
        for i in range(0, len(ks), BATCH):
            got += cast(list[bytes | None], getter(ks[i : i + BATCH]))
        assert got == exp

    nones: list[bytes | None] = [None] * len(absent)
    wanted = cast(list[bytes | None], want)
    for layout in args.layouts.split(","):
        if layout == "compacted":
            db.close()
            t0 = time.perf_counter()
            run_compaction_once(
                "db",
                store,
                CompactorOptions(
                    l0_trigger=1,
                    poll_interval=timedelta(seconds=1),
                    block_size=dbo.block_size,  # the compactor's own option: the same blocks
                ),
            )
            print(f"(ours compacted in {time.perf_counter() - t0:.0f} s)")
            db = Db.open("db", store, options=dbo)
            rdb.compact_range(None, None)
        m = db.manifest.manifest
        print(
            f"-- {layout}: ours {len(m.l0)} L0 SSTs, {len(m.compacted)} sorted runs; "
            f"load average {os.getloadavg()[0]:.1f}"
        )
        ours_get(present, wanted)()  # warm
        rocks_get(present, wanted)()
        tests = [
            ("get present warm", ours_get(present, wanted), rocks_get(present, wanted), present),
            (
                "get_many present warm",
                lambda: many(db.get_many, present, wanted),  # noqa: B023 (the current db)
                lambda: many(rdb.get, present, wanted),  # noqa: B023
                present,
            ),
            ("get absent warm", ours_get(absent, nones), rocks_get(absent, nones), absent),
            (
                "get_many absent warm",
                lambda: many(db.get_many, absent, nones),  # noqa: B023
                lambda: many(rdb.get, absent, nones),  # noqa: B023
                absent,
            ),
        ]
        for op, o, r, ks in tests:
            a, b = best(args.reps, len(ks), o, r)
            row(layout, op, a, b)
        picks = fresh_picks[args.layouts.split(",").index(layout)]
        for op, is_many in (("get present fresh", False), ("get_many present fresh", True)):
            fo: list[float] = []
            fr: list[float] = []
            for rep in range(args.reps):
                for pick, getter, out in (
                    (picks[2 * rep], db.get_many if is_many else None, fo),
                    (picks[2 * rep + 1], rdb.get if is_many else None, fr),
                ):
                    ks_ = [keys[i] for i in pick]
                    exp = cast(list[bytes | None], [values[i] for i in pick])
                    mine = out is fo
                    t0 = clock()
                    if getter is not None:
                        many(getter, ks_, exp)
                    else:
                        (ours_get if mine else rocks_get)(ks_, exp)()
                    out.append((clock() - t0) / len(ks_) * 1e6)
            row(layout, op, statistics.median(fo), statistics.median(fr))
        # the first gets after a reopen: a fresh cache on both sides (the OS page cache is warm)
        for op, getter_name in (
            ("get first 10k reopen", "get"),
            ("get_many first 10k reopen", "many"),
        ):
            oa: list[float] = []
            rb: list[float] = []
            for _ in range(args.reps):
                db.close()
                db = Db.open("db", store, options=dbo)
                t0 = clock()
                if getter_name == "get":
                    ours_get(cold_keys, cast(list[bytes | None], cold_want_l))()
                else:
                    many(db.get_many, cold_keys, cast(list[bytes | None], cold_want_l))
                oa.append((clock() - t0) / len(cold_keys) * 1e6)
                rdb.close()
                rdb = Rdict(f"{root}/rocks", opts)
                t0 = clock()
                if getter_name == "get":
                    rocks_get(cold_keys, cast(list[bytes | None], cold_want_l))()
                else:
                    many(rdb.get, cold_keys, cast(list[bytes | None], cold_want_l))
                rb.append((clock() - t0) / len(cold_keys) * 1e6)
            row(layout, op, statistics.median(oa), statistics.median(rb))

        def ours_scan() -> None:
            n = sum(b.num_rows for b in db.scan_arrow())  # noqa: B023
            assert n == args.rows

        def rocks_scan() -> None:
            assert rocks_rows(rdb) == args.rows  # noqa: B023

        a, b = best(3, args.rows, ours_scan, rocks_scan)  # the first pays for fresh memory
        row(layout, "scan (per row)", a, b)
        cache = getattr(db, "_cache", None)
        if cache is not None:
            print(f"   cache: {cache.stats()}")
    db.close()
    rdb.close()
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
