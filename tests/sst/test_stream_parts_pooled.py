"""The parts a streamed SST hands out are built in Arrow's memory pool (issue 42, goal 3).

Measured at 10M rows (bench/results/db_ingest_memory.txt, session 52): the encoder's output
grown as a ``bytearray`` (one ``realloc`` per appended block, up to 8 MiB parts, in the L0
flush and compactor threads) left glibc's per-thread heaps holding freed memory the process
never returned; Arrow's pool is purged after each part (``release_freed_arrow_memory``). The
bytes must stay those of the one-shot encoder (tests/sst/test_stream_encoder_parts.py)."""

from __future__ import annotations

import gc

import numpy as np
import pyarrow as pa
import pytest

from slatedb_core.lsm.entries import ENTRY_SCHEMA
from slatedb_core.sst import SstOptions, encode_sst
from slatedb_core.sst.builder import SstStreamEncoder
from slatedb_core.sst.rows import pooled_concat


def _rows(n: int) -> pa.RecordBatch:
    rng = np.random.default_rng(7)
    keys = sorted({rng.bytes(16) for _ in range(n)})
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(np.arange(1, len(keys) + 1, dtype=np.uint64)),
            pa.array(np.zeros(len(keys), dtype=np.uint8)),
            pa.array([rng.bytes(100) for _ in keys], pa.binary()),
        ],
        schema=ENTRY_SCHEMA,
    )


def test_pooled_concat_is_the_join_and_lives_in_arrows_pool() -> None:
    pieces: list[bytes | bytearray | memoryview] = [b"ab", bytearray(b""), memoryview(b"xyz")[1:]]
    pieces += [np.arange(5, dtype=np.uint8).tobytes(), b"q"]
    before = pa.total_allocated_bytes()
    got = pooled_concat(pieces)
    assert bytes(got) == b"ab" + b"yz" + bytes(range(5)) + b"q"
    assert isinstance(got.obj, pa.Buffer)
    assert pa.total_allocated_bytes() >= before + len(got)
    assert bytes(pooled_concat([])) == b""


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_parts_are_in_arrows_pool_and_join_to_the_one_shot_bytes(compression: str) -> None:
    batch = _rows(20_000)
    options = SstOptions(block_size=4096, compression=compression)
    want, _ = encode_sst(batch, options)
    enc = SstStreamEncoder(options)
    parts = []
    for at in range(0, batch.num_rows, 3_000):
        enc.add(batch.slice(at, 3_000))
        part = enc.take_part(100_000)
        if part is not None:
            assert isinstance(part, memoryview) and isinstance(part.obj, pa.Buffer)
            parts.append(part)
    rest, _ = enc.finish_parts()
    assert isinstance(rest[0], memoryview) and isinstance(rest[0].obj, pa.Buffer)
    assert len(parts) >= 2
    assert b"".join([*map(bytes, parts), *map(bytes, rest)]) == want
    del enc
    gc.collect()
    held = pa.total_allocated_bytes()
    dropped = sum(len(p) for p in parts)
    parts.clear()
    gc.collect()
    # the parts' bytes were the pool's (other allocations of the process may come and go)
    assert pa.total_allocated_bytes() <= held - dropped * 0.8


def test_finish_of_an_untaken_encoder_is_the_one_shot_bytes() -> None:
    batch = _rows(5_000)
    enc = SstStreamEncoder(SstOptions(block_size=4096))
    enc.add(batch)
    data, info = enc.finish()
    assert bytes(data) == encode_sst(batch, SstOptions(block_size=4096))[0]
    assert info.size_bytes == len(data)
