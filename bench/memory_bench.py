"""Memory benchmark: peak RSS of a large ingest and of a large compaction, each in its own process.

Two measurements, each run in a fresh subprocess (so one's heap does not inflate the other's):

1. ``ingest``: ``--rows`` rows (16-byte random keys, 100-byte random values) written through
   ``Db.put_arrow`` in 100k-row chunks (await_durable=False, a WAL flush every 1M rows) with the
   in-process compactor on (``DbOptions(compactor=CompactorOptions())``), then ``close``.
2. ``compact``: the same rows are first written to L0 with no compactor (a setup process, not
   measured), then a measured process runs ``run_compaction_once`` with ``l0_trigger=1``: L0
   becomes one sorted run. It reports the store's requests (GETs, PUTs) besides memory and CPU.
   With ``--l0 DIR`` the loaded L0 is kept in DIR (loaded there once, if DIR is missing) and
   each of ``--repeat`` compactions runs on a fresh copy of it: only the compaction is timed,
   and two checkouts (base and new) can be run alternately on the very same L0.

The parent samples the child's RSS every 20 ms from ``/proc/<pid>/statm``; the child reports
its own ``ru_maxrss`` (the kernel's exact peak) and, with ``--trace``, a timeline of its RSS,
Arrow's allocated bytes (``pa.total_allocated_bytes()``: tracemalloc does not see Arrow
buffers), immutable memtables, L0 SSTs and whether a compaction is running. Prints figures;
asserts nothing. The goal is a peak under 1 GiB for 10M rows.

Usage: python bench/memory_bench.py [--rows 10000000] [--only ingest|compact] [--trace]
                                    [--l0 DIR] [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import pyarrow as pa

from bench._data import KEY_LEN, VALUE_LEN, make_table
from slatedb_core.compactor import executor as executor_module
from slatedb_core.compactor.compactor import run_compaction_once
from slatedb_core.options import CompactorOptions, DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db
from slatedb_core.writer.hooks import WriterHooks, WriterSteps

CHUNK = 100_000
FLUSH_EVERY = 1_000_000
DB_PATH = "db"
PAGE = os.sysconf("SC_PAGE_SIZE")
MiB = 1024 * 1024
GOAL = 1024 * MiB


def cpu_s() -> float:
    """CPU seconds of this process, all threads (a steadier figure than wall time on a shared
    machine)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def rss_of(pid: int | str) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * PAGE


# ---- child side ------------------------------------------------------------------------------

_compacting = [0]


def _instrument() -> None:
    """Count running compactions (for the trace only)."""
    run = executor_module.CompactionExecutor._run

    def traced(self, *a, **k):  # type: ignore[no-untyped-def]
        _compacting[0] += 1
        try:
            return run(self, *a, **k)
        finally:
            _compacting[0] -= 1

    executor_module.CompactionExecutor._run = traced  # type: ignore[method-assign]


def _tracer(stop: threading.Event, db: list[WriterSteps], t0: float) -> None:
    peak = 0
    while not stop.wait(0.02):
        r = rss_of("self")
        if r <= peak + 32 * MiB and int((time.perf_counter() - t0) * 50) % 25:
            continue
        peak = max(peak, r)
        imm = l0 = -1
        if db:
            st = db[0].state()  # introspection for the trace only (the writer's hooks seam)
            imm, l0 = len(st.imm), len(st.manifest.manifest.l0)
        print(
            f"    t {time.perf_counter() - t0:6.1f} s  RSS {r / MiB:6,.0f} MiB  arrow "
            f"{pa.total_allocated_bytes() / MiB:6,.0f} MiB  imm {imm:2d}  L0 {l0:3d}  "
            f"compacting {_compacting[0]}",
            flush=True,
        )


def child_ingest(d: str, rows: int, compactor: bool, trace: bool, seed: int) -> None:
    opts = DbOptions(compactor=CompactorOptions()) if compactor else DbOptions(l0_max_ssts=10_000)
    rng = np.random.default_rng(seed)
    stop = threading.Event()
    holder: list[WriterSteps] = []
    t0 = time.perf_counter()
    cpu0 = cpu_s()
    if trace:
        _instrument()
        threading.Thread(target=_tracer, args=(stop, holder, t0), daemon=True).start()
    hooks = WriterHooks()  # a normal writer; its steps show its state to the tracer
    db = Db.open(DB_PATH, open_store(f"file://{d}"), opts, hooks=hooks)
    assert hooks.steps is not None
    holder.append(hooks.steps)
    engine = 0.0
    done = 0
    while done < rows:
        m = min(CHUNK, rows - done)
        table = make_table(m, rng)
        t1 = time.perf_counter()
        db.put_arrow(table, await_durable=False)
        done += m
        if done % FLUSH_EVERY == 0 or done == rows:
            db.flush()
        engine += time.perf_counter() - t1
    t1 = time.perf_counter()
    if not compactor:
        db.flush_memtable()
    db.close()
    engine += time.perf_counter() - t1
    stop.set()
    print(
        f"RESULT rows={done} wall={time.perf_counter() - t0:.3f} engine={engine:.3f} "
        f"cpu={cpu_s() - cpu0:.3f} "
        f"maxrss={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}",
        flush=True,
    )


