"""Engine benchmark: our ``slatedb_core.Db`` next to PyPI ``slatedb`` (the Rust engine's own
uniffi binding) and RocksDB (C++, through ``rocksdict``) in one run. Prints figures; asserts
nothing.

RocksDB is the ceiling an embedded LSM reaches from Python: its own defaults (WAL on, no fsync per
write), raw bytes (``Options(raw_mode=True)``, no pickling), same data, a fresh directory. Its
column and the ours/RocksDB ratio with its goal are printed beside the slatedb columns:
single put, batch write (``put_arrow`` in 10k-row slices vs a 10k-row ``WriteBatch`` built from
Python), warm random point get, ``get_many`` of 1,000 keys vs its multi-get (``get`` with a list)
and full scan (``scan_arrow`` vs its ``items()`` iterator).

Both engines get the same data (N rows of 16-byte random keys and 100-byte random values from a
seeded numpy RNG), the local filesystem (a fresh temporary directory per engine and per write
test) and their default options; durability is as stated per operation.

1. single puts not awaiting durability, then one WAL flush
   (ours ``put(k, v, await_durable=False)``; theirs ``await db.put(k, v)``, which returns a
   WriteHandle without waiting for durability)
2. batched writes: ours ``WriteBatch`` of 1,000 and ``put_arrow`` of the whole table; theirs
   ``WriteBatch`` of 1,000 (neither awaiting durability, one WAL flush at the end), plus a short
   run of batches that each await durability
3. random point gets of existing keys after the memtable was flushed to an L0 SST in both
4. ``get_many`` of 1,000 keys at a time (theirs: 1,000 concurrent gets in one ``asyncio.gather``;
   the binding has no batched get)
5. full scan: ours ``scan_arrow()`` (Arrow batches) and ``scan()`` (Python tuples); theirs
   ``scan()`` drained with ``next_batch`` (its batched iterator call)
6. reopen after close (both hold the same N rows)

``theirs`` is always the fastest of the variants tried (they are all printed under "details").

Separate modes:

* ``--rss-rows 10000000``: only ours; ingest with ``put_arrow`` in 100k-row chunks
  (await_durable=False, a WAL flush every ``--rss-flush-every`` rows) while sampling the process
  RSS; prints peak RSS, time and rows/s. A watchdog reports (and ends the run) if the ingest stops
  making progress for ``--stall-timeout`` seconds.
* ``--profile NAME``: runs one of our operations under pyinstrument and prints its report.

Usage: python bench/engine_bench.py [--rows 200000] [--gets 50000] [--seed 0]
       [--durable-batches 20] [--profile put|write_batch|put_arrow|flush_memtable|get|get_many|
       scan_arrow|scan|reopen]
       python bench/engine_bench.py --rss-rows 10000000 [--rss-chunk 100000]
       python bench/engine_bench.py --compare-with d5ea00b [--rounds 3] [--out FILE]
           (this checkout beside commit d5ea00b, rounds alternating: bench/compare_trees.py)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slatedb_core.options import DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.writer.batch import WriteBatch
from slatedb_core.writer.db import Db
from slatedb_core.writer.hooks import WriterHooks

KEY_LEN = 16
VALUE_LEN = 100
BATCH_OPS = 1000
ARROW_BATCH_ROWS = 10_000  # the batch-write row against RocksDB's 10k-row WriteBatch
GET_PASSES = 2  # warm point gets and get_many: best of this many more passes
DB_PATH = "db"
PAGE = os.sysconf("SC_PAGE_SIZE")
MiB = 1024 * 1024


# ---- data ----------------------------------------------------------------------------------
def make_table(n: int, rng: np.random.Generator) -> pa.Table:
    """``n`` rows of (key: 16 random bytes, value: 100 random bytes) as binary columns."""
    kbuf = rng.integers(0, 256, n * KEY_LEN, dtype=np.uint8)
    vbuf = rng.integers(0, 256, n * VALUE_LEN, dtype=np.uint8)
    koffs = (np.arange(n + 1, dtype=np.int32) * KEY_LEN).astype(np.int32)
    voffs = (np.arange(n + 1, dtype=np.int64) * VALUE_LEN).astype(np.int32)
    keys = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(koffs), pa.py_buffer(kbuf)])
    vals = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(voffs), pa.py_buffer(vbuf)])
    return pa.table({"key": keys, "value": vals})


@dataclass
class Data:
    table: pa.Table
    keys: list[bytes]
    values: list[bytes]
    get_keys: list[bytes]
    expected: dict[bytes, bytes] = field(default_factory=dict)


def make_data(n: int, gets: int, seed: int) -> Data:
    rng = np.random.default_rng(seed)
    table = make_table(n, rng)
    keys = table.column("key").to_pylist()
    values = table.column("value").to_pylist()
    idx = rng.integers(0, n, gets)
    get_keys = [keys[i] for i in idx]
    uniq = len(set(keys))
    if uniq != n:
        print(f"note: {n - uniq} duplicate random keys (later rows win)")
    expected = dict(zip(keys, values, strict=True))
    return Data(table, keys, values, get_keys, expected)


# ---- helpers -------------------------------------------------------------------------------
def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def fresh_dir(tag: str) -> str:
    return tempfile.mkdtemp(prefix=f"engine-bench-{tag}-")


def ours_open(d: str, options: DbOptions | None = None, hooks: WriterHooks | None = None) -> Db:
    return Db.open(DB_PATH, open_store(f"file://{d}"), options, hooks=hooks)


@dataclass
class Result:
    op: str
    unit: str  # "rows/s", "gets/s", "s"
    ours: float | None = None
    theirs: float | None = None
    target: str = ""
    check: Callable[[float, float], bool] | None = None  # (ours, theirs) -> met
    details: list[str] = field(default_factory=list)
    rocks: float | None = None  # RocksDB (rocksdict), same unit
    goal: float | None = None  # ours / RocksDB at least this (rates) or at most (times)

    def ratio(self) -> float | None:
        if self.ours is None or not self.theirs:
            return None
        return self.ours / self.theirs

    def rocks_ratio(self) -> float | None:
        if self.ours is None or not self.rocks:
            return None
        return self.ours / self.rocks

    def goal_met(self) -> str:
        r = self.rocks_ratio()
        if self.goal is None or r is None:
            return "-"
        ok = r <= self.goal if self.unit == "s" else r >= self.goal
        return "met" if ok else "NOT"


class Runner:
    """Drives the async binding with one event loop for the whole run."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        self.loop.close()


