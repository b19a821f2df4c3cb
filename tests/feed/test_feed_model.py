"""review43, issue 43: a seeded random schedule of puts, deletes, write batches, ingests, failed
ingests, memtable flushes, writer reopens, ``tail()`` cursors and resumed reads, each read's rows
compared with a model of the committed changes. Every reader persists the cursor of each batch
and resumes from it; what it has been delivered must always be a prefix of what was committed
after its start (nothing lost, nothing twice, nothing never committed), and all of it once the
last writes are flushed (a failed ingest's gap holds a feed until L0 covers it). Readers:
unregistered ones from ``tail()`` cursors, and registered consumers started from ``tail()``
(registered at that call) or from an empty database."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import timedelta

import pyarrow as pa
import pytest

from slatedb_core.compactor import Compactor
from slatedb_core.errors import ChangesCollected, InjectedFault
from slatedb_core.feed import ChangeFeed, ChangesOptions, Cursor
from slatedb_core.gc import GarbageCollector
from slatedb_core.options import CompactorOptions, DbOptions, GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultyStore
from slatedb_core.writer.batch import WriteBatch
from slatedb_core.writer.db import Db

Change = tuple[bytes, bytes | None]


@dataclass
class Reader:
    name: str
    consumer: str | None
    cursor: Cursor
    start: int  # index in the committed changes of its first change
    got: list[Change] = field(default_factory=list)
    collected: bool = False  # told ChangesCollected (an unregistered reader the GC outran)


def read_once(store: ObjectStore, r: Reader, rng: random.Random) -> None:
    opts = ChangesOptions(batch_rows=rng.choice([1, 2, 3, 1000]), consumer=r.consumer)
    feed = ChangeFeed("db", store, opts)
    stop = rng.choice([1, 2, None])  # batches read before the reader "crashes"
    if r.collected:
        return
    try:
        for i, batch in enumerate(feed.changes(r.cursor)):
            r.got += [(row["key"], row["value"]) for row in batch.rows.to_pylist()]
            r.cursor = batch.cursor
            if stop is not None and i + 1 >= stop:
                break
    except ChangesCollected:
        if r.consumer is not None:
            raise  # a registered consumer's checkpoint keeps all it needs
        r.collected = True


GC = GarbageCollectorOptions(min_age=timedelta(0))


def run_schedule(seed: int, steps: int, parallel: int, gc: bool = False) -> None:
    rng = random.Random(seed)
    inner = open_store(f"memory://feed-model-{seed}-{parallel}-{steps}")
    faulty = FaultyStore(inner)
    opts = DbOptions(
        flush_interval=timedelta(hours=1), max_parallel_writes=parallel, l0_max_ssts=10_000
    )
    db = Db.open("db", faulty, opts)
    committed: list[Change] = []
    readers: list[Reader] = []
    # a consumer registered on the empty database, from its start
    first = list(ChangeFeed("db", inner, ChangesOptions(consumer="c0")).changes(None))
    readers.append(Reader("c0", "c0", first[-1].cursor if first else Cursor(), 0))
    n = 0
    try:
        for step in range(steps):
            op = rng.random()
            key = f"k{rng.randrange(6)}".encode()
            if op < 0.25:
                n += 1
                v = f"v{n}".encode()
                db.put(key, v)
                committed.append((key, v))
            elif op < 0.32:
                db.delete(key)
                committed.append((key, None))
            elif op < 0.38:
                b = WriteBatch()
                ks = sorted({f"k{rng.randrange(6)}".encode() for _ in range(3)})
                for k in ks:
                    n += 1
                    b.put(k, f"v{n}".encode())
                db.write(b)
                committed += [(k, f"v{n - len(ks) + 1 + i}".encode()) for i, k in enumerate(ks)]
            elif op < 0.48:
                ks = sorted({f"k{rng.randrange(6)}".encode() for _ in range(3)})
                vs = []
                for _ in ks:
                    n += 1
                    vs.append(f"i{n}".encode())
                if rng.random() < 0.3:  # an ingest whose SST write fails: nothing committed
                    faulty.fail_next("put_if_absent", "db/compacted/*")
                try:
                    db.bulk_ingest(pa.table({"key": ks, "value": vs}))
                    committed += list(zip(ks, vs, strict=True))
                except InjectedFault:
                    pass
                faulty.clear_rules()
            elif op < 0.56:
                db.flush_memtable()
            elif op < 0.60:
                db.close()
                db = Db.open("db", faulty, opts)
            elif gc and op < 0.64:
                with Compactor("db", inner, CompactorOptions(l0_trigger=2)) as c:
                    c.run_once()
                GarbageCollector("db", inner, GC).run_once()
            elif op < 0.70 and len(readers) < 8:
                consumer = f"c{len(readers)}" if rng.random() < 0.4 else None
                feed = ChangeFeed("db", inner, ChangesOptions(consumer=consumer))
                tail = feed.tail()
                if consumer is not None:
                    feed.advance(tail)  # registers it at the tail
                readers.append(Reader(f"r{len(readers)}", consumer, tail, len(committed)))
            elif readers:
                r = rng.choice(readers)
                read_once(inner, r, rng)
                want = committed[r.start : r.start + len(r.got)]
                assert r.got == want, f"seed {seed} step {step} {r.name}: {r.got} != {want}"
        db.flush_memtable()
        for r in readers:
            for _ in range(50):
                before = len(r.got), r.cursor
                read_once(inner, r, rng)
                if (len(r.got), r.cursor) == before:
                    break
            want = committed[r.start :] if not r.collected else committed[r.start :][: len(r.got)]
            assert r.got == want, f"seed {seed} end {r.name}: {r.got} != {want}"
    finally:
        faulty.release_all()
        db.close()


@pytest.mark.parametrize("seed", range(2))
def test_feed_matches_model(seed: int) -> None:
    run_schedule(seed, 120, 1, gc=bool(seed % 2))


@pytest.mark.slow  # the same schedule, longer, 15 seeds, a parallel WAL: ~2.5 min (review43 swept 40)
@pytest.mark.parametrize("parallel", [1, 3])
@pytest.mark.parametrize("seed", range(100, 115))
@pytest.mark.parametrize("gc", [False, True])
def test_feed_matches_model_long(seed: int, parallel: int, gc: bool) -> None:
    run_schedule(seed, 300, parallel, gc)
