"""One monitoring tick over a fleet of 10,000 databases on S3 with 20 ms added per request.

SeaweedFS (lakehouse_demo.s3server) behind bench/delay_proxy.py. A few real databases are made
with our API (templates: GC'd, pinned by a retention checkpoint, with many L0 SSTs, soft-destroyed)
and their objects are copied to the other prefixes straight into SeaweedFS (no delay). Then, one
after the other, through the delay:

1. the old sequential path (``health.inspect_database`` + ``health.read_boundaries`` per
   database, what the sensors did), timed on a sample and extrapolated to the fleet;
2. ``FleetScanner.scan`` of every database: the first (cold) scan;
3. a second scan with nothing changed;
4. a scan after 1% of the live databases changed (a GC pass on those never collected, a new
   manifest from a checkpoint on the others; made directly, not timed);
5. when orchestration/sensors.py has ``evaluate_fleet(context, store, managed)``: one real tick
   of it (``dg.build_sensor_context`` over an ephemeral instance holding the fleet's database
   partitions), cold then warm.

Prints wall time, requests and requests per database for each, side by side. The budget is
Dagster's 60 s per sensor evaluation.

Usage: python bench/fleet_bench.py [--databases 10000] [--delay-ms 20] [--concurrency 64]
       [--sample 200] [--changed 0.01] [--no-dagster]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dagster as dg

from devtools.sample_data import write_database
from lakehouse_demo.s3server import ACCESS_KEY, REGION, SECRET_KEY, SeaweedFS
from orchestration import sensors
from orchestration.partitions import DATABASES
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from slatedb_core import (
    CheckpointOptions,
    Db,
    FleetScanner,
    GarbageCollectorOptions,
    ObjectStore,
    SlateDBError,
    admin,
    open_store,
    run_gc_once,
)
from slatedb_core.health import inspect_database, read_boundaries

BUDGET_S = 60.0
KINDS = ("gcd", "pinned", "l0", "destroyed")
Row = tuple[str, float, int, int, str, str]  # what, seconds, requests, databases, CPU, note


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pid_with(arg: str) -> int | None:
    """The process whose command line has the argument ``arg`` (the SeaweedFS server)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if arg.encode() in (entry / "cmdline").read_bytes().split(b"\0"):
                    return int(entry.name)
            except OSError:
                continue
    return None


class Cpu:
    """CPU seconds spent by this process, the S3 server and the delay proxy over a block: what
    bounds the figures on a small machine (the three share its cores)."""

    def __init__(self, server: int | None, proxy: int) -> None:
        self.pids = {"server": server, "proxy": proxy}
        self.spent = ""

    def __enter__(self) -> Cpu:
        self.start = (time.process_time(), {k: cpu_s(p) for k, p in self.pids.items() if p})
        return self

    def __exit__(self, *exc: object) -> None:
        ours, theirs = self.start
        parts = [f"ours {time.process_time() - ours:.1f}"]
        parts += [f"{k} {cpu_s(p) - theirs[k]:.1f}" for k, p in self.pids.items() if p]
        self.spent = ", ".join(parts)


def make_templates(store: ObjectStore) -> dict[str, dict[str, bytes]]:
    """The template databases, made with our API, and their objects (relative path -> bytes)."""
    write_database(store, "tpl/gcd", prefix="o-", l0_ssts=3, rows_per_sst=500)
    run_gc_once("tpl/gcd", store, GarbageCollectorOptions(min_age=timedelta()))
    write_database(store, "tpl/pinned", prefix="c-", l0_ssts=2, rows_per_sst=300)
    admin.create_checkpoint(
        "tpl/pinned", store, CheckpointOptions(lifetime=timedelta(days=30), name="retention")
    )
    write_database(store, "tpl/pinned", prefix="d-", l0_ssts=1, rows_per_sst=100)
    write_database(store, "tpl/l0", prefix="e-", l0_ssts=6, rows_per_sst=200)
    write_database(store, "tpl/destroyed", prefix="f-", l0_ssts=1, rows_per_sst=100, wal_rows=0)
    Db.destroy("tpl/destroyed", store, soft=True)
    out: dict[str, dict[str, bytes]] = {}
    for kind in KINDS:
        prefix = f"tpl/{kind}/"
        out[kind] = {m.path[len(prefix) :]: store.get(m.path).data for m in store.list(prefix)}
    return out


def db_path(i: int) -> str:
    return f"fleet/{KINDS[i % len(KINDS)]}/db-{i:05d}"


