"""Single puts (the memtable's dict, flushed by ``_dict_slices`` since b358a5c) racing memtable
freezes and L0 flushes, then a crash, a crash in the middle of an L0 flush, and WAL replay.

From review54 (session 54) of b358a5c ("memtable: flush a dict of single puts without its sorted
copy"): whatever the interleaving, the next writer reads for each key the value of the last round
acknowledged durable (or a later round's, written but not acknowledged), never an older one, a
deleted one brought back, or a mix of rounds."""

from __future__ import annotations

import contextlib
import dataclasses
import random
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultyStore
from slatedb_core.writer.db import Db

THREADS, KEYS, ROUNDS = 3, 60, 12
OPTS = DbOptions(
    flush_interval=timedelta(milliseconds=5),
    manifest_poll_interval=timedelta(milliseconds=50),
    l0_sst_size_bytes=2048,
    l0_max_ssts=10_000,  # no compactor here: L0 only grows
)


def value(t: int, j: int, r: int) -> bytes | None:
    """Round ``r``'s write of key ``(t, j)``: a delete every third round for odd keys."""
    if j % 2 and r % 3 == 2:
        return None
    return b"t%d-j%03d-r%03d" % (t, j, r) + b"." * ((t * 7 + j + r) % 40)


def key(t: int, j: int) -> bytes:
    return b"key-%d-%03d" % (t, j)


def writer(db: Db, t: int, acked: list[int], stop: threading.Event) -> None:
    rng = random.Random(t)
    for r in range(ROUNDS):
        if stop.is_set():
            return
        js = list(range(KEYS))
        rng.shuffle(js)
        for j in js:
            for _ in range(rng.randint(1, 3)):  # the same key put several times in a round
                v = value(t, j, r)
                if v is None:
                    db.delete(key(t, j), await_durable=False)
                else:
                    db.put(key(t, j), v, await_durable=False)
        db.flush()
        acked[t] = r


def check(store: ObjectStore, acked: list[int], written: list[int]) -> None:
    with Db.open("db", store, OPTS) as again:
        for t in range(THREADS):
            for j in range(KEYS):
                got = again.get(key(t, j))
                ok = [value(t, j, r) for r in range(acked[t], written[t] + 1)]
                assert got in ok, (t, j, got, acked[t], written[t])


def quietly(call: Callable[[], None]) -> Callable[[], None]:
    """``call`` for a thread the crash may fail (its error is the crash's, not the test's)."""

    def run() -> None:
        with contextlib.suppress(Exception):
            call()

    return run


def race(db: Db, stop: threading.Event) -> list[int]:
    acked = [-1] * THREADS
    threads = [
        threading.Thread(target=writer, args=(db, t, acked, stop), daemon=True)
        for t in range(THREADS)
    ]
    for th in threads:
        th.start()
    while any(th.is_alive() for th in threads):
        try:
            db.flush_memtable()
        except Exception:
            break
        time.sleep(0.005)
    for th in threads:
        th.join(60)
    return acked


@pytest.mark.parametrize("window", [1, 4], ids=["sequential WAL", "parallel WAL"])
def test_single_puts_racing_flushes_then_a_crash(tmp_path: Path, window: int) -> None:
    store = open_store(f"file://{tmp_path}/lake")
    db = Db.open("db", store, dataclasses.replace(OPTS, max_parallel_writes=window))
    acked = race(db, threading.Event())
    assert acked == [ROUNDS - 1] * THREADS
    db._simulate_crash()
    check(store, acked, [ROUNDS - 1] * THREADS)


@pytest.mark.parametrize("window", [1, 4], ids=["sequential WAL", "parallel WAL"])
def test_a_crash_in_the_middle_of_an_l0_flush_then_wal_replay(tmp_path: Path, window: int) -> None:
    """The crash comes while an L0 SST of single puts is being written; the SST lands after the
    crash (a zombie's upload) and is never named; the replay restores the rows from the WAL."""
    inner = open_store(f"file://{tmp_path}/lake")
    store = FaultyStore(inner)
    db = Db.open("db", store, dataclasses.replace(OPTS, max_parallel_writes=window))
    stop = threading.Event()
    acked = [-1] * THREADS
    threads = [
        threading.Thread(target=writer, args=(db, t, acked, stop), daemon=True)
        for t in range(THREADS)
    ]
    for th in threads:
        th.start()
    hold = store.pause("l0", "put_if_absent", "db/compacted/*", times=1)
    flushers: list[threading.Thread] = []  # the background L0 flusher may reach it first
    while not hold.wait_reached(0.05):
        if not any(f.is_alive() for f in flushers):
            flushers.append(threading.Thread(target=quietly(db.flush_memtable), daemon=True))
            flushers[-1].start()
    stop.set()
    for th in threads:
        th.join(60)
    crashed_at = list(acked)
    # the crash's shut-down waits for the background threads: the held upload lands during it
    threading.Timer(0.2, hold.release).start()
    db._simulate_crash()
    for f in flushers:
        f.join(30)
    check(inner, crashed_at, [min(a + 1, ROUNDS - 1) for a in crashed_at])
