"""Change-feed throughput next to a full scan of the same rows (issue 43: "a bench of feed
throughput against a full scan of the same rows").

For each ``--rows`` N (default 100,000 and 1,000,000) a database on the local filesystem gets N
rows of 16-byte random keys and 100-byte values (``bench/_data.py``), written with ``put_arrow``
in chunks of 20,000 rows and ``await_durable=False``, then one WAL flush. Then, in turn:

1. ``wal``: every row is in WAL SSTs, nothing in L0 (``l0_sst_size_bytes`` far above N rows).
   Feed: ``DbReader.changes()`` from no cursor, every batch consumed. Scans, both
   ``scan_arrow()``: ``open+scan_arrow`` opens a new ``DbReader`` each pass (its open replays
   the WAL into memory: the feed's equal, both start from the store), ``scan_arrow`` reuses one
   reader opened before (the data already in memory; a replayed table is sorted on its first
   scan, which the best of the passes hides).
2. ``resume``: the same database, the feed resumed from the first cursor past 90% of the rows,
   so it reads the last 10% (and the WAL SST that cursor names); the scan has no such option and
   reads everything (its figures are those of ``wal``).
3. ``batch``: the feed of ``wal`` at ``batch_rows`` 1,000 and 100,000; the per-batch overhead is
   the time difference divided by the difference in batch counts.
4. ``l0``: a writer reopens the database and flushes its memtable to L0. The feed still reads
   the WAL SSTs (from id 1, still there); the reader's scans read L0 SSTs (the warm one through
   the block cache).
5. ``gc``: a GC pass (``min_age`` 0) collects the WAL below the replay point, so a feed with no
   cursor bootstraps: a checkpoint of the latest manifest and a snapshot of its SSTs. The scan
   reads the same L0 SSTs.

Timing: best of ``--repeats`` passes for wall seconds and process CPU seconds
(``time.process_time``: every thread of this process, the feed's WAL decode threads and the
object store's I/O threads included). rows/s is rows delivered per wall second; rows/CPU-s per
CPU second. The row count of each pass is checked (N for a full read); a wrong count is printed,
never raised. The table ends with the load average read before and after the run.

    .venv/bin/python bench/changes_bench.py [--rows 100000,1000000] [--repeats 3] [--dir /tmp/x]
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._data import make_table
from slatedb_core.feed import ChangeBatch, ChangesOptions, Cursor
from slatedb_core.gc import GarbageCollector
from slatedb_core.options import (
    DbOptions,
    DbReaderOptions,
    GarbageCollectorOptions,
    ReaderMode,
)
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.wal import WalLog
from slatedb_core.writer.db import Db

DB = "db"
CHUNK_ROWS = 20_000
MiB = 1024 * 1024
BIG = 65536  # the feed's and the scan's default batch size
READER = DbReaderOptions(manifest_poll_interval=timedelta(minutes=1), mode=ReaderMode.MANAGED)


@dataclass
class Row:
    n: int
    shape: str
    what: str
    rows: int
    wall: float
    cpu: float
    note: str = ""


def best_of(repeats: int, fn: Callable[[], int]) -> tuple[int, float, float]:
    """(rows of the last pass, best wall s, best process CPU s) over ``repeats`` passes."""
    walls, cpus, rows = [], [], 0
    for _ in range(repeats):
        gc.collect()
        w0, c0 = time.perf_counter(), time.process_time()
        rows = fn()
        cpus.append(time.process_time() - c0)
        walls.append(time.perf_counter() - w0)
    return rows, min(walls), min(cpus)


def count_feed(batches: Iterator[ChangeBatch]) -> int:
    return sum(b.rows.num_rows for b in batches)


def count_batches(batches: Iterator[ChangeBatch]) -> tuple[int, int]:
    rows = n = 0
    for b in batches:
        rows += b.rows.num_rows
        n += 1
    return rows, n


def count_scan(reader: DbReader) -> int:
    return sum(b.num_rows for b in reader.scan_arrow(batch_size=BIG))


def cursor_after(reader: DbReader, fraction: float, total: int) -> tuple[Cursor, int]:
    """The first cursor past ``fraction`` of the rows, and the rows delivered before it."""
    seen = 0
    for b in reader.changes(options=ChangesOptions(batch_rows=1000)):
        seen += b.rows.num_rows
        if seen >= fraction * total:
            return b.cursor, seen
    raise AssertionError(f"the feed ended at {seen} of {total} rows")


def write(store: ObjectStore, table: pa.Table) -> float:
    options = DbOptions(
        l0_sst_size_bytes=4096 * MiB,
        max_unflushed_bytes=8192 * MiB,
        flush_interval=timedelta(milliseconds=50),
    )
    t0 = time.perf_counter()
    with Db.open(DB, store, options) as db:
        for off in range(0, table.num_rows, CHUNK_ROWS):
            db.put_arrow(table.slice(off, CHUNK_ROWS), await_durable=False)
        db.flush()
    return time.perf_counter() - t0


def checked(n: int, got: int, note: str = "") -> str:
    return note if got == n else f"{note} WRONG: {got} rows".strip()


def cold_scan(store: ObjectStore) -> int:
    with DbReader.open(DB, store, options=READER) as reader:
        return count_scan(reader)


def feed_and_scan(
    reader: DbReader, store: ObjectStore, n: int, shape: str, repeats: int
) -> list[Row]:
    out = []
    got, wall, cpu = best_of(repeats, lambda: count_feed(reader.changes()))
    out.append(Row(n, shape, "feed", got, wall, cpu, checked(n, got)))
    got, wall, cpu = best_of(repeats, lambda: cold_scan(store))
    out.append(Row(n, shape, "open+scan_arrow", got, wall, cpu, checked(n, got, "new reader")))
    got, wall, cpu = best_of(repeats, lambda: count_scan(reader))
    out.append(Row(n, shape, "scan_arrow", got, wall, cpu, checked(n, got, "open reader")))
    return out


def open_reader(store: ObjectStore) -> DbReader:
    return DbReader.open(DB, store, options=READER)


def bench_size(n: int, root: Path, repeats: int, seed: int) -> list[Row]:
    table = make_table(n, np.random.default_rng(seed))
    d = Path(tempfile.mkdtemp(prefix="changes-bench-", dir=root))
    rows: list[Row] = []
    try:
        store = open_store(d.as_uri())
        dt = write(store, table)
        del table
        wal = len(WalLog(store, DB).list_ids())
        print(f"N={n:,}: written in {dt:.2f} s, {wal} WAL SSTs", flush=True)

        reader = open_reader(store)
        rows += feed_and_scan(reader, store, n, "wal", repeats)
        since, before = cursor_after(reader, 0.9, n)
        got, wall, cpu = best_of(repeats, lambda: count_feed(reader.changes(since)))
        rows.append(
            Row(n, "resume", "feed after 90%", got, wall, cpu, checked(n - before, got, "last 10%"))
        )
        for size in (1000, 100_000):
            o = ChangesOptions(batch_rows=size)
            res: list[int] = []

            def run(o: ChangesOptions = o, res: list[int] = res) -> int:
                got, batches = count_batches(reader.changes(options=o))
                res[:] = [batches]
                return got

            got, wall, cpu = best_of(repeats, run)
            note = checked(n, got, f"{res[0]} batches")
            rows.append(Row(n, "batch", f"feed batch_rows={size:,}", got, wall, cpu, note))
        reader.close()
        print(f"N={n:,}: wal, resume and batch shapes done", flush=True)

        with Db.open(DB, store) as db:
            db.flush_memtable()
        reader = open_reader(store)
        l0 = reader.stats().l0_views
        rows += feed_and_scan(reader, store, n, "l0", repeats)
        rows[-3].note = checked(n, rows[-3].rows, f"{len(WalLog(store, DB).list_ids())} WAL SSTs")
        rows[-1].note = checked(n, rows[-1].rows, f"open reader, {l0} L0 SST(s)")
        reader.close()

        GarbageCollector(DB, store, GarbageCollectorOptions(min_age=timedelta(0))).run_once()
        ids = WalLog(store, DB).list_ids()
        reader = open_reader(store)
        rows += feed_and_scan(reader, store, n, "gc", repeats)
        snap = sum(pc.sum(b.rows.column("snapshot")).as_py() or 0 for b in reader.changes())
        rows[-3].note = checked(n, rows[-3].rows, f"{snap:,} snapshot rows; WAL left: {ids[:3]}")
        reader.close()
        print(f"N={n:,}: l0 and gc shapes done", flush=True)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return rows


def per_batch(rows: list[Row]) -> list[str]:
    out = []
    for n in sorted({r.n for r in rows}):
        b = [r for r in rows if r.n == n and r.shape == "batch"]
        if len(b) != 2:
            continue
        small, big = b
        nb_small, nb_big = (int(r.note.split()[0]) for r in (small, big))
        if nb_small == nb_big:
            continue
        dw = (small.wall - big.wall) / (nb_small - nb_big)
        dc = (small.cpu - big.cpu) / (nb_small - nb_big)
        out.append(
            f"N={n:,}: per-batch overhead {dw * 1e6:,.0f} us wall, {dc * 1e6:,.0f} us CPU "
            f"({nb_small} vs {nb_big} batches)"
        )
    return out


def table_text(rows: list[Row]) -> str:
    head = (
        f"{'rows':>9} {'shape':<7} {'read':<24} {'delivered':>9} {'wall s':>7} "
        f"{'CPU s':>7} {'rows/s':>11} {'rows/CPU-s':>11}  note"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        rate = f"{r.rows / r.wall:,.0f}" if r.rows else "-"
        crate = f"{r.rows / r.cpu:,.0f}" if r.rows and r.cpu > 0 else "-"
        lines.append(
            f"{r.n:>9,} {r.shape:<7} {r.what:<24} {r.rows:>9,} {r.wall:>7.3f} {r.cpu:>7.3f} "
            f"{rate:>11} {crate:>11}  {r.note}"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    ap.add_argument("--rows", default="100000,1000000", help="comma-separated row counts")
    ap.add_argument("--repeats", type=int, default=5, help="passes per figure (best kept)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dir", default=None, help="parent of the temporary databases (local disk)")
    args = ap.parse_args()
    root = Path(args.dir or tempfile.gettempdir())
    root.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()
    rows: list[Row] = []
    for n in (int(x) for x in args.rows.split(",")):
        rows += bench_size(n, root, args.repeats, args.seed)
    load1 = os.getloadavg()
    print()
    print(table_text(rows))
    print()
    for line in per_batch(rows):
        print(line)
    print(
        f"best of {args.repeats}; {os.cpu_count()} cores; load average (1, 5, 15 min) "
        f"before {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, "
        f"after {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}"
    )


if __name__ == "__main__":
    main()
