"""SlateDB 0.17's own SSTs (its default 4 KiB blocks, restart interval 16; uncompressed and zstd),
several versions of a key straddling blocks (a snapshot held), TTL rows among them, read and
compacted by ours now that a scan decodes a GET's blocks as one Block spanning them (review 53
of 9d58aea): grouped scans of ranges starting and ending inside groups serve the per-block
scan's rows, a compaction source's rows keep their expire_ts and create_ts, the change feed's
snapshot carries each key's expire_ts, and after our compaction both engines read the model."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from slatedb_core.compactor import run_compaction_once
from slatedb_core.compactor.sources import sst_rows
from slatedb_core.feed.snapshot import snapshot_rows
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.sst import SstReader
from slatedb_core.store.objectstore import ObjectStore
from tests.interop.expect import Model, check_reads, scanner
from tests.interop.oracle import Oracle, settings

pytestmark = [pytest.mark.slatedb, pytest.mark.slow]


def _rows_of(batch: pa.RecordBatch) -> list[tuple[object, ...]]:
    cols = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
    if batch.num_columns == 4:
        cols += [[None] * batch.num_rows] * 2
    return list(zip(*cols, strict=True))


def _sst_readers(store: ObjectStore, level: str) -> list[SstReader]:
    manifest = ManifestStore(store, "db").read_latest().manifest
    views = (
        list(manifest.l0) if level == "l0" else [v for run in manifest.compacted for v in run.views]
    )
    return [SstReader.open(store, f"db/compacted/{v.sst_id}.sst") for v in views]


def _newest_expiries(readers: list[SstReader]) -> dict[bytes, int | None]:
    best: dict[bytes, tuple[int, int | None]] = {}
    for r in readers:
        for key, seq, _kind, _v, expire, _create in _rows_of_table(r.read_all(timestamps=True)):
            assert isinstance(key, bytes) and isinstance(seq, int)
            if key not in best or best[key][0] < seq:
                best[key] = (seq, expire)  # type: ignore[assignment]
    return {k: e for k, (_, e) in best.items()}


def _rows_of_table(t: pa.Table) -> list[tuple[object, ...]]:
    return [r for b in t.to_batches() for r in _rows_of(b)]


@pytest.mark.parametrize("codec", [None, "Zstd"])
def test_slatedb_4k_blocks_scanned_and_compacted_by_grouped_decodes(
    oracle: Oracle, store: ObjectStore, codec: str | None
) -> None:
    s = (
        settings(compactor=False)
        if codec is None
        else settings(compactor=False, compression_codec=codec)
    )
    w = oracle.open_db("db", s)
    model = Model()
    rng = random.Random(53)
    keys = [b"k/%05d" % i for i in range(1500)]
    w.write(model.apply([(k, b"v0-" + k + b"x" * rng.randrange(100, 200)) for k in keys]))
    snapshot = w.snapshot()  # every version kept: a key's versions straddle blocks
    for rnd in range(1, 4):
        ops: list[tuple[bytes, bytes | None]] = []
        for i, k in enumerate(keys):
            if (i + rnd) % 7 == 0:
                ops.append((k, None))
            elif (i * rnd) % 3 == 0:
                ops.append((k, b"v%d-" % rnd + k + b"y" * rng.randrange(0, 300)))
        w.write(model.apply(ops))
        for k in keys[rnd::37]:
            w.put_ttl(k, b"ttl%d-" % rnd + k, 3_600_000 * rnd)
            model.put(k, b"ttl%d-" % rnd + k)
    w.flush_memtable()
    check_reads(model, w.get, w.scan, who="SlateDB Db (the oracle itself)")

    l0 = _sst_readers(store, "l0")
    assert l0 and max(r.block_count for r in l0) > 50  # 4 KiB blocks
    bounds = [None, b"k/", b"k/00000", b"k/00500", b"k/005005", b"k/01234", b"k/01499", b"k/2"]
    bounds += [rng.choice(keys) + rng.choice([b"", b"\x00", b"0"]) for _ in range(12)]
    for r in l0:
        whole = _rows_of_table(r.read_all(timestamps=True))
        assert any(row[4] is not None for row in whole)  # TTL rows among them
        for _ in range(15):
            lo, hi = rng.choice(bounds), rng.choice(bounds)
            if lo is not None and hi is not None and lo > hi:
                lo, hi = hi, lo
            plain = [x for b in r.scan(lo, hi) for x in _rows_of(b)]
            for ra in (None, 4096, 20_000):
                grouped = r.scan(lo, hi, readahead=ra, groups=True)
                assert [x for b in grouped for x in _rows_of(b)] == plain, (lo, hi, ra)
                rows = [x for b in sst_rows(r, lo, hi, ra) for x in _rows_of(b)]
                want = [
                    x
                    for x in whole
                    if (lo is None or x[0] >= lo) and (hi is None or x[0] < hi)  # type: ignore[operator]
                ]
                assert rows == want, (lo, hi, ra)

    live = dict(model.live())
    want_ttl = {k: e for k, e in _newest_expiries(l0).items() if k in live}
    manifest = ManifestStore(store, "db").read_latest().manifest
    snap = {
        row["key"]: row["expire_ts"]
        for b in snapshot_rows(store, "db", manifest, None, 97, None)
        for row in b.to_pylist()
    }
    assert snap == want_ttl
    del snapshot
    w.shutdown()

    stats = run_compaction_once("db", store, CompactorOptions(l0_trigger=1, block_size=4096))
    assert stats is not None and stats.compactions >= 1
    compacted = _sst_readers(store, "compacted")
    assert compacted and not _sst_readers(store, "l0")
    assert {k: e for k, e in _newest_expiries(compacted).items() if k in want_ttl} == want_ttl
    manifest = ManifestStore(store, "db").read_latest().manifest
    snap = {
        row["key"]: row["expire_ts"]
        for b in snapshot_rows(store, "db", manifest, b"k/00100", 50, None)
        for row in b.to_pylist()
    }
    assert snap == {k: e for k, e in want_ttl.items() if k > b"k/00100"}
    with DbReader.open("db", store) as ours:
        check_reads(model, ours.get, scanner(ours), who="our DbReader after our compaction")
    sreader = oracle.open_reader()
    check_reads(model, sreader.get, sreader.scan, who="SlateDB DbReader after our compaction")
    sreader.shutdown()
