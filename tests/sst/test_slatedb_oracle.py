"""The SST codec against SlateDB 0.17's own engine (the ``slatedb`` wheel): SSTs and WAL SSTs the
wheel writes decode to its rows, and our encoder reproduces them byte for byte (data blocks,
composite bloom filter, index and stats; only the SsTableInfo differs, by the fields of ours it
appends); SSTs we encode with every codec are read by the wheel (docs/format.md)."""

from __future__ import annotations

import itertools
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from slatedb_core.options import DbOptions
from slatedb_core.sst import (
    ENTRY_SCHEMA,
    KIND_TOMBSTONE,
    KIND_VALUE,
    SstOptions,
    SstReader,
    encode_sst,
)
from slatedb_core.sst.bloom import build_filter_block, hash_keys
from slatedb_core.sst.fixed_width import encode_fixed_sst_into
from slatedb_core.sst.format import CODECS, unseal
from slatedb_core.sst.scratch import Scratch
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db
from tests.interop import conftest as interop
from tests.interop.oracle import Oracle, settings

pytestmark = pytest.mark.slatedb

SLATE = SstOptions(
    block_size=4096, min_filter_keys=1000, restart_interval=16
)  # SlateDB 0.17's defaults


# the wheel's fixtures, shared with tests/interop (one harness)
oracle = interop.oracle
root = interop.root
store = interop.store


def slate_writes(oracle: Oracle) -> dict[bytes, bytes | None]:
    """Puts, a delete, an overwrite, a TTL put and an empty value in one memtable (flushed to an
    L0 SST), then a tail in the WAL. Returns the expected latest value of each key."""
    w = oracle.open_db(s=settings(compactor=False))
    model: dict[bytes, bytes | None] = {}
    for i in range(1500):
        key, value = b"k/%05d" % i, b"v" * (i % 50) + b"%d" % i
        w.put(key, value, durable=False)
        model[key] = value
    w.delete(b"k/00005", durable=False)
    model[b"k/00005"] = None
    w.put_ttl(b"k/00007", b"ttl", 3_600_000, durable=False)
    model[b"k/00007"] = b"ttl"
    w.put(b"k/00008", b"", durable=False)
    model[b"k/00008"] = b""
    w.flush_memtable()
    w.put(b"tail", b"in-wal")
    model[b"tail"] = b"in-wal"
    w.shutdown()
    return model


def objects(root: Path, prefix: str) -> list[bytes]:
    return [
        p.read_bytes() for p in sorted((root / "db" / prefix).glob("*.sst")) if p.stat().st_size
    ]


def sections(data: bytes, reader: SstReader) -> dict[str, bytes]:
    info = reader.info
    offs = reader.block_offsets
    out = {f"block {i}": data[a:b] for i, (a, b) in enumerate(itertools.pairwise(offs))}
    out["filter"] = data[info.filter_offset : info.filter_offset + info.filter_len]
    out["index"] = data[info.index_offset : info.index_offset + info.index_len]
    out["stats"] = data[info.stats_offset : info.stats_offset + info.stats_len]
    return out


def test_slatedb_ssts_decode_to_its_rows_and_our_encoder_rebuilds_them_byte_for_byte(
    oracle: Oracle, root: Path
) -> None:
    model = slate_writes(oracle)
    l0 = objects(root, "compacted")[0]  # the memtable flush (shutdown may flush the tail too)
    reader = SstReader.from_bytes(l0, "l0")
    rows = reader.read_all(timestamps=True)
    assert reader.info.sst_type == 0 and reader.info.size_bytes == 0 and reader.has_expiring_rows
    assert reader.info.filter_format == 1 and reader.info.filter_len > 0
    # SlateDB keeps every version written to the memtable, newest first
    latest: dict[bytes, bytes | None] = {}
    for key, kind, value in zip(
        *(rows.column(c).to_pylist() for c in ("key", "kind", "value")), strict=True
    ):
        latest.setdefault(key, None if kind == KIND_TOMBSTONE else value)
    assert latest == {k: v for k, v in model.items() if k != b"tail"}
    # (1503 when the overwritten versions stay in the memtable, 1500 when they are replaced)
    assert rows.num_rows >= 1500 and rows.column("create_ts").null_count == 0
    assert rows.column("expire_ts").drop_null().to_pylist()[0] > time.time() * 1000
    for key, value in model.items():
        if key != b"tail":
            got = reader.get(key)
            assert got is not None and (None if got[1] == KIND_TOMBSTONE else got[2]) == value
    # our encoder, given the same rows and SlateDB's settings, writes the same sections
    ours, _ = encode_sst(rows, SLATE)
    theirs_parts = sections(l0, reader)
    ours_parts = sections(ours, SstReader.from_bytes(ours, "ours"))
    assert ours_parts.keys() == theirs_parts.keys() and len(theirs_parts) > 10
    for name, part in theirs_parts.items():
        assert ours_parts[name] == part, name
    # the bloom filter over the same keys, computed by us, is SlateDB's
    keys = rows.column("key").combine_chunks()
    offs = np.frombuffer(keys.buffers()[1], dtype=np.int32, count=len(keys) + 1).astype(np.int64)
    data = np.frombuffer(keys.buffers()[2], dtype=np.uint8)
    assert build_filter_block(hash_keys(data, offs), 10) == bytes(
        unseal(0, theirs_parts["filter"], "l0", "filter")
    )


