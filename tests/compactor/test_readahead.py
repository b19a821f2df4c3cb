"""A compaction's read-ahead: each source reads GETs of its share of the compaction's budget
(``CompactorOptions.read_budget_bytes``; no ramp: a compaction reads its views whole), a GET's
bytes are not held once decoded, and the output does not depend on the GET size."""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Iterator
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pytest
from ulid import ULID

from slatedb_core.compactor import run_compaction_once
from slatedb_core.compactor.distributed import DistributedCompactor, execute_subcompaction
from slatedb_core.compactor.executor import (
    READAHEAD_BUDGET,
    READAHEAD_FLOOR,
    readahead_per_source,
    source_streams,
)
from slatedb_core.compactor.output_ssts import SstParts, write_ssts
from slatedb_core.compactor.scheduler import MAX_L0_SOURCES, CompactionPlan, plan_compaction
from slatedb_core.errors import InvalidArgument
from slatedb_core.lsm.iterators import merge_sorted
from slatedb_core.manifest.model import CompactedSst, Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions, DbOptions
from slatedb_core.sst import SstOptions, SstReader, encode_sst
from slatedb_core.sst.reader import READAHEAD_MAX, READAHEAD_START
from slatedb_core.store.objectstore import GetResult, ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultyStore
from slatedb_core.writer.db import Db
from tests.sst import batch_of, numbered

PATH = "db"
SST_OPTIONS = SstOptions(block_size=4096)


class _Tracked(bytearray):
    """A GET's bytes that a weak reference can watch (bytes and its subclasses take none); the
    reader needs only their buffer (pa.py_buffer)."""


class RecordingStore(FaultyStore):
    """The real store underneath, with every GET's path and byte count recorded and its bytes
    watchable: what the reader holds is what it got."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.gets: list[tuple[str, int]] = []
        self.got: list[weakref.ref[_Tracked]] = []

    def get(self, path: str, *, byte_range: tuple[int, int] | None = None) -> GetResult:
        res = super().get(path, byte_range=byte_range)
        data = _Tracked(res.data)
        self.gets.append((path, len(data)))
        self.got.append(weakref.ref(data))
        return GetResult(cast(bytes, data), res.meta)

    def sst_gets(self) -> list[int]:
        return [n for p, n in self.gets if p.endswith(".sst") and "/compacted/" in p]


def stored_sst(rows: int = 40_000) -> tuple[RecordingStore, SstReader]:
    """An SST of ~4.5 MiB in 4 KiB blocks, opened through a recording store."""
    inner = open_store("memory://")
    data, info = encode_sst(batch_of(numbered(rows, value_len=100)), SST_OPTIONS)
    inner.put(f"{PATH}/compacted/x.sst", data)
    store = RecordingStore(inner)
    reader = SstReader.open(store, f"{PATH}/compacted/x.sst", info)
    store.gets.clear()
    store.got.clear()
    return store, reader


# ---- the reader's GET size ----------------------------------------------------------------


@pytest.mark.parametrize("size", [8 * 1024, 64 * 1024, 1024 * 1024])
def test_a_scan_with_a_readahead_reads_gets_of_that_size(size: int) -> None:
    store, reader = stored_sst()
    full = pa.Table.from_batches(list(reader.scan()))
    ramp = store.sst_gets()
    assert ramp[0] <= READAHEAD_START and max(ramp) > size  # the default doubles past it
    store.gets.clear()
    got = pa.Table.from_batches(list(reader.scan(readahead=size)))
    sizes = store.sst_gets()
    assert got.equals(full)
    assert sum(sizes) == sum(ramp) == reader.block_offsets[-1]
    assert max(sizes) <= size
    # no ramp and no waste: every GET but the last is short of the size by less than a block
    offs = reader.block_offsets
    block = max(b - a for a, b in itertools.pairwise(offs))
    assert all(n > size - block for n in sizes[:-1])
    assert len(sizes) <= -(-offs[-1] // (size - block))


def test_a_block_larger_than_the_readahead_is_read_whole() -> None:
    store, reader = stored_sst(rows=2_000)
    rows = pa.Table.from_batches(list(reader.scan(readahead=100)))
    assert rows.num_rows == 2_000
    assert len(store.sst_gets()) == reader.block_count  # one block per GET, none cut


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "1"])
def test_the_readahead_must_be_a_positive_int(bad: Any) -> None:
    _, reader = stored_sst(rows=100)
    with pytest.raises(InvalidArgument):
        reader.scan(readahead=bad)


def test_a_gets_bytes_are_released_once_its_blocks_are_decoded() -> None:
    store, reader = stored_sst()
    scan = reader.scan(readahead=64 * 1024)
    next(scan)  # the first GET's group is decoded and its first block yielded
    assert len(store.got) == 1
    assert store.got[0]() is None  # nothing holds the raw bytes while the group is merged
    for _ in scan:
        assert all(ref() is None for ref in store.got)


# ---- the executor's budget ---------------------------------------------------------------


def test_the_budget_is_shared_by_the_sources_between_floor_and_max() -> None:
    b16 = 16 * 1024 * 1024  # the default before session 54
    assert readahead_per_source(1, b16) == READAHEAD_MAX
    assert readahead_per_source(b16 // READAHEAD_MAX, b16) == READAHEAD_MAX
    assert readahead_per_source(8, b16) == b16 // 8
    assert readahead_per_source(0, b16) == READAHEAD_MAX
    # the default: one source reads the whole budget, four or more read the floor
    assert readahead_per_source(1) == READAHEAD_BUDGET == 4 * 1024 * 1024
    assert readahead_per_source(4) == READAHEAD_FLOOR
    assert readahead_per_source(MAX_L0_SOURCES) * MAX_L0_SOURCES <= 32 * 1024 * 1024
    assert readahead_per_source(MAX_L0_SOURCES) == READAHEAD_FLOOR
    assert readahead_per_source(1000) == READAHEAD_FLOOR
    big = 256 * 1024 * 1024
    assert readahead_per_source(33, big) == big // 33
    assert all(
        readahead_per_source(n, big) * n <= big
        for n in range(big // READAHEAD_MAX, big // READAHEAD_FLOOR)
    )


def fill_l0(store: ObjectStore, ssts: int, rows: int = 6_000, seed: int = 3) -> None:
    """``ssts`` overlapping L0 SSTs of ``rows`` random rows each (some overwrites, deletes)."""
    rng = np.random.default_rng(seed)
    with Db.open(PATH, store, DbOptions(l0_sst_size_bytes=64 * 1024 * 1024, block_size=4096)) as db:
        for _ in range(ssts):
            ks = sorted({bytes(k) for k in rng.integers(0, 256, (rows, 6), dtype=np.uint8)})
            vals = [
                None if rng.random() < 0.05 else bytes(rng.integers(0, 256, 100, dtype=np.uint8))
                for _ in ks
            ]
            db.bulk_ingest(
                pa.table({"key": pa.array(ks, pa.binary()), "value": pa.array(vals, pa.binary())})
            )


def manifest_of(store: ObjectStore) -> Manifest:
    return ManifestStore(store, PATH).read_latest().manifest


def compact_to_bytes(store: ObjectStore, plan: CompactionPlan, ra: int | None) -> list[bytes]:
    """The output SSTs' bytes of ``plan`` merged as the executor merges it."""
    out: list[bytes] = []

    def write(parts: SstParts) -> CompactedSst:
        out.append(b"".join(parts))
        return CompactedSst(id=ULID(), info=parts.info)

    streams = source_streams(store, PATH, manifest_of(store), plan, readahead=ra)
    write_ssts(
        merge_sorted(streams, drop_tombstones=plan.drop_tombstones), 256 * 1024, SST_OPTIONS, write
    )
    return out


