"""The compactor a writer runs (``DbOptions.compactor``) writes its SSTs as the writer does:
block size, bloom bits and compression it was not given come from the writer's
``DbOptions`` (session 52 noticed a database whose L0 SSTs had the 4 KiB blocks its operator
asked for and whose compacted SSTs had 64 KiB ones). What a ``CompactorOptions`` sets wins;
a standalone compactor keeps the SST defaults."""

from __future__ import annotations

import itertools
import time
from datetime import timedelta

import pyarrow as pa
import pytest

from slatedb_core.compactor import run_compaction_once
from slatedb_core.layout import sst_path
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions, DbOptions
from slatedb_core.sst.reader import SstReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db

QUIET = timedelta(hours=1)


def fill(db: Db, flushes: int = 2) -> None:
    for f in range(flushes):
        keys = [b"k%06d" % (i * flushes + f) for i in range(2000)]
        db.put_arrow(pa.table({"key": keys, "value": [b"v" * 100] * len(keys)}))
        db.flush_memtable()


@pytest.fixture
def store() -> ObjectStore:
    """The behaviour is the compactor's, whatever the store: one in memory."""
    return open_store("memory://")


def compacted_ssts(store: ObjectStore) -> list[SstReader]:
    manifest = ManifestStore(store, "db").read_latest().manifest
    return [
        SstReader.open(store, sst_path("db", view.sst_id))
        for run in manifest.compacted
        for view in run.views
    ]


def wait_compacted(store: ObjectStore) -> None:
    deadline = time.monotonic() + 20
    while not ManifestStore(store, "db").read_latest().manifest.compacted:
        assert time.monotonic() < deadline, "the embedded compactor never compacted"
        time.sleep(0.05)


def largest_block(reader: SstReader) -> int:
    offs = reader.block_offsets
    return max(b - a for a, b in itertools.pairwise(offs))


def test_the_embedded_compactor_writes_the_writers_block_size_and_compression(
    store: ObjectStore,
) -> None:
    compactor = CompactorOptions(poll_interval=timedelta(milliseconds=20), l0_trigger=2)
    options = DbOptions(
        flush_interval=QUIET, block_size=4096, compression="zstd", compactor=compactor
    )
    with Db.open("db", store, options) as db:
        fill(db)
        wait_compacted(store)
    readers = compacted_ssts(store)
    assert readers
    for r in readers:
        assert r.info.compression != 0  # zstd, as the writer's L0 SSTs
        assert r.block_count > 20  # 4 KiB blocks: 4,000 rows of ~115 B in ~100 blocks
        assert largest_block(r) <= 4096


def test_what_the_compactor_options_set_wins(store: ObjectStore) -> None:
    compactor = CompactorOptions(
        poll_interval=timedelta(milliseconds=20), l0_trigger=2, block_size=16384
    )
    options = DbOptions(flush_interval=QUIET, block_size=4096, compactor=compactor)
    with Db.open("db", store, options) as db:
        fill(db)
        wait_compacted(store)
    for r in compacted_ssts(store):
        assert r.info.compression == 0
        assert 4096 < largest_block(r) <= 16384


def test_a_standalone_compactor_keeps_the_sst_defaults(store: ObjectStore) -> None:
    with Db.open("db", store, DbOptions(flush_interval=QUIET, block_size=4096)) as db:
        fill(db)
    stats = run_compaction_once("db", store, CompactorOptions(l0_trigger=2))
    assert stats is not None and stats.compactions == 1
    (r,) = compacted_ssts(store)
    assert largest_block(r) > 4096  # 64 KiB blocks (CompactorOptions' own default)
