"""A read task scans its partition's range once, unordered, with a read budget of
``task_memory_bytes / READ_MEMORY_FACTOR`` (issue 42, goals 3 and 4).

Before, a task scanned its range in steps of ``task_memory_bytes / 8`` bytes of SSTs, each a scan
of its own: every step opened its sources again with small GETs (doubling from 256 KiB) and
faulted fresh buffers in. In-process, the tasks' reads of the 10M-row uncompacted table of
bench/spark_read_bench.py (16 partitions, 2 steps each, 16 L0 SSTs per shard): ~2.3-2.9 s of CPU
in 32 scans against ~1.9-2.2 s in 16 with the budget (bench/results/spark_read.txt, session 53).
The partition's rows come unordered (Spark asks for no order): its merge rounds skip the gather
in key order when no key is in two sources. tests/spark/test_worker_memory.py holds the read
within a 64 MiB setting."""

from __future__ import annotations

from unittest import mock

import pyarrow as pa
import pytest

import spark_jobs.datasource_read as dr
from slatedb_core import DbReader, open_store
from slatedb_core.options import DbOptions
from slatedb_core.table import Table
from spark_jobs.datasource_read import (
    READ_MEMORY_FACTOR,
    SlateDBPartition,
    SlateDBReader,
    read_partition,
)

pytestmark = pytest.mark.spark

MiB = 1 << 20


def _table(url: str) -> dict[bytes, bytes]:
    """One shard of 20k rows in overlapping L0 SSTs (each flush rewrites every 7th key of the
    ones before and deletes every 11th): newer versions and tombstones across sources."""
    store = open_store(url)
    Table.create("t", store).close()
    rows: dict[bytes, bytes] = {}
    with Table.open("t", store) as t, t.writer(0, DbOptions(l0_sst_size_bytes=256 * 1024)) as db:
        for r in range(4):
            for i in range(r, 20_000, 4 if r < 3 else 7):
                k, v = b"k%06d" % i, b"v%d" % r * 50
                db.put(k, v, await_durable=False)
                rows[k] = v
            for i in range(r, 20_000, 11 * (r + 1)):
                db.delete(b"k%06d" % i, await_durable=False)
                rows.pop(b"k%06d" % i, None)
            db.flush_memtable()
    return rows


def _partitions(url: str, memory: int) -> tuple[SlateDBReader, list[SlateDBPartition]]:
    reader = SlateDBReader(
        {"url": url, "path": "t", "task_memory_bytes": str(memory)}, dr._schema_of(None)
    )
    parts = [p for p in reader.partitions() if isinstance(p, SlateDBPartition)]
    return reader, parts


def test_a_task_scans_its_range_once_with_the_budget(store_url: str) -> None:
    rows = _table(store_url)
    reader, parts = _partitions(store_url, 4 * MiB)
    calls: list[tuple[int | None, bool]] = []
    real = DbReader.scan_arrow

    def spy(self: DbReader, *args: object, **kw: object) -> pa.RecordBatchReader:
        calls.append((kw.get("read_budget"), kw.get("ordered")))  # type: ignore[arg-type]
        return real(self, *args, **kw)  # type: ignore[arg-type]

    got: dict[bytes, bytes] = {}
    with mock.patch.object(DbReader, "scan_arrow", spy):
        for p in parts:
            for b in reader.read(p):
                got.update(zip(b.column(0).to_pylist(), b.column(1).to_pylist(), strict=True))
    assert got == rows
    assert calls == [(4 * MiB // READ_MEMORY_FACTOR, False)] * len(parts)


def test_read_partition_returns_each_live_row_once(store_url: str) -> None:
    rows = _table(store_url)
    _, parts = _partitions(store_url, 4 * MiB)
    store = open_store(store_url)
    for budget in (None, 1, 64 * 1024):
        got = [
            kv
            for p in parts
            for b in read_partition(store, p, 1000, read_budget=budget)
            for kv in zip(b.column(0).to_pylist(), b.column(1).to_pylist(), strict=True)
        ]
        assert len(got) == len(rows)
        assert dict(got) == rows