def test_l0_and_run_compaction_output_does_not_depend_on_the_get_size() -> None:
    inner = open_store("memory://")
    fill_l0(inner, 4)
    store = RecordingStore(inner)
    plan = plan_compaction(manifest_of(store), CompactorOptions(l0_trigger=2))
    assert plan is not None and plan.kind == "l0" and len(plan.source_views) == 4
    store.gets.clear()
    want = compact_to_bytes(store, plan, None)
    assert max(store.sst_gets()) > 16 * 1024
    store.gets.clear()
    assert compact_to_bytes(store, plan, 16 * 1024) == want
    assert max(store.sst_gets()) <= 16 * 1024

    # two sorted runs of several SSTs each: the GET size holds across a run's SSTs
    small = CompactorOptions(l0_trigger=2, max_sst_size_bytes=256 * 1024, block_size=4096)
    assert run_compaction_once(PATH, inner, small) is not None
    fill_l0(inner, 2, seed=4)
    assert run_compaction_once(PATH, inner, small) is not None
    m = manifest_of(store)
    assert len(m.compacted) == 2 and all(len(r.views) > 1 for r in m.compacted)
    plan = plan_compaction(
        m, CompactorOptions(l0_trigger=100, min_merge_width=2, size_ratio=1000.0)
    )
    assert plan is not None and plan.kind == "sorted-runs"
    store.gets.clear()
    want = compact_to_bytes(store, plan, None)
    assert max(store.sst_gets()) > 16 * 1024
    store.gets.clear()
    assert compact_to_bytes(store, plan, 16 * 1024) == want
    assert max(store.sst_gets()) <= 16 * 1024


