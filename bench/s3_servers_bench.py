"""The S3 benchmarks against two local S3 servers side by side: moto (in-process, Python) and
SeaweedFS ``weed mini`` (a real server, Go; lakehouse_demo.s3server). Prints figures; asserts
only that no update was lost and every read found its value.

1. Latest-manifest lookup at N versions: ours (pointer + start-after LIST) and the naive full
   listing; requests and median time.
2. Manifest-update throughput with 1, 2 and 4 threads contending on one database: commits/s,
   conflicts, requests per commit, latency. SeaweedFS makes the losers of a race on one key wait
   about a second, which shows here.
3. Db: durable WriteBatch writes (rows/s and batch latency), then point gets from a freshly
   opened database (cold cache, then warm).

Usage: python bench/s3_servers_bench.py [--versions 10,1000] [--threads 1,2,4] [--updates 60]
       [--batches 40] [--batch-rows 250] [--gets 400] [--servers moto,seaweedfs]
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._moto import MotoServer
from bench.manifest_bench import incr, naive_latest, seed_versions
from lakehouse_demo.s3server import SeaweedFS
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.writer.batch import WriteBatch
from slatedb_core.writer.db import Db

Factory = Callable[[], str]
Row = dict[str, str]


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * q))]


def lookup(factory: Factory, n: int, reps: int) -> Row:
    store = open_store(factory())
    seq = seed_versions(store, "db", n)
    out: Row = {}
    for name, fn in (("ours", seq.latest_id), ("naive", lambda: naive_latest(seq))):
        times = []
        store.counters.reset()
        for _ in range(reps):
            t0 = time.perf_counter()
            got = fn()
            times.append(time.perf_counter() - t0)
            assert got == n, (name, got, n)
        out[f"{name} req"] = f"{store.counters.total() / reps:.1f}"
        out[f"{name} ms"] = f"{statistics.median(times) * 1e3:.2f}"
    return out


def updates(factory: Factory, threads: int, total: int) -> Row:
    store = open_store(factory())
    ManifestStore(store, "db").create_initial(Manifest())
    per = max(1, total // threads)
    latencies: list[float] = []
    lock = threading.Lock()

    def work() -> None:
        ms = ManifestStore(store, "db")
        base = ms.read_latest()
        for _ in range(per):
            t0 = time.perf_counter()
            base = ms.update(incr, base=base)
            with lock:
                latencies.append(time.perf_counter() - t0)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    store.counters.reset()
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=600)
    elapsed = time.perf_counter() - t0
    commits = per * threads
    final = ManifestStore(store, "db").read_latest()
    assert final.manifest.last_l0_seq == commits, "lost update"
    attempts = store.counters.snapshot().get("put_if_absent", 0)
    return {
        "commits/s": f"{commits / elapsed:.1f}",
        "conflicts": str(attempts - commits),
        "req/commit": f"{store.counters.total() / commits:.2f}",
        "p50 ms": f"{_pct(latencies, 0.5) * 1e3:.1f}",
        "p99 ms": f"{_pct(latencies, 0.99) * 1e3:.1f}",
    }


def db_put_get(factory: Factory, batches: int, batch_rows: int, gets: int) -> Row:
    store: ObjectStore = open_store(factory())
    opts = DbOptions(flush_interval=timedelta(milliseconds=10))
    value = b"v" * 100
    keys = [f"key-{i:08d}".encode() for i in range(batches * batch_rows)]
    db = Db.open("db", store, opts)
    lat = []
    t0 = time.perf_counter()
    for b in range(batches):
        wb = WriteBatch()
        for k in keys[b * batch_rows : (b + 1) * batch_rows]:
            wb.put(k, value)
        t1 = time.perf_counter()
        db.write(wb)  # durable: returns once the WAL SST is written
        lat.append(time.perf_counter() - t1)
    write_s = time.perf_counter() - t0
    db.flush_memtable()
    db.close()

    reopened = Db.open("db", store, opts)
    try:
        sample = random.Random(7).sample(keys, min(gets, len(keys)))
        out: Row = {
            "put rows/s": f"{len(keys) / write_s:,.0f}",
            "batch p50 ms": f"{_pct(lat, 0.5) * 1e3:.1f}",
            "batch p99 ms": f"{_pct(lat, 0.99) * 1e3:.1f}",
        }
        for phase in ("cold", "warm"):
            store.counters.reset()
            times = []
            for k in sample:
                t1 = time.perf_counter()
                got = reopened.get(k)
                times.append(time.perf_counter() - t1)
                assert got == value
            out[f"get {phase} p50 ms"] = f"{_pct(times, 0.5) * 1e3:.2f}"
            out[f"get {phase} mean ms"] = f"{statistics.fmean(times) * 1e3:.2f}"
            out[f"get {phase} req/get"] = f"{store.counters.total() / len(sample):.2f}"
    finally:
        reopened.close()
    return out


def table(title: str, rows: list[tuple[str, dict[str, Row]]], servers: list[str]) -> None:
    print(f"\n## {title}")
    if not rows:
        return
    metrics = list(next(iter(rows[0][1].values())).keys())
    header = f"{'case':>10} | {'metric':>18} | " + " | ".join(f"{s:>10}" for s in servers)
    print(header)
    print("-" * len(header))
    for case, by_server in rows:
        for m in metrics:
            cells = " | ".join(f"{by_server[s][m]:>10}" for s in servers)
            print(f"{case:>10} | {m:>18} | {cells}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--versions", default="10,1000")
    p.add_argument("--threads", default="1,2,4")
    p.add_argument("--updates", type=int, default=60)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--batch-rows", type=int, default=250)
    p.add_argument("--gets", type=int, default=400)
    p.add_argument("--servers", default="moto,seaweedfs")
    a = p.parse_args()
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    servers = a.servers.split(",")
    moto = MotoServer() if "moto" in servers else None
    weed = SeaweedFS().start() if "seaweedfs" in servers else None
    factories: dict[str, Factory] = {}
    if moto is not None:
        factories["moto"] = moto.new_bucket_url
    if weed is not None:
        w = weed
        factories["seaweedfs"] = lambda: w.store_url(f"bench-{uuid.uuid4().hex[:12]}")
    print("S3 servers on 127.0.0.1: " + ", ".join(servers))
    try:
        table(
            "latest-manifest lookup (ours: pointer + start-after LIST; naive: full listing)",
            [
                (f"{n} vers", {s: lookup(factories[s], n, a.reps) for s in servers})
                for n in (int(x) for x in a.versions.split(","))
            ],
            servers,
        )
        table(
            f"manifest-update throughput ({a.updates} commits per run)",
            [
                (f"{t} thr", {s: updates(factories[s], t, a.updates) for s in servers})
                for t in (int(x) for x in a.threads.split(","))
            ],
            servers,
        )
        table(
            f"Db: {a.batches} durable batches of {a.batch_rows} rows, then {a.gets} gets",
            [
                (
                    "db",
                    {s: db_put_get(factories[s], a.batches, a.batch_rows, a.gets) for s in servers},
                )
            ],
            servers,
        )
    finally:
        if moto is not None:
            moto.stop()
        if weed is not None:
            weed.stop()


if __name__ == "__main__":
    main()