def child_compact(d: str, trace: bool) -> None:
    stop = threading.Event()
    t0 = time.perf_counter()
    cpu0 = cpu_s()
    if trace:
        _instrument()
        threading.Thread(target=_tracer, args=(stop, [], t0), daemon=True).start()
    store = open_store(f"file://{d}")
    stats = run_compaction_once(DB_PATH, store, CompactorOptions(l0_trigger=1))
    stop.set()
    rows = stats.rows_in if stats else 0
    n = stats.compactions if stats else 0
    requests = store.counters.snapshot()
    print(
        f"RESULT rows={rows} wall={time.perf_counter() - t0:.3f} engine="
        f"{time.perf_counter() - t0:.3f} cpu={cpu_s() - cpu0:.3f} maxrss="
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024} compactions={n} "
        f"gets={requests.get('get', 0)} puts={sum(v for k, v in requests.items() if 'put' in k)}",
        flush=True,
    )


# ---- parent side -----------------------------------------------------------------------------


def run_child(args: list[str], sample: bool = True) -> dict[str, float]:
    cmd = [sys.executable, __file__, *args]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    peak = [0]
    stop = threading.Event()

    def sampler() -> None:
        while not stop.wait(0.02):
            try:
                peak[0] = max(peak[0], rss_of(p.pid))
            except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
                return

    if sample:
        threading.Thread(target=sampler, daemon=True).start()
    result: dict[str, float] = {}
    assert p.stdout is not None
    for line in p.stdout:
        if line.startswith("RESULT "):
            result = {k: float(v) for k, v in (f.split("=") for f in line.split()[1:])}
        else:
            print(line, end="", flush=True)
    stop.set()
    if p.wait() != 0 or not result:
        raise SystemExit(f"child {args} failed (exit {p.returncode})")
    result["sampled"] = peak[0]
    return result


def report(name: str, r: dict[str, float]) -> None:
    peak = max(r["maxrss"], r["sampled"])
    print(
        f"  {name:8s} rows {int(r['rows']):>12,}  wall {r['wall']:7.1f} s  "
        f"{r['rows'] / max(r['engine'], 1e-9):>10,.0f} rows/s (engine)  cpu {r['cpu']:6.1f} s "
        f"({r['rows'] / max(r['cpu'], 1e-9):>9,.0f} rows/cpu-s)  load {os.getloadavg()[0]:4.1f}  "
        f"peak RSS {peak / MiB:7,.0f} MiB (ru_maxrss {r['maxrss'] / MiB:,.0f}, sampled "
        f"{r['sampled'] / MiB:,.0f})  goal < {GOAL / MiB:,.0f} MiB: "
        f"{'yes' if peak < GOAL else 'NO'}"
        + (
            f"  compactions {int(r['compactions'])}  GETs {int(r['gets']):,}  PUTs "
            f"{int(r['puts']):,}"
            if "compactions" in r
            else ""
        ),
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--only", choices=("ingest", "compact"))
    ap.add_argument("--trace", action="store_true")
    ap.add_argument("--l0", help="keep the loaded L0 here (load once); compact copies of it")
    ap.add_argument("--repeat", type=int, default=1, help="compactions of the kept L0 (--l0)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--child", choices=("ingest", "load", "compact"), help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        if args.child == "compact":
            child_compact(args.dir, args.trace)
        else:
            child_ingest(args.dir, args.rows, args.child == "ingest", args.trace, args.seed)
        return
    trace = ["--trace"] if args.trace else []
    common = ["--rows", str(args.rows), "--seed", str(args.seed), *trace]
    print(
        f"# memory bench: {args.rows:,} rows of {KEY_LEN}-byte keys and {VALUE_LEN}-byte values, "
        f"put_arrow chunks of {CHUNK:,}; Arrow pool {pa.default_memory_pool().backend_name}",
        flush=True,
    )
    if args.only in (None, "ingest"):
        d = tempfile.mkdtemp(prefix="memory-bench-ingest-")
        try:
            report("ingest", run_child(["--child", "ingest", "--dir", d, *common]))
        finally:
            shutil.rmtree(d, ignore_errors=True)
    if args.only in (None, "compact") and args.l0:
        if not Path(args.l0).exists():
            run_child(
                [
                    "--child",
                    "load",
                    "--dir",
                    args.l0,
                    "--rows",
                    str(args.rows),
                    "--seed",
                    str(args.seed),
                ],
                sample=False,
            )
        for _ in range(args.repeat):
            d = tempfile.mkdtemp(prefix="memory-bench-compact-", dir=Path(args.l0).parent)
            try:
                shutil.copytree(
                    Path(args.l0) / DB_PATH, Path(d) / DB_PATH, ignore=shutil.ignore_patterns("wal")
                )
                report("compact", run_child(["--child", "compact", "--dir", d, *trace]))
            finally:
                shutil.rmtree(d, ignore_errors=True)
    elif args.only in (None, "compact"):
        d = tempfile.mkdtemp(prefix="memory-bench-compact-")
        try:
            run_child(
                ["--child", "load", "--dir", d, "--rows", str(args.rows), "--seed", str(args.seed)],
                sample=False,
            )
            report("compact", run_child(["--child", "compact", "--dir", d, *trace]))
        finally:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