def _record_readaheads(monkeypatch: pytest.MonkeyPatch) -> list[int | None]:
    """The readahead each real SstReader.scan is called with (the scan itself runs)."""
    sizes_asked: list[int | None] = []
    scan: Callable[..., Iterator[pa.RecordBatch]] = SstReader.scan

    def recording(self: SstReader, *a: Any, **k: Any) -> Iterator[pa.RecordBatch]:
        sizes_asked.append(k.get("readahead"))
        return scan(self, *a, **k)

    monkeypatch.setattr(SstReader, "scan", recording)
    blocks = SstReader.blocks  # what a compaction reads through (every column, issue 38)

    def recording_blocks(self: SstReader, b0: int, b1: int, readahead: int | None = None) -> Any:
        sizes_asked.append(readahead)
        return blocks(self, b0, b1, readahead)

    monkeypatch.setattr(SstReader, "blocks", recording_blocks)
    return sizes_asked


def test_the_executor_reads_each_source_at_its_share(monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store("memory://")
    fill_l0(store, 40, rows=200)
    sizes_asked = _record_readaheads(monkeypatch)
    stats = run_compaction_once(PATH, store, CompactorOptions(l0_trigger=2))
    assert stats is not None and stats.compactions == 2
    # first the oldest MAX_L0_SOURCES views, then the other 8 into a second run
    assert len(sizes_asked) == 40
    assert set(sizes_asked[:MAX_L0_SOURCES]) == {readahead_per_source(MAX_L0_SOURCES)}
    assert set(sizes_asked[MAX_L0_SOURCES:]) == {readahead_per_source(8)}
    assert readahead_per_source(MAX_L0_SOURCES) == READAHEAD_FLOOR
    assert readahead_per_source(2) == READAHEAD_BUDGET // 2  # 2 MiB each


# ---- the budget is an option (issue 42, goal 3) ---------------------------------------------


def test_by_default_eight_l0_sources_read_one_mib_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 42, goal 3: a 10M-row ingest peaked at 1.1 GiB; a compaction of 8 L0 SSTs read
    8 MiB per source, ~37 MiB of decoded rows each (bench/results/db_ingest_memory.txt). The
    default budget was 16 MiB (2 MiB per source of 8), then 4 MiB (session 54: the ingest's
    peak 50-90 MiB lower): every source of a compaction of 4 or more reads the 1 MiB floor."""
    store = open_store("memory://")
    fill_l0(store, 8, rows=200)
    sizes_asked = _record_readaheads(monkeypatch)
    stats = run_compaction_once(PATH, store, CompactorOptions(l0_trigger=2))
    assert stats is not None and stats.compactions == 1
    assert sizes_asked == [READAHEAD_FLOOR] * 8 == [1024 * 1024] * 8
    assert CompactorOptions().read_budget_bytes == 4 * 1024 * 1024


@pytest.mark.parametrize("budget", [1, 4 * 1024 * 1024, 64 * 1024 * 1024, 1 << 40])
def test_the_executor_shares_the_options_budget(
    monkeypatch: pytest.MonkeyPatch, budget: int
) -> None:
    store = open_store("memory://")
    fill_l0(store, 4, rows=200)
    sizes_asked = _record_readaheads(monkeypatch)
    opts = CompactorOptions(l0_trigger=2, read_budget_bytes=budget)
    assert run_compaction_once(PATH, store, opts) is not None
    share = max(READAHEAD_FLOOR, min(READAHEAD_MAX, budget // 4))
    assert sizes_asked == [share] * 4 == [readahead_per_source(4, budget)] * 4


def test_a_subcompaction_shares_the_plans_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store("memory://")
    fill_l0(store, 4, rows=300)
    opts = CompactorOptions(l0_trigger=2, read_budget_bytes=4 * 1024 * 1024)
    driver = DistributedCompactor(PATH, store, opts)
    plan = driver.plan(2)
    assert plan is not None and len(plan.plan.source_views) == 4
    sizes_asked = _record_readaheads(monkeypatch)
    results = [execute_subcompaction(store, plan, i) for i in range(plan.subcompactions)]
    assert sizes_asked == [READAHEAD_FLOOR] * (4 * plan.subcompactions)
    driver.commit(plan, results)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "1", None])
def test_the_budget_must_be_a_positive_int(bad: Any) -> None:
    with pytest.raises(InvalidArgument):
        CompactorOptions(read_budget_bytes=bad)


def test_a_subcompaction_reads_each_source_at_its_share(monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store("memory://")
    fill_l0(store, 20, rows=300)
    driver = DistributedCompactor(PATH, store, CompactorOptions(l0_trigger=2))
    plan = driver.plan(2)
    assert plan is not None and len(plan.plan.source_views) == 20
    sizes_asked = _record_readaheads(monkeypatch)
    results = [execute_subcompaction(store, plan, i) for i in range(plan.subcompactions)]
    assert len(sizes_asked) == 2 * 20
    assert (
        set(sizes_asked) == {readahead_per_source(20)} and readahead_per_source(20) < READAHEAD_MAX
    )
    driver.commit(plan, results)
