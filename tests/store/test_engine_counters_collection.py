"""The engine counters survive the garbage collector running while they are read: a store or a
block cache collected in the middle of :func:`~slatedb_core.store.engine_counters.snapshot`
(a scrape) used to run its retirement callback on that thread, which took the module's lock
that the snapshot held: the scrape hung for good, and so did every later ``open_store`` of the
process (issue 40 adversarial review: engine counters must not break the hot path).

Real stores and real block caches, left in reference cycles as long-lived programs do, and
the real collector with its default thresholds; the reproduction runs in a child process so
that a hang is a failure, not a hung test session."""

from __future__ import annotations

import subprocess
import sys

from slatedb_core.sst.cache import BlockCache
from slatedb_core.store import engine_counters
from slatedb_core.store.url import open_store

_SCRAPES_WHILE_COLLECTING = """
import gc, os, sys, threading
from slatedb_core.sst.cache import BlockCache
from slatedb_core.store import engine_counters
from slatedb_core.store.url import open_store

live = [open_store("memory://") for _ in range(50)]  # each snapshot reads every live store
done = threading.Event()

def scrapes():
    for _ in range(2000):
        s = open_store("memory://"); ring = [s]; ring.append(ring)  # garbage in a cycle
        c = BlockCache(1024); ring2 = [c]; ring2.append(ring2)
        del s, ring, c, ring2
        engine_counters.snapshot()
    done.set()

threading.Thread(target=scrapes, daemon=True).start()
print("finished" if done.wait(20) else "hung")
sys.stdout.flush()
os._exit(0)  # a hung thread holds the lock the exit-time finalizers want
"""


def test_a_scrape_while_the_collector_retires_stores_and_caches_finishes() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _SCRAPES_WHILE_COLLECTING],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "finished"


def test_counts_of_collected_stores_and_caches_are_kept() -> None:
    """Totals never go down: what a collected store counted stays in the totals."""
    before = engine_counters.snapshot()
    store = open_store("memory://")
    store.put("a", b"x" * 10)
    store.get("a")
    cache = BlockCache(1024)
    cache.hits += 3
    mid = engine_counters.snapshot()
    assert mid.cache_hits >= before.cache_hits + 3
    del store, cache
    import gc

    gc.collect()
    after = engine_counters.snapshot()
    assert after.bytes.get("written", 0) >= before.bytes.get("written", 0) + 10
    assert after.requests.get("put", 0) >= before.requests.get("put", 0) + 1
    assert after.cache_hits >= mid.cache_hits


def test_hits_a_cache_counted_after_the_last_scrape_survive_its_collection() -> None:
    """A cache collected between two scrapes used to take its hits since the first with it: a
    short-lived reader's hits never reached ``slatedb_block_cache_hits_total``
    (tests/fleet/test_metrics_endpoint.py failed when the collector ran first)."""
    import gc

    before = engine_counters.snapshot()
    cache = BlockCache(1024)
    cache.hits += 5
    cache.misses += 2
    del cache
    gc.collect()
    after = engine_counters.snapshot()
    assert after.cache_hits >= before.cache_hits + 5
    assert after.cache_misses >= before.cache_misses + 2
