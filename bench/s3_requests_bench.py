"""Requests per row and durable-put latency on S3: ours next to PyPI ``slatedb`` on one server.

SeaweedFS (lakehouse_demo.s3server) behind bench/delay_proxy.py, which adds ``--delays`` ms to
every request and counts requests by operation and object directory for any client. Both
engines write to the same server (their own prefixes), one after the other, with the same data
(16-byte keys, 100-byte values). For each delay:

1. durable puts: ``--threads`` writers, ``--puts`` puts in all, each put waiting until it is
   durable (ours: ``put``; theirs: ``put`` then ``await_durable`` on one event loop with one
   task per writer). Puts/s, p50/p99 latency, requests and bytes per 1,000 puts and per 1M rows.
2. batches: ``--rows`` rows in ``--batch-rows``-row batches, each durable (ours: ``put_arrow``;
   theirs: a ``WriteBatch``). Requests and bytes per 1M rows.
3. idle: an open writer with nothing to do for ``--idle-s`` seconds: requests per minute and the
   request cost per day at S3 Standard prices (PUT/COPY/POST/LIST $0.005 per 1,000, GET/HEAD
   $0.0004 per 1,000, DELETE free).

Then "where each request goes": the requests of each phase grouped by the directory under the
database (wal/, manifest/, compacted/, gc/, ...). Opening a database is not counted (each phase
resets the counters after the open and reads them before the close).

Usage: python bench/s3_requests_bench.py [--delays 0,20] [--puts 2000] [--threads 8]
       [--rows 100000] [--batch-rows 10000] [--idle-s 60] [--their-flush-ms 100,10]
       [--idle-delay 20] [--ours-parallel 1] [--reps 1] [--phases puts,batches,idle]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import importlib.metadata as md
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lakehouse_demo.s3server import ACCESS_KEY, REGION, SECRET_KEY, SeaweedFS
from slatedb_core.options import DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db

PRICE_PER_1K = {"PUT": 0.005, "POST": 0.005, "LIST": 0.005, "GET": 0.0004, "HEAD": 0.0004}
OPS = ("PUT", "GET", "LIST", "HEAD", "DELETE", "POST")


# ---- the proxy -------------------------------------------------------------------------------
class Proxy:
    """bench/delay_proxy.py in its own process, with its request counters."""

    def __init__(self, upstream_port: int, delay_ms: float) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).with_name("delay_proxy.py")),
                "--upstream",
                f"127.0.0.1:{upstream_port}",
                "--delay-ms",
                str(delay_ms),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def stats(self, reset: bool = False) -> list[tuple[str, str, int, int, int]]:
        what = "reset" if reset else "stats"
        with urllib.request.urlopen(f"{self.endpoint}/__proxy__/{what}", timeout=30) as r:
            return [tuple(row) for row in json.loads(r.read())]

    def reset(self) -> None:
        self.stats(reset=True)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@dataclass
class Counts:
    """Requests of one phase under one database prefix."""

    rows: list[tuple[str, str, int, int, int]]
    prefix: str

    def by_op(self) -> dict[str, tuple[int, int, int]]:
        out: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0])
        for op, _d, n, sent, got in self._mine():
            row = out[op]
            row[0] += n
            row[1] += sent
            row[2] += got
        return {op: (v[0], v[1], v[2]) for op, v in out.items()}

    def _mine(self) -> list[tuple[str, str, int, int, int]]:
        return [r for r in self.rows if r[1] == self.prefix or r[1].startswith(self.prefix + "/")]

    def total(self) -> int:
        return sum(n for n, _, _ in self.by_op().values())

    def where(self) -> dict[str, int]:
        """Requests by (op, directory under the database)."""
        out: dict[str, int] = collections.Counter()
        for op, d, n, _, _ in self._mine():
            sub = d[len(self.prefix) :].strip("/").split("/")[0] or "."
            out[f"{op} {sub}/"] += n
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def cost_per_day(self, seconds: float) -> float:
        ops = self.by_op()
        usd = sum(PRICE_PER_1K.get(op, 0.0) * n / 1000 for op, (n, _, _) in ops.items())
        return usd * 86400 / seconds


@dataclass
class Result:
    engine: str
    phase: str
    delay_ms: float
    units: int  # puts or rows
    seconds: float
    counts: Counts
    latencies: list[float] = field(default_factory=list)

    def line(self, per: int) -> str:
        ops = self.counts.by_op()
        scale = per / self.units
        cells = [f"{ops.get(op, (0, 0, 0))[0] * scale:>9,.0f}" for op in OPS]
        sent = sum(v[1] for v in ops.values()) * scale / 2**20
        got = sum(v[2] for v in ops.values()) * scale / 2**20
        lat = ""
        if self.latencies:
            s = sorted(self.latencies)
            p50 = s[len(s) // 2] * 1e3
            p99 = s[min(len(s) - 1, int(len(s) * 0.99))] * 1e3
            lat = f"  p50 {p50:6.1f} ms  p99 {p99:6.1f} ms"
        rate = self.units / self.seconds
        return (
            f"{self.engine:<24} {self.delay_ms:>4.0f} ms  {rate:>9,.0f}/s {''.join(cells)}"
            f"  {self.counts.total() * scale:>9,.0f}  up {sent:7.1f} MiB  down {got:7.1f} MiB"
            f"{lat}"
        )


def header(per: str) -> str:
    cells = "".join(f"{op:>9}" for op in OPS)
    return f"{'engine':<24} {'delay':>7}  {'rate':>11} {cells}  {'total':>9}  requests per {per}"


def keys_values(n: int, seed: int) -> tuple[list[bytes], list[bytes]]:
    keys = [f"{seed:04d}{i:012d}".encode() for i in range(n)]
    values = [os.urandom(50).hex().encode() for _ in range(min(n, 1000))]
    return keys, [values[i % len(values)] for i in range(n)]


# ---- ours ------------------------------------------------------------------------------------
class Ours:
    def __init__(self, endpoint: str, parallel: int, name: str) -> None:
        self.url = (
            f"s3://{SeaweedFS.bucket}?endpoint={endpoint}&region={REGION}&allow_http=true"
            f"&access_key_id={ACCESS_KEY}&secret_access_key={SECRET_KEY}"
        )
        self.options = DbOptions(max_parallel_writes=parallel)
        self.name = name

    def open(self, path: str) -> Db:
        return Db.open(path, open_store(self.url), self.options)

    def durable_puts(
        self, db: Db, keys: list[bytes], values: list[bytes], threads: int
    ) -> tuple[float, list[float]]:
        lat: list[list[float]] = [[] for _ in range(threads)]

        def work(t: int) -> None:
            out = lat[t]
            for i in range(t, len(keys), threads):
                t0 = time.perf_counter()
                db.put(keys[i], values[i])
                out.append(time.perf_counter() - t0)

        ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        t0 = time.perf_counter()
        for th in ts:
            th.start()
        for th in ts:
            th.join()
        return time.perf_counter() - t0, [x for lst in lat for x in lst]

    def batches(self, db: Db, keys: list[bytes], values: list[bytes], size: int) -> float:
        t0 = time.perf_counter()
        for i in range(0, len(keys), size):
            db.put_arrow(
                pa.table(
                    {
                        "key": pa.array(keys[i : i + size], pa.binary()),
                        "value": pa.array(values[i : i + size], pa.binary()),
                    }
                )
            )
        return time.perf_counter() - t0

    @staticmethod
    def close(db: Db) -> None:
        db.close()


# ---- theirs (PyPI slatedb) -------------------------------------------------------------------
class Theirs:
    def __init__(self, endpoint: str, flush_ms: int) -> None:
        import slatedb.uniffi as sdb  # type: ignore[import-untyped]

        self.sdb = sdb
        self.endpoint = endpoint
        self.flush_ms = flush_ms
        self.name = f"slatedb {md.version('slatedb')} flush {flush_ms}ms"
        self.loop = asyncio.new_event_loop()

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def open(self, path: str) -> Any:
        sdb = self.sdb
        b = sdb.ObjectStoreBuilder.from_env(sdb.ObjectStoreType.S3)
        for k, v in (
            ("endpoint", self.endpoint),
            ("bucket", SeaweedFS.bucket),
            ("region", REGION),
            ("access_key_id", ACCESS_KEY),
            ("secret_access_key", SECRET_KEY),
            ("allow_http", "true"),
        ):
            b.with_config(k, v)
        settings = sdb.Settings.default()
        settings.set("flush_interval", json.dumps(f"{self.flush_ms}ms"))
        builder = sdb.DbBuilder(path, b.build())
        builder.with_settings(settings)
        return self.run(builder.build())

    def durable_puts(
        self, db: Any, keys: list[bytes], values: list[bytes], threads: int
    ) -> tuple[float, list[float]]:
        lat: list[float] = []

        async def work(t: int) -> None:
            for i in range(t, len(keys), threads):
                t0 = time.perf_counter()
                handle = await db.put(keys[i], values[i])
                await handle.await_durable()
                lat.append(time.perf_counter() - t0)

        async def all_() -> None:
            await asyncio.gather(*(work(t) for t in range(threads)))

        t0 = time.perf_counter()
        self.run(all_())
        return time.perf_counter() - t0, lat

    def batches(self, db: Any, keys: list[bytes], values: list[bytes], size: int) -> float:
        async def go() -> None:
            for i in range(0, len(keys), size):
                wb = self.sdb.WriteBatch()
                for k, v in zip(keys[i : i + size], values[i : i + size], strict=True):
                    wb.put(k, v)
                handle = await db.write(wb)
                await handle.await_durable()

        t0 = time.perf_counter()
        self.run(go())
        return time.perf_counter() - t0

    def close(self, db: Any) -> None:
        self.run(db.shutdown())


Engine = Ours | Theirs


def phase(
    engine: Engine,
    proxy: Proxy,
    phase_name: str,
    delay: float,
    fn: Callable[[Any], tuple[int, float, list[float]]],
) -> Result:
    path = f"bench-{uuid.uuid4().hex[:8]}"
    db = engine.open(path)
    try:
        proxy.reset()
        units, secs, lat = fn(db)
        counts = Counts(proxy.stats(), path)
    finally:
        engine.close(db)
    return Result(engine.name, phase_name, delay, units, secs, counts, lat)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--delays", default="0,20")
    ap.add_argument("--puts", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--batch-rows", type=int, default=10_000)
    ap.add_argument("--idle-s", type=float, default=60.0)
    ap.add_argument("--idle-delay", type=float, default=20.0, help="the delay idle runs at")
    ap.add_argument("--their-flush-ms", default="100,10")
    ap.add_argument("--ours-parallel", default="1", help="max_parallel_writes values for ours")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--phases", default="puts,batches,idle")
    args = ap.parse_args()
    phases = args.phases.split(",")
    keys, values = keys_values(max(args.puts, args.rows), 7)
    pk, pv = keys[: args.puts], values[: args.puts]
    rk, rv = keys[: args.rows], values[: args.rows]
    print(
        f"# s3 requests bench: SeaweedFS behind bench/delay_proxy.py; {args.puts:,} durable puts "
        f"from {args.threads} writers; {args.rows:,} rows in {args.batch_rows:,}-row durable "
        f"batches; idle {args.idle_s:.0f} s; slatedb {md.version('slatedb')}; reps {args.reps}"
    )
    results: list[Result] = []
    with SeaweedFS() as s3:
        upstream = int(s3.endpoint.rsplit(":", 1)[1])
        for delay in [float(d) for d in args.delays.split(",")]:
            proxy = Proxy(upstream, delay)
            try:
                engines: list[Engine] = [
                    Ours(proxy.endpoint, int(p), f"ours (parallel {p})")
                    for p in args.ours_parallel.split(",")
                ]
                engines += [Theirs(proxy.endpoint, int(f)) for f in args.their_flush_ms.split(",")]
                for _ in range(args.reps):
                    for eng in engines:
                        results += run_engine(eng, proxy, delay, phases, args, pk, pv, rk, rv)
            finally:
                proxy.stop()
    report(results, args)
    return 0


def run_engine(
    eng: Engine,
    proxy: Proxy,
    delay: float,
    phases: list[str],
    args: argparse.Namespace,
    pk: list[bytes],
    pv: list[bytes],
    rk: list[bytes],
    rv: list[bytes],
) -> list[Result]:
    out: list[Result] = []
    if "puts" in phases:

        def puts(db: Any) -> tuple[int, float, list[float]]:
            secs, lat = eng.durable_puts(db, pk, pv, args.threads)
            return len(pk), secs, lat

        out.append(phase(eng, proxy, "puts", delay, puts))
        print(out[-1].line(1000), flush=True)
    if "batches" in phases:

        def batches(db: Any) -> tuple[int, float, list[float]]:
            return len(rk), eng.batches(db, rk, rv, args.batch_rows), []

        out.append(phase(eng, proxy, "batches", delay, batches))
        print(out[-1].line(1_000_000), flush=True)
    if "idle" in phases and delay == args.idle_delay:

        def idle(db: Any) -> tuple[int, float, list[float]]:
            time.sleep(args.idle_s)
            return 1, args.idle_s, []

        out.append(phase(eng, proxy, "idle", delay, idle))
        r = out[-1]
        print(
            f"{r.engine} idle: {r.counts.total() * 60 / args.idle_s:.1f} req/min "
            f"${r.counts.cost_per_day(args.idle_s):.3f}/day {r.counts.where()}",
            flush=True,
        )
    return out


def report(results: list[Result], args: argparse.Namespace) -> None:
    by: dict[tuple[str, str, float], list[Result]] = collections.defaultdict(list)
    for r in results:
        by[(r.phase, r.engine, r.delay_ms)].append(r)

    def best(rs: list[Result]) -> Result:
        return max(rs, key=lambda r: r.units / r.seconds)

    def spread(rs: list[Result]) -> str:
        rates = [r.units / r.seconds for r in rs]
        if len(rates) < 2:
            return ""
        return f"  (spread {min(rates):,.0f}..{max(rates):,.0f}/s over {len(rates)})"

    print()
    for name, per, label in (
        ("puts", 1000, f"1,000 durable puts ({args.threads} writers)"),
        ("batches", 1_000_000, f"1M rows ({args.batch_rows:,}-row durable batches)"),
    ):
        keys = [k for k in by if k[0] == name]
        if not keys:
            continue
        print(f"## {name}: best of {args.reps}")
        print(header(label))
        for k in keys:
            b = best(by[k])
            print(b.line(per) + spread(by[k]))
            if name == "puts":
                n = len(b.latencies)
                print(f"{'':<24} per 1M rows: {b.counts.total() * 1_000_000 / n:,.0f} requests")
        print()
    keys = [k for k in by if k[0] == "idle"]
    if keys:
        print(f"## idle open writer ({args.idle_s:.0f} s)")
        for k in keys:
            for r in by[k]:
                per_min = r.counts.total() * 60 / args.idle_s
                print(
                    f"{r.engine:<24} {r.delay_ms:>4.0f} ms  {per_min:7.1f} req/min  "
                    f"${r.counts.cost_per_day(args.idle_s):.3f}/day  {r.counts.where()}"
                )
        print()
    print("## where each request goes (best run of each)")
    for k in by:
        if k[0] == "idle":
            continue
        b = best(by[k])
        where = ", ".join(f"{w} {n:,}" for w, n in b.counts.where().items())
        unit = "puts" if k[0] == "puts" else "rows"
        print(f"{k[0]:<8} {k[1]:<24} {k[2]:>4.0f} ms  ({b.units:,} {unit}): {where}")
    med = [statistics.median([r.units / r.seconds for r in v]) for v in by.values()]
    assert med  # something ran


if __name__ == "__main__":
    sys.exit(main())