# ---- the PyPI slatedb side -----------------------------------------------------------------
class Theirs:
    def __init__(self, runner: Runner) -> None:
        import slatedb.uniffi as sdb  # type: ignore[import-untyped]  # lazily: not in --rss-rows

        self.sdb = sdb
        self.r = runner

    def store(self, d: str) -> Any:
        b = self.sdb.ObjectStoreBuilder.from_env(self.sdb.ObjectStoreType.LOCAL)
        b.with_config("local_path", d)
        return b.build()

    async def open(self, d: str) -> Any:
        return await self.sdb.DbBuilder(DB_PATH, self.store(d)).build()

    async def flush_wal(self, db: Any) -> None:
        await db.flush_with_options(self.sdb.FlushOptions(flush_type=self.sdb.FlushType.WAL))

    async def flush_memtable(self, db: Any) -> None:
        await db.flush_with_options(self.sdb.FlushOptions(flush_type=self.sdb.FlushType.MEM_TABLE))

    def full_range(self) -> Any:
        return self.sdb.KeyRange(start=None, start_inclusive=True, end=None, end_inclusive=False)


# ---- the RocksDB side (rocksdict) ----------------------------------------------------------
class Rocks:
    """RocksDB through rocksdict with its default options, raw bytes in and out."""

    def __init__(self) -> None:
        import rocksdict  # lazily: not needed by --rss-rows or --profile

        self.rd = rocksdict

    def open(self, d: str) -> Any:
        return self.rd.Rdict(d, self.rd.Options(raw_mode=True))

    def write_batch(self) -> Any:
        return self.rd.WriteBatch(raw_mode=True)


def rate(n: int, secs: float) -> float:
    return n / secs if secs > 0 else float("inf")


# ---- the benchmark -------------------------------------------------------------------------
def bench(args: argparse.Namespace) -> None:
    n, g = args.rows, args.gets
    t0 = time.perf_counter()
    data = make_data(n, g, args.seed)
    print(
        f"# engine bench: {n:,} rows (16-byte keys, 100-byte values), {g:,} gets, "
        f"seed {args.seed}; data made in {time.perf_counter() - t0:.1f} s"
    )
    runner = Runner()
    th = Theirs(runner)
    rocks = Rocks()
    import importlib.metadata as md

    print(
        f"# slatedb (PyPI) {md.version('slatedb')}, rocksdict {md.version('rocksdict')}, "
        f"pyarrow {pa.__version__}, "
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
    )
    results: list[Result] = []
    dirs: list[str] = []

    def newdir(tag: str) -> str:
        d = fresh_dir(tag)
        dirs.append(d)
        return d

    try:
        _bench(args, data, runner, th, rocks, results, newdir)
    finally:
        runner.close()
        if not args.keep:
            for d in dirs:
                shutil.rmtree(d, ignore_errors=True)
        else:
            print("kept:", *dirs)
    print_table(results)