def copy_fleet(store: ObjectStore, templates: dict[str, dict[str, bytes]], n: int) -> float:
    """Put every template object under each database's prefix (64 puts in flight)."""
    jobs = [
        (f"{db_path(i)}/{rel}", data)
        for i in range(n)
        for rel, data in templates[KINDS[i % len(KINDS)]].items()
    ]
    started = time.perf_counter()
    pool = ThreadPoolExecutor(max_workers=64)
    try:
        for done, _ in enumerate(pool.map(lambda j: store.put(*j), jobs), 1):
            if done % 50000 == 0:
                print(f"  copied {done}/{len(jobs)} objects", flush=True)
    finally:
        pool.shutdown(cancel_futures=True)  # on Ctrl-C, not the rest of the copies
    return time.perf_counter() - started


def start_proxy(upstream_port: int, delay_ms: float) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
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
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def proxied_store_url(s3: SeaweedFS, port: int) -> str:
    return (
        f"s3://{s3.bucket}?endpoint=http://127.0.0.1:{port}&region={REGION}&allow_http=true"
        f"&access_key_id={ACCESS_KEY}&secret_access_key={SECRET_KEY}"
    )


def request_latency_ms(store: ObjectStore, path: str, n: int = 30) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        store.head(path)
        times.append(time.perf_counter() - t)
    return sorted(times)[n // 2] * 1000


Seen = dict[str, tuple[int | None, dict[str, int | None] | None]]


def old_path(store: ObjectStore, paths: list[str]) -> tuple[float, int, Seen]:
    """inspect_database + read_boundaries per database, one after another (errors included, as
    the sensors caught them), and what they read: (manifest id, boundaries) per database."""
    before = store.counters.total()
    started = time.perf_counter()
    seen: Seen = {}
    for path in paths:
        manifest_id: int | None = None
        boundaries: dict[str, int | None] | None = None
        try:
            manifest_id = inspect_database(store, path)[0].id
        except SlateDBError:  # the old sensors logged it and went on
            pass
        try:
            boundaries = read_boundaries(store, path)
        except SlateDBError:
            pass
        seen[path] = (manifest_id, boundaries)
    return time.perf_counter() - started, store.counters.total() - before, seen


def change(store: ObjectStore, paths: list[str]) -> None:
    """A real change to each database: a GC pass where none ran yet (new boundaries, manifests
    deleted), else a checkpoint (a new manifest)."""

    def one(path: str) -> None:
        if path.startswith("fleet/l0/"):  # never collected: GC moves its boundaries
            run_gc_once(path, store, GarbageCollectorOptions(min_age=timedelta()))
        else:
            admin.create_checkpoint(path, store, CheckpointOptions(lifetime=timedelta(hours=1)))

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(one, paths))


def dagster_rows(store_url: str, paths: list[str], cpu: Callable[[], Cpu]) -> list[Row] | str:
    """Two real ticks of orchestration.sensors.evaluate_fleet, if it exists."""
    evaluate: Callable[..., Any] | None = getattr(sensors, "evaluate_fleet", None)
    if evaluate is None:
        return "orchestration/sensors.py has no evaluate_fleet(context, store, managed)"
    store = ObjectStoreResource(url=store_url)
    managed = ManagedDatabasesResource()  # the partitions below are the fleet
    counters = store.open().counters  # every request of the tick goes through this store
    rows: list[Row] = []
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(DATABASES, paths)
        cursor: str | None = None
        for label in ("cold", "warm"):
            context = dg.build_sensor_context(instance=instance, cursor=cursor)
            before = counters.total()
            with cpu() as spent:
                started = time.perf_counter()
                result = evaluate(context, store, managed)
                took = time.perf_counter() - started
            if isinstance(result, dg.SensorResult):
                cursor = result.cursor
                note = (
                    f"{len(result.run_requests or [])} run requests, "
                    f"{len(result.asset_events or [])} asset events"
                )
            else:
                note = f"skip: {str(getattr(result, 'skip_message', result))[:60]}"
            made = counters.total() - before
            name = f"evaluate_fleet, one real tick ({label})"
            rows.append((name, took, made, len(paths), spent.spent, note))
    return rows


