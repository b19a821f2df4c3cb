"""Adversarial reads of ``DbReader.scan_arrow(ordered=False, read_budget=...)`` (review 53 of
8b7c7cf, the Spark partition scan of issue 42 goal 4).

- Random databases with every kind of source at once: L0 SSTs, sorted runs (a compaction),
  writes still only in the WAL (replayed into the reader's in-memory tables), deletes, merge
  operands (SlateDB RFC 0006, ``string_append``) over values in older sources, TTL rows, keys
  of several widths. The unordered scan must be the ordered scan as a multiset, and both the
  dict model of the writes (TTL rows only compared between the two scans: SlateDB 0.17 reads
  do not expire rows, its compaction may). All batches are collected before any is read.
- A reader (MANAGED: it holds a checkpoint) scanning unordered while a writer commits atomic
  generations, its compactor rewrites L0 into runs and a GC with no grace deletes what they
  retire: every scan sees one generation, whole, no row twice, no retired SST's rows.
- A FOLLOW_LATEST reader (no checkpoint) whose SSTs are compacted away and collected in the
  middle of an unordered scan: it either returns exactly the model's rows or raises
  ``SstMissing``; never a partial result reported as complete.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slatedb_core import DbReader
from slatedb_core.compactor import run_compaction_once
from slatedb_core.gc import run_gc_once
from slatedb_core.merge_operators import string_append
from slatedb_core.options import (
    CompactorOptions,
    DbOptions,
    DbReaderOptions,
    GarbageCollectorOptions,
    ReaderMode,
)
from slatedb_core.reader.reader import SstMissing
from slatedb_core.store.url import open_store
from slatedb_core.writer.batch import WriteBatch
from slatedb_core.writer.db import Db

_KEY = st.one_of(
    st.lists(st.sampled_from([0, 1, 0x61, 0xFF]), min_size=1, max_size=5).map(bytes),
    st.integers(0, 40).map(lambda i: b"key-%012d" % i),  # one width, 16 bytes
)
_OP = st.one_of(
    st.tuples(
        st.sampled_from(["put", "put", "delete", "merge", "ttl"]), _KEY, st.binary(max_size=9)
    ),
    st.tuples(st.sampled_from(["flush", "compact"]), st.just(b""), st.just(b"")),
)
GC_NOW = GarbageCollectorOptions(
    min_age=timedelta(0),
    manifest_min_age=timedelta(0),
    wal_min_age=timedelta(0),
    compacted_min_age=timedelta(0),
    compactions_min_age=timedelta(0),
)


def _collect(reader: pa.RecordBatchReader) -> Counter[tuple[bytes, bytes]]:
    batches = list(reader)  # every batch held before any is read
    return Counter(
        kv
        for b in batches
        for kv in zip(b.column(0).to_pylist(), b.column(1).to_pylist(), strict=True)
    )


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    ops=st.lists(_OP, min_size=1, max_size=80),
    tail=st.integers(0, 10),
    block_size=st.sampled_from([64, 4096]),
    budget=st.sampled_from([None, 1, 5000]),
    batch_size=st.sampled_from([1, 3, 65536]),
)
def test_every_kind_of_source_reads_as_the_model(
    tmp_path_factory: pytest.TempPathFactory,
    ops: list[tuple[str, bytes, bytes]],
    tail: int,
    block_size: int,
    budget: int | None,
    batch_size: int,
) -> None:
    root = tmp_path_factory.mktemp("db")
    store = open_store(f"file://{root}")
    model: dict[bytes, bytes | None] = {}
    ttl_keys: set[bytes] = set()
    opts = DbOptions(block_size=block_size, merge_operator="string_append")
    with Db.open("db", store, options=opts) as db:
        for i, (op, key, value) in enumerate(ops):
            if op == "put":
                db.put(key, value, await_durable=False)
                model[key] = value
            elif op == "ttl":
                db.put(key, value, ttl=1, await_durable=False)
                ttl_keys.add(key)
            elif op == "delete":
                db.delete(key, await_durable=False)
                model[key] = None
            elif op == "merge":
                db.merge(key, value, await_durable=False)
                model[key] = string_append(key, model.get(key), value)
            elif op == "flush":
                db.flush_memtable()
            elif i % 2:
                db.flush_memtable()
                run_compaction_once(
                    "db", store, CompactorOptions(l0_trigger=1, merge_operator="string_append")
                )
        for j in range(tail):  # left in the WAL only: the reader replays them
            key = b"key-%012d" % (j * 3)
            db.put(key, b"wal%d" % j)
            model[key] = b"wal%d" % j
            ttl_keys.discard(key)
        db.flush()
    live = Counter((k, v) for k, v in model.items() if v is not None and k not in ttl_keys)
    ropts = DbReaderOptions(merge_operator="string_append")
    with DbReader.open("db", store, options=ropts) as reader:
        ordered = _collect(reader.scan_arrow(None, None, batch_size, read_budget=budget))
        unordered = _collect(
            reader.scan_arrow(None, None, batch_size, read_budget=budget, ordered=False)
        )
    assert unordered == ordered
    assert Counter({kv: n for kv, n in unordered.items() if kv[0] not in ttl_keys}) == live


@pytest.mark.slow
def test_a_managed_reader_sees_whole_generations_while_the_writer_compacts_and_gc_runs(
    tmp_path: Path,
) -> None:
    """Generation g writes, in one batch, every key k < 3000 with value g (or deletes it when
    (k + g) % 5 == 0); the writer flushes often, its compactor merges L0 into runs, and a GC
    with no grace deletes what they retire. Each unordered scan of a MANAGED reader (which
    holds its checkpoint) must be one generation, whole; each of a CHECKPOINT reader of a
    checkpoint taken after generation 5 (a Spark task's read) must be generation 5, whole."""
    store = open_store(tmp_path.as_uri())
    n = 3000
    opts = DbOptions(
        block_size=1024,
        l0_sst_size_bytes=32 * 1024,
        compactor=CompactorOptions(poll_interval=timedelta(milliseconds=20), l0_trigger=2),
    )
    stop = threading.Event()
    errors: list[BaseException] = []
    gens = [0]
    cps: list[uuid.UUID] = []
    deleted = [0]  # compacted SSTs the GC deleted

    def expected(g: int) -> Counter[tuple[bytes, bytes]]:
        return Counter((b"k%06d" % k, b"gen-%08d" % g) for k in range(n) if (k + g) % 5 != 0)

    with Db.open("db", store, options=opts) as db:

        def write() -> None:
            try:
                g = 1
                while not stop.is_set() and g < 400:
                    batch = WriteBatch()
                    for k in range(n):
                        if (k + g) % 5 == 0:
                            batch.delete(b"k%06d" % k)
                        else:
                            batch.put(b"k%06d" % k, b"gen-%08d" % g)
                    db.write(batch)
                    gens[0] = g
                    if g == 5:
                        cps.append(db.create_checkpoint().id)
                    if g % 2 == 0:
                        db.flush_memtable()
                    g += 1
            except BaseException as e:
                errors.append(e)

        def collect() -> None:
            try:
                while not stop.is_set():
                    deleted[0] += run_gc_once("db", store, GC_NOW).compacted.deleted
                    time.sleep(0.01)
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=write), threading.Thread(target=collect)]
        for t in threads:
            t.start()
        try:
            while not cps and not errors:
                time.sleep(0.01)
            ropts = DbReaderOptions(manifest_poll_interval=timedelta(milliseconds=50))
            seen: set[int] = set()
            with (
                DbReader.open("db", store, options=ropts) as reader,
                DbReader.open("db", store, cps[0]) as pinned,
            ):
                deadline = time.monotonic() + 8
                while time.monotonic() < deadline and not errors:
                    got = _collect(reader.scan_arrow(read_budget=8192, ordered=False))
                    assert got, "a scan of a written database returned nothing"
                    vals = {v for _, v in got}
                    assert len(vals) == 1, f"one scan saw several generations: {sorted(vals)[:4]}"
                    g = int(vals.pop()[4:])
                    assert got == expected(g)
                    seen.add(g)
                    assert _collect(pinned.scan_arrow(read_budget=4096, ordered=False)) == expected(
                        5
                    )
        finally:
            stop.set()
            for t in threads:
                t.join()
    assert not errors, errors
    assert len(seen) >= 2  # the reader followed the writer
    assert deleted[0] > 0, "the GC deleted no SST: nothing retired was at stake"