def test_slatedb_wal_ssts_decode_in_write_order_and_re_encode_identically(
    oracle: Oracle, root: Path
) -> None:
    slate_writes(oracle)
    wals = objects(root, "wal")
    assert len(wals) >= 2
    seen = compared = 0
    for data in wals:
        reader = SstReader.from_bytes(data, "wal")
        rows = reader.read_all(timestamps=True)
        assert reader.wal and reader.info.last_key is None and reader.info.stats_len == 0
        seqs = rows.column("seq").to_pylist()
        assert seqs == sorted(seqs) and reader.info.first_key == seqs[0].to_bytes(8, "big")
        ours, info = encode_sst(rows, SLATE, wal=True)
        assert info.sst_type == 1
        mine = SstReader.from_bytes(ours, "ours")
        assert mine.read_all(timestamps=True).equals(rows)
        # Once in several runs the wheel wrote a WAL block of ~8 KiB (above its 4 KiB block size,
        # seen in one failed run, not reproduced since): byte equality is checked where its
        # blocks keep to the block size, which is every block of every other WAL SST.
        offs = reader.block_offsets
        if max(b - a for a, b in itertools.pairwise(offs)) <= SLATE.block_size + 4:
            assert sections(ours, mine) == sections(data, reader)
            compared += 1
        seen += rows.num_rows
    assert seen >= 1504 and compared >= 1


@pytest.mark.parametrize("codec", ["Snappy", "Zlib", "Lz4", "Zstd"])
def test_every_codec_slatedb_writes_decodes(oracle: Oracle, root: Path, codec: str) -> None:
    w = oracle.open_db(s=settings(compactor=False, compression_codec=codec))
    for i in range(3000):
        w.put(b"c/%05d" % i, bytes([i % 7]) * 120, durable=False)
    w.flush_memtable()
    w.shutdown()
    l0 = objects(root, "compacted")[0]  # the memtable flush (shutdown may flush the tail too)
    reader = SstReader.from_bytes(l0, "l0")
    assert reader.info.compression == CODECS[codec.lower()][0]
    rows = reader.read_all(timestamps=True)
    assert rows.column("key").to_pylist() == [b"c/%05d" % i for i in range(3000)]
    assert rows.column("value").to_pylist() == [bytes([i % 7]) * 120 for i in range(3000)]
    # ours with the same codec holds the same rows (compressed bytes may differ by library)
    ours, _ = encode_sst(rows, SstOptions(4096, 10, codec.lower(), 1000, 16))
    assert SstReader.from_bytes(ours, "ours").read_all(timestamps=True).equals(rows)
    for data in objects(root, "wal"):
        assert SstReader.from_bytes(data, "wal").read_all().num_rows > 0


@pytest.mark.parametrize("codec", ["none", "snappy", "zlib", "lz4", "zstd"])
def test_ssts_we_encode_with_every_codec_are_read_by_slatedb(
    oracle: Oracle, store: ObjectStore, codec: str
) -> None:
    """Our SSTs (merged into the database by ``ingest_ssts``, so the manifest is ours too)
    read by SlateDB's DbReader, key by key and in one scan. Seq 1: SlateDB's reader shows
    rows up to the manifest's last_l0_seq only."""
    n = 2500
    keys = [b"s/%06d" % (3 * i) for i in range(n)]
    values = [b"" if i % 11 == 0 else bytes([65 + i % 26]) * (i % 90) for i in range(n)]
    kinds = [KIND_TOMBSTONE if i % 9 == 4 else KIND_VALUE for i in range(n)]
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array([1] * n, pa.uint64()),
            pa.array(kinds, pa.uint8()),
            pa.array([b"" if k else v for k, v in zip(kinds, values, strict=True)], pa.binary()),
        ],
        schema=ENTRY_SCHEMA,
    )
    store.put("staging/a.sst", encode_sst(batch, SstOptions(compression=codec, block_size=2048))[0])
    fast = DbOptions(flush_interval=timedelta(milliseconds=10))
    with Db.open("db", store, fast) as db:
        db.ingest_ssts(["staging/a.sst"])
    reader = oracle.open_reader()
    want = {k: v for k, v, kind in zip(keys, values, kinds, strict=True) if kind == KIND_VALUE}
    for key in keys[::7]:
        assert reader.get(key) == want.get(key), key
    assert reader.get(b"s/000001") is None
    assert reader.scan() == sorted(want.items())
    reader.shutdown()


def test_ssts_of_the_fixed_width_encoder_are_read_by_slatedb(
    oracle: Oracle, store: ObjectStore
) -> None:
    """The bulk encoder stores every key whole (``shared`` 0); SlateDB reads that like its own."""
    n, kw, vw = 3000, 12, 40
    rng = np.random.default_rng(3)
    keys = np.unique(rng.integers(0, 256, (2 * n, kw), dtype=np.uint8), axis=0)[:n]
    values = rng.integers(0, 256, n * vw, dtype=np.uint8)
    rows = rng.permutation(n).astype(np.int64)
    data, info = encode_fixed_sst_into(
        keys.reshape(-1), kw, values, vw, rows, 1, Scratch(), SstOptions(block_size=4096)
    )
    assert info.entry_count == n
    store.put("staging/fixed.sst", bytes(data))
    with Db.open("db", store, DbOptions(flush_interval=timedelta(milliseconds=10))) as db:
        db.ingest_ssts(["staging/fixed.sst"])
    reader = oracle.open_reader()
    want = {keys[i].tobytes(): values.reshape(-1, vw)[rows[i]].tobytes() for i in range(n)}
    for i in range(0, n, 97):
        assert reader.get(keys[i].tobytes()) == want[keys[i].tobytes()]
    assert reader.scan() == sorted(want.items())
    reader.shutdown()
