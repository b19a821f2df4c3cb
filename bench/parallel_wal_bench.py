"""Parallel WAL writes (SlateDB RFC 0001): durable-put throughput and latency with 1, 2, 4 and 8 WAL
writes in flight, side by side, on moto's S3 (127.0.0.1) behind an added latency per request.

Every store request sleeps ``--latency-ms`` first (a FaultyStore latency rule), standing in for
an object store's round trip; a WAL SST costs two requests (the create-if-absent and the
``gc/wal.boundary`` check). For each ``max_parallel_writes`` a fresh bucket and database, then:

1. for each count P in ``--putters``, P threads each doing durable ``put``s (100-byte values,
   awaiting durability) for ``--seconds`` (at most ``--max-puts`` each): durable puts/s,
   WAL SSTs/s, puts per SST and put latency p50/p99;
2. one thread doing durable puts one after another (``--single-puts``): latency p50/p99, which
   parallel writes cannot improve (each put waits for its own SST).

Usage: python bench/parallel_wal_bench.py [--latency-ms 20] [--putters 8,64] [--seconds 8]
       [--writes 1,2,4,8] [--out bench/results/parallel_wal_bench.txt]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._moto import MotoServer
from slatedb_core.options import DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultRule, FaultyStore
from slatedb_core.wal import WalLog
from slatedb_core.writer.db import Db


@dataclass
class Result:
    writes: int
    putters: int
    puts: int
    seconds: float
    ssts: int
    latencies: list[float]
    single: list[float]
    errors: int

    @property
    def rate(self) -> float:
        return self.puts / self.seconds


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_one(moto: MotoServer, writes: int, putters: int, args: argparse.Namespace) -> Result:
    base = open_store(moto.new_bucket_url())
    store = FaultyStore(base, rules=[FaultRule(latency_s=args.latency_ms / 1000)])
    options = DbOptions(max_parallel_writes=writes, manifest_poll_interval=timedelta(seconds=30))
    db = Db.open("bench", store, options)
    value = b"v" * 100
    try:
        for i in range(20):  # warm-up: connections, code paths
            db.put(b"warm%d" % i, value)
        wal = WalLog(base, "bench")
        ssts_before = len(wal.list_ids())
        latencies: list[list[float]] = [[] for _ in range(putters)]
        errors = [0]
        stop_at = time.monotonic() + args.seconds

        def putter(t: int) -> None:
            mine = latencies[t]
            for i in range(args.max_puts):
                if time.monotonic() >= stop_at:
                    return
                started = time.perf_counter()
                try:
                    db.put(b"t%03d-%06d" % (t, i), value)
                except Exception:
                    errors[0] += 1
                    return
                mine.append(time.perf_counter() - started)

        threads = [threading.Thread(target=putter, args=(t,)) for t in range(putters)]
        started = time.monotonic()
        for th in threads:
            th.start()
        for th in threads:
            th.join(args.seconds + 60)
        elapsed = time.monotonic() - started
        ssts = len(wal.list_ids()) - ssts_before
        single: list[float] = []
        for i in range(args.single_puts):
            t0 = time.perf_counter()
            db.put(b"single-%06d" % i, value)
            single.append(time.perf_counter() - t0)
        flat = [x for lst in latencies for x in lst]
        return Result(writes, putters, len(flat), elapsed, ssts, flat, single, errors[0])
    finally:
        db.close()


def report(results: list[Result], args: argparse.Namespace) -> str:
    lines = [
        f"Parallel WAL writes on moto S3 (127.0.0.1) + {args.latency_ms:g} ms per request; "
        f"{os.cpu_count()} cores (shared)",
        f"P putters x durable put (100-byte values) for {args.seconds:g} s each; "
        f"then {args.single_puts} durable puts from one thread",
        "",
        f"{'P':>3} {'max_parallel_writes':>19} {'puts/s':>8} {'x vs 1':>7} {'WAL SSTs/s':>10} "
        f"{'puts/SST':>8} {'p50 ms':>7} {'p99 ms':>7} {'1-thread p50':>12} {'p99':>6} {'errors':>6}",
    ]
    base = {r.putters: r.rate for r in reversed(results)}  # the first run of each P
    for r in results:
        lines.append(
            f"{r.putters:>3} {r.writes:>19} {r.rate:>8.0f} {r.rate / base[r.putters]:>7.2f} "
            f"{r.ssts / r.seconds:>10.1f} "
            f"{r.puts / max(r.ssts, 1):>8.1f} {pct(r.latencies, 0.5) * 1e3:>7.1f} "
            f"{pct(r.latencies, 0.99) * 1e3:>7.1f} "
            f"{statistics.median(r.single) * 1e3 if r.single else float('nan'):>12.1f} "
            f"{pct(r.single, 0.99) * 1e3:>6.1f} {r.errors:>6}"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--latency-ms", type=float, default=20.0)
    p.add_argument("--putters", default="8,64")
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--max-puts", type=int, default=5000, help="per putter")
    p.add_argument("--single-puts", type=int, default=50)
    p.add_argument("--writes", default="1,2,4,8")
    p.add_argument("--out", default=None, help="also write the report here")
    args = p.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    moto = MotoServer()
    try:
        results = []
        for putters in (int(x) for x in args.putters.split(",")):
            for n in (int(x) for x in args.writes.split(",")):
                r = run_one(moto, n, putters, args)
                print(
                    f"{putters} putters, max_parallel_writes={n}: {r.rate:.0f} puts/s, p50 "
                    f"{pct(r.latencies, 0.5) * 1e3:.1f} ms",
                    flush=True,
                )
                results.append(r)
    finally:
        moto.stop()
    text = report(results, args)
    print("\n" + text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
