"""A compacted SST streamed in parts (issue 42, goal 3): the parts an :class:`SstStreamEncoder`
hands out with ``take_part`` / ``finish_parts``, and an output SST's :class:`SstParts`, joined,
are byte for byte the SST :func:`encode_sst` makes of the same rows at once (so a compaction
that streams its output to the store writes the objects it wrote when it held them whole), and
no part but the last few is smaller than asked."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from slatedb_core.compactor.output_ssts import SstParts, split_stream
from slatedb_core.errors import InvalidArgument
from slatedb_core.lsm.entries import ENTRY_SCHEMA
from slatedb_core.sst import KIND_TOMBSTONE, KIND_VALUE, SstOptions, encode_sst
from slatedb_core.sst.builder import SstStreamEncoder


def rows(seed: int, n: int) -> pa.RecordBatch:
    rng = np.random.default_rng(seed)
    keys = sorted({rng.bytes(int(rng.integers(1, 24))) for _ in range(n)})
    kinds = np.where(rng.random(len(keys)) < 0.1, KIND_TOMBSTONE, KIND_VALUE).astype(np.uint8)
    values = [b"" if k == KIND_TOMBSTONE else rng.bytes(int(rng.integers(0, 300))) for k in kinds]
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(rng.integers(1, 1 << 40, len(keys)), pa.uint64()),
            pa.array(kinds, pa.uint8()),
            pa.array(values, pa.binary()),
        ],
        schema=ENTRY_SCHEMA,
    )


OPTIONS = [
    SstOptions(block_size=4096),
    SstOptions(block_size=1024, compression="zstd", restart_interval=16),
    SstOptions(block_size=65536, bloom_bits_per_key=0),
]


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("part_bytes", [1, 10_000, 200_000, 1 << 40])
def test_streamed_parts_join_to_the_one_shot_bytes(options: SstOptions, part_bytes: int) -> None:
    batch = rows(1, 6_000)
    want, want_info = encode_sst(batch, options)
    enc = SstStreamEncoder(options)
    parts: list[bytes] = []
    for at in range(0, batch.num_rows, 700):
        enc.add(batch.slice(at, 700))
        part = enc.take_part(part_bytes)
        if part is not None:
            assert len(part) >= part_bytes
            parts.append(bytes(part))
    assert enc.encoded_bytes == sum(map(len, parts)) + enc.encoded_bytes - sum(map(len, parts))
    rest, info = enc.finish_parts()
    got = b"".join([*parts, *(bytes(p) for p in rest)])
    assert got == want
    assert info == want_info
    if part_bytes == 1:
        assert len(parts) > 3  # it did stream


def test_finish_after_a_part_was_taken_is_refused() -> None:
    enc = SstStreamEncoder(SstOptions(block_size=1024))
    enc.add(rows(2, 2_000))
    assert enc.take_part(1) is not None
    with pytest.raises(InvalidArgument):
        enc.finish()


@pytest.mark.parametrize("part_bytes", [1, 50_000, 1 << 40])
def test_sst_parts_of_a_split_stream_are_the_one_shot_ssts(part_bytes: int) -> None:
    batch = rows(3, 8_000)
    options = SstOptions(block_size=2048)
    pieces = split_stream((batch.slice(a, 900) for a in range(0, batch.num_rows, 900)), 200_000)
    done = 0
    ssts = 0
    for piece, ends in pieces:
        if not piece.num_rows:
            continue
        parts = SstParts(options, piece, ends, pieces, part_bytes)
        with pytest.raises(RuntimeError):
            _ = parts.info  # not before every part is taken
        data = b"".join(bytes(p) for p in parts)
        want, want_info = encode_sst(batch.slice(done, parts.rows), options)
        assert data == want and parts.info == want_info
        with pytest.raises(RuntimeError):
            list(parts)  # iterated once
        done += parts.rows
        ssts += 1
    assert done == batch.num_rows and ssts > 2


def test_a_large_merge_batch_is_handed_out_in_parts_of_about_the_part_size() -> None:
    """A merge round can be tens of MiB of rows in one batch: its parts are still about
    ``part_bytes`` each, not the whole batch's bytes at once."""
    batch = rows(4, 20_000)
    part_bytes = 100_000
    parts = SstParts(SstOptions(block_size=4096), batch, True, iter(()), part_bytes)
    sizes = [len(p) for p in parts]
    assert sum(sizes) > 20 * part_bytes
    assert max(sizes) < 3 * part_bytes, sizes
    assert (
        b"".join(
            bytes(p)
            for p in SstParts(SstOptions(block_size=4096), batch, True, iter(()), part_bytes)
        )
        == encode_sst(batch, SstOptions(block_size=4096))[0]
    )
