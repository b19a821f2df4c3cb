"""Point gets over several SSTs from many threads at once: the bloom hash a get probes with is
always its own key's (``probe_blooms_first`` and the module-wide ``_ASKED`` of
slatedb_core/sst/reader.py, 85ed4ba).

From review55 (session 55), attacking 85ed4ba: one tuple shared by every thread caches one key's
bloom hash. A get that probed a filter with another key's hash would miss a present key (None)
or skip the SST holding its newest version (an older value). Gets of different keys, of equal
keys in distinct objects and of one key object reused race here with a switch interval of
microseconds; every answer is checked. Held: the key and its hash live in one tuple replaced
whole, and the cached key is compared by identity while the tuple holds it. Checked by mutation:
a ``probe_blooms_first`` that keeps the cached hash when the key changes fails this test, and so
did (4 runs of 4) an ``_hash_of`` reading the shared slot twice with a Python call between."""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from slatedb_core.options import DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db

SSTS = 4
KEYS = 400  # key i is in SST i % SSTS; every HOT key is in each SST, newest version in the last
HOT = 40
QUIET = DbOptions(manifest_poll_interval=timedelta(hours=1), flush_interval=timedelta(hours=1))


def key(i: int) -> bytes:
    return b"key%06d" % i


def expected(i: int) -> bytes | None:
    if i >= KEYS:
        return None
    if i < HOT:
        return b"hot%d-v%d" % (i, SSTS - 1)
    return b"v%d" % i


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Db]:
    with Db.open("db", open_store(f"file://{tmp_path}/lake"), QUIET) as db:
        for j in range(SSTS):
            for i in range(KEYS):
                if i < HOT:
                    db.put(key(i), b"hot%d-v%d" % (i, j), await_durable=False)
                elif i % SSTS == j:
                    db.put(key(i), b"v%d" % i, await_durable=False)
            db.flush_memtable()
        assert len(db._engine.state.l0) == SSTS and db._engine.state.memtable.is_empty()
        yield db


@pytest.fixture
def fast_switches() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def test_gets_of_different_keys_from_threads_each_probe_their_own_keys_hash(
    db: Db, fast_switches: None
) -> None:
    wrong: list[tuple[bytes, bytes | None, bytes | None]] = []
    shared = [key(i) for i in range(KEYS + 100)]  # one object per key, reused across calls
    start = threading.Barrier(4)

    def run(seed: int) -> None:
        rnd = random.Random(seed)
        start.wait()
        for n in range(20000):
            i = rnd.randrange(KEYS + 100)  # 100 absent keys too
            k = shared[i] if n % 2 else key(i)  # the same object again, or equal bytes anew
            got = db.get(k)
            if got != expected(i):
                wrong.append((k, got, expected(i)))

    threads = [threading.Thread(target=run, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert wrong == [], wrong[:5]