def _bench(
    args: argparse.Namespace,
    data: Data,
    runner: Runner,
    th: Theirs,
    rocks: Rocks,
    results: list[Result],
    newdir: Callable[[str], str],
) -> None:
    n = len(data.keys)
    keys, values = data.keys, data.values
    pairs = list(zip(keys, values, strict=True))
    warm_up(runner, th, newdir)
    warm_up_rocks(rocks, newdir("rocks-warmup"))

    # 1. single puts ------------------------------------------------------------------------
    res = Result(
        "1. single put (no await) + flush",
        "rows/s",
        target=">= 10x theirs",
        check=lambda o, t: o >= 10 * t,
    )
    ours_dir = newdir("ours-main")
    db = ours_open(ours_dir)
    t0 = time.perf_counter()
    put = db.put
    for k, v in pairs:
        put(k, v, await_durable=False)
    t_loop = time.perf_counter() - t0
    db.flush()
    secs = time.perf_counter() - t0
    res.ours = rate(n, secs)
    res.details.append(f"ours: loop {t_loop:.2f} s + flush {secs - t_loop:.2f} s")
    ours_main = db

    their_dir = newdir("theirs-main")

    async def their_puts_seq() -> tuple[Any, float, float]:
        tdb = await th.open(their_dir)
        t0 = time.perf_counter()
        p = tdb.put
        for k, v in pairs:
            await p(k, v)
        t_loop = time.perf_counter() - t0
        await th.flush_wal(tdb)
        return tdb, t_loop, time.perf_counter() - t0

    their_main, t_loop, secs = runner.run(their_puts_seq())
    res.theirs = rate(n, secs)
    res.details.append(
        f"theirs sequential awaits: loop {t_loop:.2f} s + flush "
        f"{secs - t_loop:.2f} s = {rate(n, secs):,.0f} rows/s"
    )
    if args.their_put_gather:
        d2 = newdir("theirs-putgather")

        async def their_puts_gather() -> float:
            tdb = await th.open(d2)
            t0 = time.perf_counter()
            for i in range(0, n, BATCH_OPS):
                await asyncio.gather(*(tdb.put(k, v) for k, v in pairs[i : i + BATCH_OPS]))
            await th.flush_wal(tdb)
            secs = time.perf_counter() - t0
            await tdb.shutdown()
            return secs

        secs = runner.run(their_puts_gather())
        res.details.append(
            f"theirs gather of {BATCH_OPS} puts: {rate(n, secs):,.0f} rows/s "
            "(order within a gather is not the call order)"
        )
        res.theirs = max(res.theirs, rate(n, secs))
    rocks_main_dir = newdir("rocks-main")
    rocks_main = rocks.open(rocks_main_dir)
    t0 = time.perf_counter()
    rput = rocks_main.put
    for k, v in pairs:
        rput(k, v)
    rocks_main.flush_wal()
    res.rocks, res.goal = rate(n, time.perf_counter() - t0), 1.0
    results.append(res)
    report(res)

    # 2. batched writes ---------------------------------------------------------------------
    res = Result(
        f"2a. WriteBatch x{BATCH_OPS} (no await) + flush",
        "rows/s",
        target=">= 40x theirs, >= 1M rows/s",
        check=lambda o, t: o >= 40 * t and o >= 1e6,
    )
    db = ours_open(newdir("ours-wb"))
    t0 = time.perf_counter()
    for i in range(0, n, BATCH_OPS):
        wb = WriteBatch()
        for k, v in pairs[i : i + BATCH_OPS]:
            wb.put(k, v)
        db.write(wb, await_durable=False)
    db.flush()
    res.ours = rate(n, time.perf_counter() - t0)
    db.close()
    d = newdir("theirs-wb")

    async def their_wb() -> float:
        tdb = await th.open(d)
        WB = th.sdb.WriteBatch
        t0 = time.perf_counter()
        for i in range(0, n, BATCH_OPS):
            wb = WB()
            p = wb.put
            for k, v in pairs[i : i + BATCH_OPS]:
                p(k, v)
            await tdb.write(wb)
        await th.flush_wal(tdb)
        secs = time.perf_counter() - t0
        await tdb.shutdown()
        return secs

    res.theirs = rate(n, runner.run(their_wb()))
    res.rocks = rocks_batches(rocks, newdir("rocks-wb"), pairs, BATCH_OPS)
    results.append(res)
    report(res)

    res = Result(
        "2b. put_arrow whole table (no await) + flush",
        "rows/s",
        target=">= 40x theirs WB, >= 1M rows/s",
        check=lambda o, t: o >= 40 * t and o >= 1e6,
    )
    db = ours_open(newdir("ours-arrow"))
    t0 = time.perf_counter()
    db.put_arrow(data.table, await_durable=False)
    t_put = time.perf_counter() - t0
    db.flush()
    secs = time.perf_counter() - t0
    res.ours = rate(n, secs)
    res.theirs = results[-1].theirs
    res.details.append(
        f"ours: put_arrow {t_put:.3f} s + flush {secs - t_put:.3f} s; "
        "theirs column = their WriteBatch x1000 (no Arrow path)"
    )
    db.close()
    results.append(res)
    report(res)

    res = Result(
        f"2d. put_arrow x{ARROW_BATCH_ROWS:,} (no await) + flush",
        "rows/s",
        goal=1.0,
    )
    db = ours_open(newdir("ours-arrow10k"))
    slices = [data.table.slice(i, ARROW_BATCH_ROWS) for i in range(0, n, ARROW_BATCH_ROWS)]
    t0 = time.perf_counter()
    for t in slices:
        db.put_arrow(t, await_durable=False)
    t_put = time.perf_counter() - t0
    db.flush()
    secs = time.perf_counter() - t0
    res.ours = rate(n, secs)
    db.close()
    res.rocks = rocks_batches(rocks, newdir("rocks-wb10k"), pairs, ARROW_BATCH_ROWS)
    res.details.append(
        f"ours: put_arrow {t_put:.3f} s + flush {secs - t_put:.3f} s; RocksDB: WriteBatch of "
        f"{ARROW_BATCH_ROWS:,} built with wb.put per row (its only batch path), then flush_wal"
    )
    results.append(res)
    report(res)

    nb = min(args.durable_batches, n // BATCH_OPS)
    if nb > 0:
        res = Result(f"2c. WriteBatch x{BATCH_OPS}, each durable ({nb} batches)", "rows/s")
        db = ours_open(newdir("ours-wbd"))
        t0 = time.perf_counter()
        for i in range(0, nb * BATCH_OPS, BATCH_OPS):
            wb = WriteBatch()
            for k, v in pairs[i : i + BATCH_OPS]:
                wb.put(k, v)
            db.write(wb)  # await_durable=True (default)
        res.ours = rate(nb * BATCH_OPS, time.perf_counter() - t0)
        db.close()
        d = newdir("theirs-wbd")

        async def their_wbd() -> float:
            tdb = await th.open(d)
            t0 = time.perf_counter()
            for i in range(0, nb * BATCH_OPS, BATCH_OPS):
                wb = th.sdb.WriteBatch()
                for k, v in pairs[i : i + BATCH_OPS]:
                    wb.put(k, v)
                h = await tdb.write(wb)
                await h.await_durable()
            secs = time.perf_counter() - t0
            await tdb.shutdown()
            return secs

        res.theirs = rate(nb * BATCH_OPS, runner.run(their_wbd()))
        res.details.append(
            "theirs: write() then WriteHandle.await_durable(); "
            "both wait once per batch for a WAL SST write"
        )
        results.append(res)
        report(res)

    # 3. point gets after flushing the memtable to L0 ---------------------------------------
    res = Result("flush memtable -> L0 (N rows)", "s")
    t0 = time.perf_counter()
    ours_main.flush_memtable()
    res.ours = time.perf_counter() - t0
    res.details.append(f"ours L0 SSTs: {len(ours_main.manifest.manifest.l0)}")

    async def their_flush_mt() -> float:
        t0 = time.perf_counter()
        await th.flush_memtable(their_main)
        return time.perf_counter() - t0

    res.theirs = runner.run(their_flush_mt())
    t0 = time.perf_counter()
    rocks_main.flush(True)
    res.rocks = time.perf_counter() - t0
    results.append(res)
    report(res)

    gk = data.get_keys
    res = Result(
        f"3. point get ({len(gk):,} random keys)",
        "gets/s",
        target=">= 3x theirs",
        check=lambda o, t: o >= 3 * t,
    )
    get = ours_main.get
    t0 = time.perf_counter()
    got = [get(k) for k in gk]
    res.ours = rate(len(gk), time.perf_counter() - t0)
    bad = sum(1 for k, v in zip(gk, got, strict=True) if v != data.expected[k])
    if bad:
        res.details.append(f"ours: {bad} gets returned a wrong value!")
    # warm: the best of GET_PASSES passes over the same keys, for ours and for RocksDB
    o_best, r_best = res.ours, 0.0
    rget = rocks_main.get
    for _ in range(GET_PASSES):
        t0 = time.perf_counter()
        got = [get(k) for k in gk]
        o_best = max(o_best, rate(len(gk), time.perf_counter() - t0))
        t0 = time.perf_counter()
        rgot = [rget(k) for k in gk]
        r_best = max(r_best, rate(len(gk), time.perf_counter() - t0))
    res.rocks, res.goal = r_best, 0.5
    res.details.append(
        f"ours: first pass {res.ours:,.0f} gets/s, warm best of {GET_PASSES + 1} "
        f"{o_best:,.0f} (the ours/RocksDB ratio uses the warm figure)"
    )
    res.ours = o_best
    bad = sum(1 for k, v in zip(gk, rgot, strict=True) if v != data.expected[k])
    if bad:
        res.details.append(f"RocksDB: {bad} gets returned a wrong value!")

    async def their_gets() -> tuple[float, list[bytes | None]]:
        tget = their_main.get
        t0 = time.perf_counter()
        out = [await tget(k) for k in gk]
        return time.perf_counter() - t0, out

    secs, got = runner.run(their_gets())
    res.theirs = rate(len(gk), secs)
    bad = sum(1 for k, v in zip(gk, got, strict=True) if v != data.expected[k])
    if bad:
        res.details.append(f"theirs: {bad} gets returned a wrong value!")
    results.append(res)
    report(res)

    # 4. get_many ----------------------------------------------------------------------------
    res = Result(f"4. get_many x{BATCH_OPS} ({len(gk):,} keys)", "gets/s")
    t0 = time.perf_counter()
    got = []
    for i in range(0, len(gk), BATCH_OPS):
        got += ours_main.get_many(gk[i : i + BATCH_OPS])
    res.ours = rate(len(gk), time.perf_counter() - t0)
    bad = sum(1 for k, v in zip(gk, got, strict=True) if v != data.expected[k])
    if bad:
        res.details.append(f"ours: {bad} gets returned a wrong value!")

    async def their_get_many() -> tuple[float, list[bytes | None]]:
        tget = their_main.get
        out: list[bytes | None] = []
        t0 = time.perf_counter()
        for i in range(0, len(gk), BATCH_OPS):
            out += await asyncio.gather(*(tget(k) for k in gk[i : i + BATCH_OPS]))
        return time.perf_counter() - t0, out

    secs, got = runner.run(their_get_many())
    res.theirs = rate(len(gk), secs)
    res.details.append(f"theirs: asyncio.gather of {BATCH_OPS} gets (no batched get)")
    rbest = 0.0
    for _ in range(GET_PASSES):
        t0 = time.perf_counter()
        rgot = []
        for i in range(0, len(gk), BATCH_OPS):
            rgot += rocks_main.get(gk[i : i + BATCH_OPS])
        rbest = max(rbest, rate(len(gk), time.perf_counter() - t0))
    res.rocks, res.goal = rbest, 1.0
    res.details.append(f"RocksDB: get() with a list of {BATCH_OPS} keys (multi-get)")
    bad = sum(1 for k, v in zip(gk, rgot, strict=True) if v != data.expected[k])
    if bad:
        res.details.append(f"RocksDB: {bad} gets returned a wrong value!")
    bad = sum(1 for k, v in zip(gk, got, strict=True) if v != data.expected[k])
    if bad:
        res.details.append(f"theirs: {bad} gets returned a wrong value!")
    results.append(res)
    report(res)

    # 5. scans -------------------------------------------------------------------------------
    nuniq = len(data.expected)
    res = Result(
        "5a. full scan, ours scan_arrow",
        "rows/s",
        target=">= 10x theirs, >= 2M rows/s",
        check=lambda o, t: o >= 10 * t and o >= 2e6,
    )
    best = 0.0
    for _ in range(args.scan_reps):
        t0 = time.perf_counter()
        rows = 0
        for b in ours_main.scan_arrow():
            rows += b.num_rows
        best = max(best, rate(rows, time.perf_counter() - t0))
        if rows != nuniq:
            res.details.append(f"ours scan_arrow returned {rows} rows, expected {nuniq}!")
    res.ours = best
    their_best = 0.0
    for size in args.their_scan_batch:

        async def their_scan(size: int = size) -> tuple[float, int]:
            t0 = time.perf_counter()
            it = await their_main.scan(th.full_range())
            rows = 0
            nxt = it.next_batch
            while True:
                b = await nxt(size)
                rows += len(b)
                if len(b) < size:
                    break
            return time.perf_counter() - t0, rows

        r_best = 0.0
        for _ in range(args.scan_reps):
            secs, rows = runner.run(their_scan())
            r_best = max(r_best, rate(rows, secs))
            if rows != nuniq:
                res.details.append(f"theirs scan returned {rows} rows, expected {nuniq}!")
        res.details.append(f"theirs next_batch({size}): {r_best:,.0f} rows/s")
        their_best = max(their_best, r_best)
    res.theirs = their_best
    rbest = 0.0
    for _ in range(args.scan_reps):
        t0 = time.perf_counter()
        rows = 0
        for _kv in rocks_main.items():
            rows += 1
        rbest = max(rbest, rate(rows, time.perf_counter() - t0))
        if rows != nuniq:
            res.details.append(f"RocksDB items() returned {rows} rows, expected {nuniq}!")
    res.rocks, res.goal = rbest, 1.0
    res.details.append("RocksDB: items() iterator, (key, value) tuples")
    results.append(res)
    report(res)

    res2 = Result("5b. full scan, ours scan() tuples", "rows/s", theirs=their_best)
    best = 0.0
    for _ in range(args.scan_reps):
        t0 = time.perf_counter()
        rows = 0
        for _kv in ours_main.scan():
            rows += 1
        best = max(best, rate(rows, time.perf_counter() - t0))
    res2.ours = best
    res2.rocks = rbest
    res2.details.append("theirs column = their best next_batch scan (a list of KeyValue objects)")
    results.append(res2)
    report(res2)

    # 6. close and reopen --------------------------------------------------------------------
    res = Result("close (N rows, all in L0)", "s")
    t0 = time.perf_counter()
    ours_main.close()
    res.ours = time.perf_counter() - t0

    async def their_close() -> float:
        t0 = time.perf_counter()
        await their_main.shutdown()
        return time.perf_counter() - t0

    res.theirs = runner.run(their_close())
    t0 = time.perf_counter()
    rocks_main.close()
    res.rocks = time.perf_counter() - t0
    results.append(res)
    report(res)

    res = Result("6. reopen (N rows)", "s", target="<= 2x theirs", check=lambda o, t: o <= 2 * t)
    best_o, best_t, best_r = float("inf"), float("inf"), float("inf")
    for _ in range(args.reopen_reps):
        t0 = time.perf_counter()
        db = ours_open(ours_dir)
        best_o = min(best_o, time.perf_counter() - t0)
        ok = db.get(keys[0]) == data.expected[keys[0]]
        db.close()
        if not ok:
            res.details.append("ours: first get after reopen returned a wrong value!")

        async def their_reopen() -> tuple[float, bool]:
            t0 = time.perf_counter()
            tdb = await th.open(their_dir)
            secs = time.perf_counter() - t0
            ok = await tdb.get(keys[0]) == data.expected[keys[0]]
            await tdb.shutdown()
            return secs, ok

        t0 = time.perf_counter()
        rdb = rocks.open(rocks_main_dir)
        best_r = min(best_r, time.perf_counter() - t0)
        if rdb.get(keys[0]) != data.expected[keys[0]]:
            res.details.append("RocksDB: first get after reopen returned a wrong value!")
        rdb.close()

        secs, ok = runner.run(their_reopen())
        best_t = min(best_t, secs)
        if not ok:
            res.details.append("theirs: first get after reopen returned a wrong value!")
    res.ours, res.theirs, res.rocks = best_o, best_t, best_r
    res.details.append(
        f"best of {args.reopen_reps} reopens each; ours files: "
        f"{count_files(ours_dir)}, theirs: {count_files(their_dir)}"
    )
    results.append(res)
    report(res)


def warm_up_ours(d: str) -> None:
    """Exercise every code path once on 1,000 other rows (lazy imports, first allocations)."""
    t = make_table(1000, np.random.default_rng(12345))
    ks, vs = t.column("key").to_pylist(), t.column("value").to_pylist()
    db = ours_open(d)
    for k, v in zip(ks[:100], vs[:100], strict=True):
        db.put(k, v, await_durable=False)
    wb = WriteBatch()
    for k, v in zip(ks, vs, strict=True):
        wb.put(k, v)
    db.write(wb, await_durable=False)
    db.put_arrow(t, await_durable=False)
    db.flush()
    db.flush_memtable()
    db.get_many(ks[:100])
    sum(b.num_rows for b in db.scan_arrow())
    sum(1 for _ in db.scan())
    db.close()


def rocks_batches(rocks: Rocks, d: str, pairs: list[tuple[bytes, bytes]], size: int) -> float:
    """RocksDB rows/s writing ``pairs`` as WriteBatches of ``size`` rows (built from Python, as a
    user must) and one WAL flush at the end."""
    rdb = rocks.open(d)
    t0 = time.perf_counter()
    for i in range(0, len(pairs), size):
        wb = rocks.write_batch()
        p = wb.put
        for k, v in pairs[i : i + size]:
            p(k, v)
        rdb.write(wb)
    rdb.flush_wal()
    secs = time.perf_counter() - t0
    rdb.close()
    return rate(len(pairs), secs)


def warm_up_rocks(rocks: Rocks, d: str) -> None:
    t = make_table(1000, np.random.default_rng(12345))
    pairs = list(zip(t.column("key").to_pylist(), t.column("value").to_pylist(), strict=True))
    rocks_batches(rocks, d + "-wb", pairs, 100)
    rdb = rocks.open(d)
    for k, v in pairs:
        rdb.put(k, v)
    rdb.flush(True)
    rdb.get([k for k, _ in pairs[:100]])
    sum(1 for _ in rdb.items())
    rdb.close()


def warm_up(runner: Runner, th: Theirs, newdir: Callable[[str], str]) -> None:
    warm_up_ours(newdir("ours-warmup"))
    t = make_table(1000, np.random.default_rng(12345))
    ks, vs = t.column("key").to_pylist(), t.column("value").to_pylist()
    d = newdir("theirs-warmup")

    async def theirs() -> None:
        db = await th.open(d)
        for k, v in zip(ks[:100], vs[:100], strict=True):
            await db.put(k, v)
        wb = th.sdb.WriteBatch()
        for k, v in zip(ks, vs, strict=True):
            wb.put(k, v)
        await db.write(wb)
        await th.flush_wal(db)
        await th.flush_memtable(db)
        await asyncio.gather(*(db.get(k) for k in ks[:100]))
        it = await db.scan(th.full_range())
        while len(await it.next_batch(1000)) == 1000:
            pass
        await db.shutdown()

    runner.run(theirs())


def count_files(d: str) -> str:
    out: dict[str, int] = {}
    for root, _dirs, files in os.walk(d):
        sub = os.path.relpath(root, d).split(os.sep)
        name = sub[1] if len(sub) > 1 else sub[0]
        out[name] = out.get(name, 0) + len(files)
    return ", ".join(f"{k} {v}" for k, v in sorted(out.items()) if v)


def fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "s":
        return f"{v * 1e3:,.1f} ms"
    return f"{v:,.0f} {unit}"


def report(r: Result) -> None:
    ratio, rr = r.ratio(), r.rocks_ratio()
    print(
        f"  {r.op:<46} ours {fmt(r.ours, r.unit):>18}  theirs {fmt(r.theirs, r.unit):>18}  "
        + (f"ratio {ratio:.2f}" if ratio is not None else "ratio -")
        + (
            f"  RocksDB {fmt(r.rocks, r.unit):>18}  ours/RocksDB {rr:.2f}" if rr is not None else ""
        ),
        flush=True,
    )
    for d in r.details:
        print(f"      {d}", flush=True)


def print_table(results: list[Result]) -> None:
    print()
    hdr = (
        "operation",
        "ours",
        "slatedb (PyPI)",
        "ours/theirs",
        "target",
        "met",
        "RocksDB",
        "ours/RocksDB",
        "goal",
        "met",
    )
    rows = []
    for r in results:
        ratio = r.ratio()
        met = ""
        if r.check is not None and r.ours is not None and r.theirs is not None:
            met = "yes" if r.check(r.ours, r.theirs) else "NO"
        rows.append(
            (
                r.op,
                fmt(r.ours, r.unit),
                fmt(r.theirs, r.unit),
                f"{ratio:.2f}" if ratio is not None else "-",
                r.target or "-",
                met or "-",
                fmt(r.rocks, r.unit),
                f"{r.rocks_ratio():.2f}x" if r.rocks_ratio() is not None else "-",
                "-" if r.goal is None else f"{'<=' if r.unit == 's' else '>='} {r.goal:g}x",
                r.goal_met(),
            )
        )
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(hdr)]
    sep = "-+-".join("-" * w for w in widths)

    def line(cells: tuple[str, ...]) -> str:
        return " | ".join(
            c.ljust(w) if i in (0, 4, 5, 8, 9) else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    print(line(hdr))
    print(sep)
    for row in rows:
        print(line(row))
    print(
        "\nratio = ours / theirs (slatedb) and ours / RocksDB of the figure shown: above 1 is "
        "better for ours on rates, worse on times (ms)."
    )


# ---- --rss-rows ----------------------------------------------------------------------------
def rss_mode(args: argparse.Namespace) -> None:
    total, chunk = args.rss_rows, args.rss_chunk
    # A real ingest of this size runs a compactor: in-process here (DbOptions.compactor), so its
    # memory is part of what is measured.
    from slatedb_core.options import CompactorOptions

    opts = DbOptions(
        compactor=CompactorOptions(),
        **({} if args.rss_l0_max_ssts is None else {"l0_max_ssts": args.rss_l0_max_ssts}),
    )
    d = fresh_dir("rss")
    print(
        f"# RSS run: {total:,} rows via put_arrow in chunks of {chunk:,} (await_durable=False), "
        f"WAL flush every {args.rss_flush_every:,} rows; options: "
        f"{'default' if args.rss_l0_max_ssts is None else f'l0_max_ssts={args.rss_l0_max_ssts}'}"
    )
    base = rss_bytes()
    peak = [base]
    stop = threading.Event()

    def sampler() -> None:
        while not stop.wait(0.02):
            r = rss_bytes()
            if r > peak[0]:
                peak[0] = r

    threading.Thread(target=sampler, daemon=True).start()
    rng = np.random.default_rng(args.seed)
    hooks = WriterHooks()  # a normal writer; its steps show its state to the report
    db = ours_open(d, opts, hooks)
    assert hooks.steps is not None
    state = hooks.steps.state
    print(f"  RSS before ingest (after imports + open): {base / MiB:,.0f} MiB")
    progress = [time.monotonic()]
    stalled: list[str] = []

    def watchdog() -> None:
        while not stop.wait(1.0):
            if time.monotonic() - progress[0] > args.stall_timeout:
                st = state()  # introspection for the report only
                stalled.append(
                    f"no progress for {args.stall_timeout:.0f} s: L0 SSTs "
                    f"{len(st.manifest.manifest.l0)} (l0_max_ssts {db.options.l0_max_ssts}), "
                    f"immutable memtables {len(st.imm)} "
                    f"({sum(i.size_bytes for i in st.imm) / MiB:,.0f} MiB, max_unflushed_bytes "
                    f"{db.options.max_unflushed_bytes / MiB:,.0f} MiB), RSS {rss_bytes() / MiB:,.0f} MiB"
                )
                print(f"  STALLED: {stalled[-1]}; closing the db to end the run", flush=True)
                threading.Thread(target=db.close, daemon=True).start()
                return

    threading.Thread(target=watchdog, daemon=True).start()
    t_engine = 0.0
    t0 = time.perf_counter()
    done = 0
    error: BaseException | None = None
    next_report = args.rss_report_every
    try:
        while done < total:
            m = min(chunk, total - done)
            table = make_table(m, rng)
            t1 = time.perf_counter()
            db.put_arrow(table, await_durable=False)
            done += m
            if done % args.rss_flush_every == 0 or done == total:
                db.flush()
            t_engine += time.perf_counter() - t1
            progress[0] = time.monotonic()
            if done >= next_report:
                next_report += args.rss_report_every
                st = state()
                print(
                    f"  {done:>12,} rows  {time.perf_counter() - t0:7.1f} s  "
                    f"RSS {rss_bytes() / MiB:7,.0f} MiB  peak {peak[0] / MiB:7,.0f} MiB  "
                    f"L0 {len(st.manifest.manifest.l0):3d}  imm {len(st.imm)}",
                    flush=True,
                )
        t1 = time.perf_counter()
        db.close()
        t_close = time.perf_counter() - t1
    except BaseException as e:  # report, do not hide
        error = e
        t_close = 0.0
    wall = time.perf_counter() - t0
    stop.set()
    peak[0] = max(peak[0], rss_bytes())
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(f"  rows written: {done:,} of {total:,}")
    if error is not None:
        print(f"  ERROR: {type(error).__name__}: {error}")
    for s in stalled:
        print(f"  stall: {s}")
    print(
        f"  wall {wall:.1f} s (incl. data generation), engine {t_engine:.1f} s "
        f"+ close {t_close:.1f} s"
    )
    if done:
        print(
            f"  rate {done / wall:,.0f} rows/s wall, {done / max(t_engine, 1e-9):,.0f} rows/s "
            "engine-only"
        )
    print(
        f"  peak RSS (sampled every 20 ms) {peak[0] / MiB:,.0f} MiB; ru_maxrss "
        f"{maxrss / MiB:,.0f} MiB; target < 1024 MiB: "
        f"{'yes' if maxrss < 1024 * MiB else 'NO'}"
    )
    print(f"  on disk: {du(d) / MiB:,.0f} MiB ({count_files(d)})")
    if not args.keep:
        shutil.rmtree(d, ignore_errors=True)


def du(d: str) -> int:
    return sum(
        os.path.getsize(os.path.join(root, f)) for root, _dirs, files in os.walk(d) for f in files
    )


# ---- --profile -----------------------------------------------------------------------------
PROFILES = (
    "put",
    "write_batch",
    "put_arrow",
    "flush_memtable",
    "get",
    "get_many",
    "scan_arrow",
    "scan",
    "reopen",
)


def profile(args: argparse.Namespace) -> None:
    from pyinstrument import Profiler

    what = args.profile
    data = make_data(args.rows, args.gets, args.seed)
    pairs = list(zip(data.keys, data.values, strict=True))
    warm = fresh_dir("profile-warmup")
    warm_up_ours(warm)
    shutil.rmtree(warm, ignore_errors=True)
    d = fresh_dir(f"profile-{what}")
    db = ours_open(d)
    try:
        if what not in ("put", "write_batch", "put_arrow"):
            db.put_arrow(data.table, await_durable=False)
            if what != "flush_memtable":
                db.flush_memtable()
        if what == "reopen":
            db.close()

        def run() -> None:
            nonlocal db
            if what == "put":
                for k, v in pairs:
                    db.put(k, v, await_durable=False)
                db.flush()
            elif what == "write_batch":
                for i in range(0, len(pairs), BATCH_OPS):
                    wb = WriteBatch()
                    for k, v in pairs[i : i + BATCH_OPS]:
                        wb.put(k, v)
                    db.write(wb, await_durable=False)
                db.flush()
            elif what == "put_arrow":
                db.put_arrow(data.table, await_durable=False)
                db.flush()
            elif what == "flush_memtable":
                db.flush_memtable()
            elif what == "get":
                for k in data.get_keys:
                    db.get(k)
            elif what == "get_many":
                gk = data.get_keys
                for i in range(0, len(gk), BATCH_OPS):
                    db.get_many(gk[i : i + BATCH_OPS])
            elif what == "scan_arrow":
                for _b in db.scan_arrow():
                    pass
            elif what == "scan":
                for _kv in db.scan():
                    pass
            elif what == "reopen":  # 20 reopens (one takes a few ms), the last left open
                for i in range(20):
                    db = ours_open(d)
                    if i < 19:
                        db.close()

        profiler = Profiler(interval=args.profile_interval)
        t0 = time.perf_counter()
        with profiler:
            run()
        print(
            f"# profile {what}: {time.perf_counter() - t0:.3f} s ({args.rows:,} rows, "
            f"{args.gets:,} gets)"
        )
        print(profiler.output_text(unicode=False, color=False, show_all=args.profile_all))
    finally:
        db.close()
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--gets", type=int, default=50_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--durable-batches",
        type=int,
        default=20,
        help="batches of 1,000 for the 'each batch durable' row (0 = skip)",
    )
    ap.add_argument("--scan-reps", type=int, default=2, help="best of this many full scans")
    ap.add_argument("--reopen-reps", type=int, default=3)
    ap.add_argument(
        "--their-scan-batch",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1000, 10000],
        help="next_batch sizes tried for theirs",
    )
    ap.add_argument(
        "--no-their-put-gather",
        dest="their_put_gather",
        action="store_false",
        help="skip the asyncio.gather variant of their single puts",
    )
    ap.add_argument("--keep", action="store_true", help="keep the temporary directories")
    ap.add_argument(
        "--rss-rows",
        type=int,
        default=0,
        help="run only the RSS ingest of this many rows into ours",
    )
    ap.add_argument("--rss-chunk", type=int, default=100_000)
    ap.add_argument("--rss-flush-every", type=int, default=1_000_000)
    ap.add_argument("--rss-report-every", type=int, default=1_000_000)
    ap.add_argument(
        "--rss-l0-max-ssts",
        type=int,
        default=None,
        help="override l0_max_ssts in the RSS run (non-default; there is no compactor)",
    )
    ap.add_argument("--stall-timeout", type=float, default=120.0)
    ap.add_argument("--profile", choices=PROFILES)
    ap.add_argument("--profile-interval", type=float, default=0.001)
    ap.add_argument("--profile-all", action="store_true", help="pyinstrument show_all")
    ap.add_argument(
        "--compare-with",
        metavar="REF",
        help="run this bench of commit REF and of this checkout side by side, rounds "
        "alternating (bench/compare_trees.py), e.g. the commit before a change",
    )
    ap.add_argument("--rounds", type=int, default=3, help="--compare-with: rounds per checkout")
    ap.add_argument("--out", help="--compare-with: also append the report to this file")
    args = ap.parse_args()
    if args.compare_with:
        from bench.compare_trees import main as compare

        out = ["--out", args.out] if args.out else []
        compare(
            [
                "--base",
                args.compare_with,
                "--rows",
                str(args.rows),
                "--rounds",
                str(args.rounds),
                *out,
            ]
        )
    elif args.rss_rows:
        rss_mode(args)
    elif args.profile:
        profile(args)
    else:
        bench(args)


if __name__ == "__main__":
    main()