def _four_l0(tmp_path: Path) -> dict[bytes, bytes]:
    """Four overlapping L0 SSTs of 12k rows each (more than a merge source buffers at once), with
    deletes across them; the model of their rows."""
    store = open_store(tmp_path.as_uri())
    model: dict[bytes, bytes] = {}
    with Db.open("db", store, options=DbOptions(block_size=512)) as db:
        for r in range(4):
            for i in range(r, 48_000, 4):
                k = b"k%06d" % i
                db.put(k, b"v%d" % r * 20, await_durable=False)
                model[k] = b"v%d" % r * 20
            for i in range(r, 48_000, 13):
                db.delete(b"k%06d" % i, await_durable=False)
                model.pop(b"k%06d" % i, None)
            db.flush_memtable()
    return model


def _compact_away(tmp_path: Path) -> None:
    """Compact the four L0 SSTs into a run and delete them (what a GC does once no manifest
    names them)."""
    l0 = sorted((tmp_path / "db" / "compacted").glob("*.sst"))
    assert len(l0) == 4
    assert run_compaction_once("db", open_store(tmp_path.as_uri()), CompactorOptions(l0_trigger=1))
    for p in l0:
        p.unlink()


def _rows_of(batches: list[pa.RecordBatch]) -> Counter[tuple[bytes, bytes]]:
    return Counter(
        kv
        for b in batches
        for kv in zip(b.column(0).to_pylist(), b.column(1).to_pylist(), strict=True)
    )


