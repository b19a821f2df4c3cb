"""What syncing costs a durable put on the local filesystem: ``Db.put(k, v)`` (await_durable,
the default) on ``file://`` with ``sync=true`` (the default: the WAL SST and its directory entry
fsynced before the put returns, docs/operations.md) and ``sync=false``, side by side, plus
``memory://`` as the floor. Prints latency percentiles; asserts nothing.

Two shapes:

* one thread putting one row at a time (each put waits for its own WAL SST);
* ``--threads`` threads putting at once (group commit: one WAL SST, so one set of fsyncs, per
  group of waiting puts).

Each configuration gets a fresh directory under ``--dir`` (default: a temporary directory, which
must be on the disk being measured, not tmpfs).

Usage: python bench/durable_put_bench.py [--puts 300] [--threads 8] [--dir /path/on/disk]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

import slatedb_core as sc


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def _run(url: str, puts: int, threads: int) -> tuple[list[float], float]:
    """Latencies (ms) of ``puts`` durable puts spread over ``threads`` threads, and puts/s."""
    lat: list[float] = []
    lock = threading.Lock()
    with sc.Db.open("db", sc.open_store(url)) as db:
        for i in range(20):  # warm up: first WAL SSTs, directories
            db.put(b"warm%04d" % i, b"v")

        def worker(t: int) -> None:
            mine: list[float] = []
            for i in range(puts // threads):
                t0 = time.perf_counter()
                db.put(b"t%02dk%06d" % (t, i), b"x" * 100)
                mine.append((time.perf_counter() - t0) * 1000)
            with lock:
                lat.extend(mine)

        t0 = time.perf_counter()
        ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
        for th in ts:
            th.start()
        for th in ts:
            th.join()
        wall = time.perf_counter() - t0
    return lat, len(lat) / wall


def _raw_fsync(base: Path, n: int = 200) -> list[float]:
    """ms to write 4 KiB to a new file, fsync it and fsync its directory: the disk's floor."""
    d = base / "raw"
    d.mkdir()
    lat = []
    for i in range(n):
        t0 = time.perf_counter()
        fd = os.open(d / f"f{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        os.write(fd, b"x" * 4096)
        os.fsync(fd)
        os.close(fd)
        dfd = os.open(d, os.O_RDONLY)
        os.fsync(dfd)
        os.close(dfd)
        lat.append((time.perf_counter() - t0) * 1000)
    return lat


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--puts", type=int, default=300)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--dir", default=None, help="a directory on the disk to measure")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="durable_put_", dir=args.dir))
    try:
        _bench(base, args)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _bench(base: Path, args: argparse.Namespace) -> None:
    fs = os.statvfs(base)
    print(
        f"# durable put bench: {args.puts} puts of a 100-byte value per configuration; "
        f"python {platform.python_version()}, {os.cpu_count()} CPUs, dir {base} "
        f"(block size {fs.f_bsize}); load average at start {os.getloadavg()[0]:.1f}"
    )
    raw = _raw_fsync(base)
    print(
        f"# the disk alone (write 4 KiB + fsync file + fsync directory): p50 "
        f"{_pct(raw, 0.5):.2f} ms, p99 {_pct(raw, 0.99):.2f} ms"
    )
    print(f"{'store':<22} {'threads':>7} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'puts/s':>9}")
    n = 0
    for threads in (1, args.threads):
        for name, make in (
            ("file:// sync=true", lambda d: d.as_uri() + "?sync=true"),
            ("file:// sync=false", lambda d: d.as_uri() + "?sync=false"),
            ("memory://", lambda d: "memory://"),
        ):
            n += 1
            lat, rate = _run(make(base / f"run{n}"), args.puts, threads)
            print(
                f"{name:<22} {threads:>7} {_pct(lat, 0.5):>8.2f} {_pct(lat, 0.99):>8.2f} "
                f"{statistics.fmean(lat):>8.2f} {rate:>9,.0f}"
            )


if __name__ == "__main__":
    main()
