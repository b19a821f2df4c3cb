"""Point gets and scans at a scale no in-memory data set reaches (issue 42, goal 5: the 100M-row
point), ours beside RocksDB (rocksdict), one process, same rows, the same figures as
``get_beyond_cache_bench.py``.

That bench holds its whole data set (and a Python list of every key and value) in memory, which
stops at ~20M rows on a 24 GiB machine. Here the rows are made chunk by chunk from a seeded
generator: each chunk (random 16-byte keys, 100-byte values) is written to both engines, a
sample of it is kept for the gets, and it is dropped. ``--chunks`` flushes on both sides make as
many overlapping L0 SSTs, then both compact to one sorted run (``--layouts``). Each step prints
its wall time, so whether a point fits a time budget is read off the output.

    .venv/bin/python bench/scale_bench.py [--rows 100000000] [--chunks 16] [--gets 10000]
        [--reps 1] [--layouts compacted]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
from rocksdict import Options, Rdict, WriteBatch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._data import make_table
from bench.get_beyond_cache_bench import best, clock, rocks_rows, row
from slatedb_core.compactor.compactor import run_compaction_once
from slatedb_core.gc import run_gc_once
from slatedb_core.options import CompactorOptions, DbOptions, GarbageCollectorOptions
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db

BATCH = 1000
ROCKS_BATCH = 100_000
NO_AGE = GarbageCollectorOptions(min_age=timedelta(0))
MIN_FREE_BYTES = 5_000_000_000
"""The bench stops (and removes its databases) rather than fill the disk past this."""


def _check_disk(root: str) -> None:
    free = shutil.disk_usage(root).free
    if free < MIN_FREE_BYTES:
        shutil.rmtree(root, ignore_errors=True)
        raise SystemExit(f"stopped: {free / 1e9:.1f} GB free under {root}; give --dir more room")


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000_000)
    ap.add_argument("--chunks", type=int, default=16, help="at most l0_max_ssts (16)")
    ap.add_argument("--gets", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--layouts", default="compacted")
    ap.add_argument("--dir", default=None, help="where both databases go (default: a temp dir)")
    args = ap.parse_args()
    started = time.perf_counter()
    rng = np.random.default_rng(42)
    step = -(-args.rows // args.chunks)
    per_chunk = -(-args.gets // args.chunks)
    present: list[bytes] = []
    want: list[bytes] = []
    root = tempfile.mkdtemp(prefix="scale-", dir=args.dir)
    store = open_store(f"file://{root}/ours")
    dbo = DbOptions()
    opts = Options(raw_mode=True)
    opts.set_disable_auto_compactions(True)
    db = Db.open("db", store, options=dbo)
    rdb = Rdict(f"{root}/rocks", opts)
    ours_write = rocks_write = ours_gc = 0.0
    for c in range(args.chunks):
        n = min(step, args.rows - c * step)
        if n <= 0:
            break
        part = make_table(n, rng)
        pick = rng.integers(0, n, per_chunk)
        keys_col, vals_col = part.column("key"), part.column("value")
        present += [keys_col[int(i)].as_py() for i in pick]
        want += [vals_col[int(i)].as_py() for i in pick]
        t0 = time.perf_counter()
        db.put_arrow(part)
        db.flush_memtable()
        ours_write += time.perf_counter() - t0
        # the WAL SSTs behind the flush go, as a deployment's GC removes them: the bench's
        # disk holds one copy of the rows per engine, not two
        t0 = time.perf_counter()
        run_gc_once("db", store, NO_AGE)
        ours_gc += time.perf_counter() - t0
        _check_disk(root)
        t0 = time.perf_counter()
        for s in range(0, n, ROCKS_BATCH):
            wb = WriteBatch(raw_mode=True)
            ks = keys_col.slice(s, ROCKS_BATCH).to_pylist()
            vs = vals_col.slice(s, ROCKS_BATCH).to_pylist()
            for k, v in zip(ks, vs, strict=True):
                wb.put(k, v)
            rdb.write(wb)
        rdb.flush()
        rocks_write += time.perf_counter() - t0
        _check_disk(root)
        del part, keys_col, vals_col
    present, want = present[: args.gets], want[: args.gets]
    absent = [bytes(k) for k in rng.integers(0, 256, (args.gets, 16), dtype=np.uint8)]
    print(
        f"{args.rows:,} rows (16 B keys, 100 B values) in {args.chunks} flushes; written in "
        f"{ours_write:.0f} s (ours; and {ours_gc:.0f} s of GC passes) / {rocks_write:.0f} s "
        f"(RocksDB) wall; ours "
        f"block_size={dbo.block_size}, block_cache_bytes={dbo.block_cache_bytes}; CPU µs per "
        f"key, median of {args.reps}; peak RSS so far {_rss_mib():.0f} MiB",
        flush=True,
    )
    print(f"{'layout':<12} {'op':<26} {'ours':>9} {'RocksDB':>9} {'ratio':>9}", flush=True)

    wanted: list[bytes | None] = list(want)
    for layout in args.layouts.split(","):
        if layout == "compacted":
            db.close()
            t0 = time.perf_counter()
            run_compaction_once(
                "db", store, CompactorOptions(l0_trigger=1, poll_interval=timedelta(seconds=1))
            )
            ours_c = time.perf_counter() - t0
            # what a deployment's GC does next (and before RocksDB's compaction needs the disk),
            # once a writer pins the compacted manifest (a writer's checkpoint pins the manifest
            # it last used, SlateDB RFC 0004)
            db = Db.open("db", store, options=dbo)
            run_gc_once("db", store, NO_AGE)
            _check_disk(root)
            t0 = time.perf_counter()
            rdb.compact_range(None, None)
            print(
                f"(compacted in {ours_c:.0f} s ours / {time.perf_counter() - t0:.0f} s RocksDB "
                f"wall)",
                flush=True,
            )
            # what a deployment's GC does next: ours holds one copy of the rows, as RocksDB does
        m = db.manifest.manifest
        print(
            f"-- {layout}: ours {len(m.l0)} L0 SSTs, {len(m.compacted)} sorted runs; "
            f"load average {os.getloadavg()[0]:.1f}; {time.perf_counter() - started:.0f} s in",
            flush=True,
        )
        # the first gets after a reopen, before anything else warms either side
        db.close()
        db = Db.open("db", store, options=dbo)
        rdb.close()
        rdb = Rdict(f"{root}/rocks", opts)
        t0 = clock()
        gets(db.get, present, wanted)
        cold_ours = (clock() - t0) / len(present) * 1e6
        t0 = clock()
        gets(rdb.get, present, wanted)
        row(
            layout,
            f"get first {len(present) // 1000}k reopen",
            cold_ours,
            (clock() - t0) / len(present) * 1e6,
        )
        measure(
            layout,
            db,
            rdb,
            rows=args.rows,
            reps=args.reps,
            present=present,
            wanted=wanted,
            absent=absent,
        )
    db.close()
    rdb.close()
    print(
        f"total {time.perf_counter() - started:.0f} s wall; peak RSS {_rss_mib():.0f} MiB; "
        f"disk: ours {_du(f'{root}/ours')} / RocksDB {_du(f'{root}/rocks')} MB",
        flush=True,
    )
    shutil.rmtree(root, ignore_errors=True)


def gets(getter: Callable[[bytes], object], ks: list[bytes], exp: list[bytes | None]) -> None:
    assert [getter(k) for k in ks] == exp


def many(getter: Callable[..., Any], ks: list[bytes], exp: list[bytes | None]) -> None:
    got: list[bytes | None] = []
    for i in range(0, len(ks), BATCH):
        got += getter(ks[i : i + BATCH])
    assert got == exp


def measure(
    layout: str,
    o: Db,
    r: Rdict,
    *,
    rows: int,
    reps: int,
    present: list[bytes],
    wanted: list[bytes | None],
    absent: list[bytes],
) -> None:
    """One layout's warm gets and scans, ours (``o``) beside RocksDB (``r``)."""
    nones: list[bytes | None] = [None] * len(absent)
    cases: list[tuple[str, Callable[[], None], Callable[[], None]]] = [
        (
            "get present warm",
            lambda: gets(o.get, present, wanted),
            lambda: gets(r.get, present, wanted),
        ),
        (
            "get_many present warm",
            lambda: many(o.get_many, present, wanted),
            lambda: many(r.get, present, wanted),
        ),
        (
            "get absent warm",
            lambda: gets(o.get, absent, nones),
            lambda: gets(r.get, absent, nones),
        ),
        (
            "get_many absent warm",
            lambda: many(o.get_many, absent, nones),
            lambda: many(r.get, absent, nones),
        ),
    ]
    for op, ours, theirs in cases:
        a, b = best(reps, len(present), ours, theirs)
        row(layout, op, a, b)

    def ours_scan() -> None:
        n = sum(b.num_rows for b in o.scan_arrow())
        assert n == rows

    def rocks_scan() -> None:
        assert rocks_rows(r) == rows

    t0 = time.perf_counter()
    a, b = best(reps, rows, ours_scan, rocks_scan)
    row(layout, "scan (per row)", a, b)
    print(f"   (scans took {time.perf_counter() - t0:.0f} s wall)", flush=True)


def _du(path: str) -> int:
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(d, f))
    return total // 1_000_000


if __name__ == "__main__":
    main()