def scan_row(
    what: str, scanner: FleetScanner, paths: list[str], cpu: Cpu
) -> tuple[Row, dict[str, Any]]:
    with cpu:
        started = time.perf_counter()
        out = scanner.scan(paths)
        took = time.perf_counter() - started
    states: dict[str, int] = {}
    for status in out.values():
        states[status.state] = states.get(status.state, 0) + 1
    flagged = sum(1 for s in out.values() if s.changed)
    note = f"changed flags {flagged}; states {states}"
    return (what, took, scanner.last_scan_requests, len(paths), cpu.spent, note), out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--databases", type=int, default=10_000)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--sample", type=int, default=200, help="databases for the old path")
    parser.add_argument("--changed", type=float, default=0.01)
    parser.add_argument("--no-dagster", action="store_true")
    args = parser.parse_args()
    n = args.databases
    print(
        f"fleet_bench: {n} databases, {args.delay_ms:g} ms added per request, "
        f"concurrency {args.concurrency}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    rows: list[Row] = []
    with SeaweedFS() as s3:
        direct = s3.store()
        t = time.perf_counter()
        templates = make_templates(direct)
        sizes = {k: len(v) for k, v in templates.items()}
        print(f"templates made in {time.perf_counter() - t:.1f} s; objects per database {sizes}")
        print(f"fleet copied in {copy_fleet(direct, templates, n):.1f} s", flush=True)
        paths = [db_path(i) for i in range(n)]
        proxy, port = start_proxy(s3.ports["s3"], args.delay_ms)
        server = pid_with(f"-s3.port={s3.ports['s3']}")
        try:
            slow = open_store(proxied_store_url(s3, port))
            probe = f"{paths[0]}/manifest/_latest_version"
            print(
                f"one HEAD: {request_latency_ms(slow, probe):.1f} ms through the proxy, "
                f"{request_latency_ms(direct, probe):.1f} ms direct",
                flush=True,
            )
            sample = paths[:: max(1, n // args.sample)][: args.sample]
            with Cpu(server, proxy.pid) as cpu:
                secs, reqs, truth = old_path(slow, sample)
            scale = n / len(sample)
            note = f"measured on {len(sample)} databases, time and requests extrapolated x{scale:g}"
            spent = f"{cpu.spent} (for {len(sample)})"
            old = "old: inspect_database + read_boundaries, sequential"
            rows.append((old, secs * scale, int(reqs * scale), n, spent, note))
            print(f"  {rows[-1]}", flush=True)
            scanner = FleetScanner(slow, concurrency=args.concurrency)
            for what in ("FleetScanner: first scan (cold)", "FleetScanner: nothing changed"):
                row, out = scan_row(what, scanner, paths, Cpu(server, proxy.pid))
                agree = sum((out[p].manifest_id, out[p].boundaries) == truth[p] for p in sample)
                rows.append(
                    (*row[:5], f"{row[5]}; agrees with the old path on {agree}/{len(sample)}")
                )
                print(f"  {rows[-1]}", flush=True)
            live = [p for p in paths if not p.startswith("fleet/destroyed/")]
            k = max(1, int(n * args.changed))
            chosen = live[:: max(1, len(live) // k)][:k]
            t = time.perf_counter()
            change(direct, chosen)
            took = time.perf_counter() - t
            print(f"changed {len(chosen)} databases in {took:.1f} s (direct, not timed)")
            what = f"FleetScanner: {len(chosen)} changed ({args.changed:.0%})"
            row, out = scan_row(what, scanner, paths, Cpu(server, proxy.pid))
            found = len({p for p, st in out.items() if st.changed} & set(chosen))
            rows.append((*row[:5], f"{row[5]}; of the {len(chosen)} changed: {found}"))
            print(f"  {rows[-1]}", flush=True)
            if not args.no_dagster:
                ticks = dagster_rows(
                    proxied_store_url(s3, port), paths, lambda: Cpu(server, proxy.pid)
                )
                if isinstance(ticks, str):
                    print(f"dagster tick: not measured: {ticks}")
                else:
                    rows.extend(ticks)
        finally:
            proxy.terminate()
            proxy.wait(10)
    print(
        f"\npeak RSS of this process {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
    )
    print(f"\n{'':52} {'wall s':>7} {'requests':>9} {'req/db':>6} {'<60s':>4}  CPU s")
    for what, secs, reqs, dbs, spent, note in rows:
        ok = "yes" if secs <= BUDGET_S else "NO"
        print(f"{what:52} {secs:7.1f} {reqs:9d} {reqs / dbs:6.2f} {ok:>4}  {spent}")
        print(f"{'':52} {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
