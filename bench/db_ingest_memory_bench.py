"""Ingest memory benchmark: peak RSS of a ``Db`` ingest beside RocksDB's, same rows, fresh processes.

Issue 42, goal 3: a ``--rows`` ingest (16-byte random keys, 100-byte random values, the rows of
:func:`bench._data.make_table`, seed fixed) through

* ours: ``Db.open`` with default options and the in-process compactor on
  (``DbOptions(compactor=CompactorOptions())``), the rows written as ``put_arrow`` batches of
  ``--chunk`` rows (``--mode arrow``) or as single ``put`` calls (``--mode put``), neither
  awaiting durability, a WAL flush every 1M rows and at the end, then ``close``;
* RocksDB (rocksdict, its default options): the same rows as ``WriteBatch`` es of ``--chunk``
  rows (``--mode arrow``) or single puts, no sync, then ``close``.

Each run is its own fresh subprocess (one's heap never inflates the other's), ours and RocksDB
alternating for ``--rounds`` rounds. The parent samples the child's RSS every 20 ms from
``/proc/<pid>/statm``; the child reports its ``ru_maxrss`` (the kernel's exact peak) and its RSS
right after the imports (the interpreter + pyarrow floor both sides pay). Peak = the larger of
the two. Prints figures side by side with the load average; asserts nothing. The goal is a peak
of at most 512 MiB at 10M rows.

``--malloc-threshold BYTES`` adds a third engine, ``ours-mt``: ours with
``DbOptions(glibc_malloc_threshold_bytes=BYTES)`` (the opt-in glibc mmap/trim thresholds,
:mod:`slatedb_core.writer.malloc_tuning`).

``--option NAME=INT`` (repeatable) sets a ``DbOptions`` field of ours (``compactor.NAME=INT``: a
``CompactorOptions`` field), e.g. ``--option memtable_memory_bytes=134217728`` for the default
before issue 42's session 53.

Usage: python bench/db_ingest_memory_bench.py [--rows 1000000,10000000] [--rounds 1]
                                             [--mode arrow|put] [--chunk 100000] [--trace]
                                             [--malloc-threshold 1048576] [--option NAME=INT]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PAGE = os.sysconf("SC_PAGE_SIZE")
MiB = 1024 * 1024
GOAL = 512 * MiB
FLUSH_EVERY = 1_000_000


def rss_of(pid: int | str) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * PAGE


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# ---- child side ------------------------------------------------------------------------------


def _tracer(stop: threading.Event, t0: float, state: object) -> None:
    """Print RSS, Arrow's allocated bytes and (ours) the writer's unflushed memtables each second
    and at every new 32 MiB high."""
    import pyarrow as pa

    peak = 0
    last = 0.0
    while not stop.wait(0.05):
        r = rss_of("self")
        now = time.perf_counter() - t0
        if r <= peak + 32 * MiB and now - last < 1.0:
            continue
        last = now
        peak = max(peak, r)
        extra = ""
        steps = getattr(state, "steps", None)
        if steps is not None:
            st = steps.state()
            imm_bytes = sum(m.size_bytes for m in st.imm)
            extra = (
                f"  mem {st.memtable.size_bytes / MiB:5.0f} MiB  imm {len(st.imm):2d} "
                f"({imm_bytes / MiB:4.0f} MiB)  L0 {len(st.manifest.manifest.l0):3d}  "
                f"runs {len(st.manifest.manifest.compacted):2d}"
            )
        print(
            f"    t {now:6.1f} s  RSS {r / MiB:6,.0f} MiB  arrow "
            f"{pa.total_allocated_bytes() / MiB:5,.0f} MiB{extra}",
            flush=True,
        )


def parse_options(specs: list[str]) -> dict[str, int]:
    """``NAME=INT`` pairs (``--option``) as a dict of DbOptions fields."""
    out: dict[str, int] = {}
    for spec in specs:
        name, _, value = spec.partition("=")
        out[name] = int(value)
    return out


def child(
    engine: str,
    d: str,
    rows: int,
    mode: str,
    chunk: int,
    seed: int,
    trace: bool,
    mt: int | None,
    db_options: dict[str, int],
) -> None:
    import numpy as np
    import pyarrow as pa

    from bench._data import make_table

    rng = np.random.default_rng(seed)
    stop = threading.Event()
    t0 = time.perf_counter()
    if engine in ("ours", "ours-mt"):
        from slatedb_core.options import CompactorOptions, DbOptions
        from slatedb_core.store.url import open_store
        from slatedb_core.writer.db import Db
        from slatedb_core.writer.hooks import WriterHooks

        floor = rss_of("self")
        hooks = WriterHooks()
        compactor = {k[10:]: v for k, v in db_options.items() if k.startswith("compactor.")}
        options = DbOptions(
            compactor=CompactorOptions(**compactor),  # type: ignore[arg-type]
            glibc_malloc_threshold_bytes=mt if engine == "ours-mt" else None,
            **{k: v for k, v in db_options.items() if not k.startswith("compactor.")},  # type: ignore[arg-type]
        )
        db = Db.open("db", open_store(f"file://{d}"), options, hooks=hooks)
        if trace:
            threading.Thread(target=_tracer, args=(stop, t0, hooks), daemon=True).start()
        cpu0 = cpu_s()
        done = 0
        while done < rows:
            m = min(chunk, rows - done)
            table = make_table(m, rng)
            if mode == "arrow":
                db.put_arrow(table, await_durable=False)
            else:
                put = db.put
                for k, v in zip(
                    table.column(0).to_pylist(), table.column(1).to_pylist(), strict=True
                ):
                    put(k, v, await_durable=False)
            del table
            done += m
            if done % FLUSH_EVERY == 0 or done == rows:
                db.flush()
        db.close()
    else:
        import rocksdict

        floor = rss_of("self")
        rdb = rocksdict.Rdict(os.path.join(d, "rocks"), rocksdict.Options(raw_mode=True))
        if trace:
            threading.Thread(target=_tracer, args=(stop, t0, None), daemon=True).start()
        cpu0 = cpu_s()
        done = 0
        while done < rows:
            m = min(chunk, rows - done)
            table = make_table(m, rng)
            keys, vals = table.column(0).to_pylist(), table.column(1).to_pylist()
            del table
            if mode == "arrow":
                wb = rocksdict.WriteBatch(raw_mode=True)
                for k, v in zip(keys, vals, strict=True):
                    wb.put(k, v)
                rdb.write(wb)
                del wb
            else:
                for k, v in zip(keys, vals, strict=True):
                    rdb.put(k, v)
            del keys, vals
            done += m
        rdb.flush()
        rdb.close()
    stop.set()
    del pa
    print(
        f"RESULT rows={done} wall={time.perf_counter() - t0:.3f} cpu={cpu_s() - cpu0:.3f} "
        f"floor={floor} maxrss={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}",
        flush=True,
    )


# ---- parent side -----------------------------------------------------------------------------


def run_child(args: list[str]) -> dict[str, float]:
    p = subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True)
    peak = [0]
    stop = threading.Event()

    def sampler() -> None:
        while not stop.wait(0.02):
            try:
                peak[0] = max(peak[0], rss_of(p.pid))
            except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
                return

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
    result["peak"] = max(result["maxrss"], peak[0])
    return result


def line(name: str, r: dict[str, float]) -> str:
    return (
        f"  {name:7s} peak RSS {r['peak'] / MiB:7,.0f} MiB  (floor after imports "
        f"{r['floor'] / MiB:4.0f} MiB)  cpu {r['cpu']:6.1f} s  wall {r['wall']:6.1f} s  "
        f"load {os.getloadavg()[0]:4.1f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", default="1000000,10000000", help="comma-separated row counts")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--mode", choices=("arrow", "put"), default="arrow")
    ap.add_argument("--chunk", type=int, default=100_000)
    ap.add_argument("--only", choices=("ours", "ours-mt", "rocks"))
    ap.add_argument("--malloc-threshold", type=int, help="also run ours-mt with this threshold")
    ap.add_argument("--trace", action="store_true")
    ap.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME=INT",
        help="a DbOptions field of ours (repeatable), e.g. memtable_memory_bytes=67108864; "
        "compactor.NAME=INT: a CompactorOptions field",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--child", choices=("ours", "ours-mt", "rocks"), help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        mt = args.malloc_threshold
        child(
            args.child,
            args.dir,
            int(args.rows),
            args.mode,
            args.chunk,
            args.seed,
            args.trace,
            mt,
            parse_options(args.option),
        )
        return
    import importlib.metadata as md

    print(
        f"# db ingest memory bench: 16-byte keys, 100-byte values, mode {args.mode} "
        f"(chunks of {args.chunk:,}), rocksdict {md.version('rocksdict')}; "
        f"ours' options {parse_options(args.option) or 'default'}; "
        f"goal: ours <= {GOAL / MiB:.0f} MiB",
        flush=True,
    )
    names = ("ours", "ours-mt", "rocks") if args.malloc_threshold else ("ours", "rocks")
    engines = [e for e in names if args.only in (None, e)]
    for rows in (int(r) for r in args.rows.split(",")):
        peaks: dict[str, list[float]] = {e: [] for e in engines}
        print(f"## {rows:,} rows", flush=True)
        for rnd in range(args.rounds):
            order = engines if rnd % 2 == 0 else engines[::-1]
            for e in order:
                d = tempfile.mkdtemp(prefix=f"ingest-mem-{e}-")
                try:
                    r = run_child(
                        [
                            "--child",
                            e,
                            "--dir",
                            d,
                            "--rows",
                            str(rows),
                            "--mode",
                            args.mode,
                            "--chunk",
                            str(args.chunk),
                            "--seed",
                            str(args.seed),
                        ]
                        + (["--trace"] if args.trace else [])
                        + [f"--option={o}" for o in args.option]
                        + (
                            ["--malloc-threshold", str(args.malloc_threshold)]
                            if args.malloc_threshold
                            else []
                        )
                    )
                finally:
                    shutil.rmtree(d, ignore_errors=True)
                peaks[e].append(r["peak"])
                print(line(e, r), flush=True)
        if "rocks" in engines:
            k = statistics.median(peaks["rocks"])
            for e in engines[:-1]:
                o = statistics.median(peaks[e])
                print(
                    f"  -> {rows:,} rows: median peak {e} {o / MiB:,.0f} MiB vs RocksDB "
                    f"{k / MiB:,.0f} MiB ({o / k:.2f}x); {e} <= {GOAL / MiB:.0f} MiB: "
                    f"{'yes' if o <= GOAL else 'NO'}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