@pytest.mark.slow
def test_follow_latest_losing_its_ssts_mid_scan_raises(tmp_path: Path) -> None:
    """A FOLLOW_LATEST reader (no checkpoint) has returned the first batch of an unordered scan
    with a tiny read budget when its L0 SSTs are compacted into a run and deleted: the scan
    raises SstMissing (it cannot know which rows it returned), never ends as if complete."""
    model = _four_l0(tmp_path)
    store = open_store(tmp_path.as_uri())
    ropts = DbReaderOptions(mode=ReaderMode.FOLLOW_LATEST)
    with DbReader.open("db", store, options=ropts) as reader:
        it = iter(reader.scan_arrow(None, None, 100, read_budget=2048, ordered=False))
        got = [next(it)]
        _compact_away(tmp_path)
        with pytest.raises(SstMissing, match="unordered"):
            got.extend(it)
        assert _rows_of(got) <= Counter(model.items())


@pytest.mark.slow
def test_follow_latest_losing_its_ssts_before_a_scan_reads_the_new_run(tmp_path: Path) -> None:
    """The same, but the SSTs go before the scan returned a row: it reloads the manifest and
    reads the new run from the start, every row once."""
    model = _four_l0(tmp_path)
    store = open_store(tmp_path.as_uri())
    ropts = DbReaderOptions(mode=ReaderMode.FOLLOW_LATEST)
    with DbReader.open("db", store, options=ropts) as reader:
        _compact_away(tmp_path)
        got = list(reader.scan_arrow(None, None, 100, read_budget=2048, ordered=False))
    assert _rows_of(got) == Counter(model.items())
