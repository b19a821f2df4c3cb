"""SST sections decompress to at most what the format allows, or CorruptionError.

Issue 39, item 5: blocks were decompressed with no output limit, so a 60 KB zstd block could ask
for ~2 GB (161 MiB before the reader noticed). A data block holds at most ``block_size`` bytes,
or one row of the largest key and value this engine accepts (``MAX_BLOCK_BYTES``); the index,
filter and stats sections at most that or ``SECTION_RATIO`` times their stored size. Peak
memory is measured with tracemalloc around each read.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable

import cramjam  # type: ignore[import-untyped, unused-ignore]
import pytest

from slatedb_core.errors import CorruptionError
from slatedb_core.lsm.entries import batch_from_lists
from slatedb_core.sst import SstOptions, SstReader, encode_sst
from slatedb_core.sst.format import (
    DEFLATE_MAX_RATIO,
    MAX_BLOCK_BYTES,
    decompress,
    zstd_content_size,
)

PEAK_FACTOR = 64
PEAK_SLACK = 2 << 20
HUGE = MAX_BLOCK_BYTES + (1 << 20)  # a value no block of this format can hold


def peak_and_error(read: Callable[[], object]) -> tuple[int, CorruptionError | None]:
    tracemalloc.start()
    try:
        try:
            read()
            error = None
        except CorruptionError as e:
            error = e
        return tracemalloc.get_traced_memory()[1], error
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("codec", ["zstd", "zlib", "lz4", "snappy"])
def test_a_block_larger_than_any_row_is_refused_before_it_is_allocated(codec: str) -> None:
    """An SST whose one block decompresses past MAX_BLOCK_BYTES (zeros: a few KB stored)."""
    batch = batch_from_lists([b"k"], [1], [0], [bytes(HUGE)])
    data, _ = encode_sst(batch, SstOptions(compression=codec, bloom_bits_per_key=0))
    del batch
    peak, error = peak_and_error(lambda: SstReader.from_bytes(data, "s.sst").read_all())
    # zlib declares no size: deflate's own ratio limit is the bound
    factor = DEFLATE_MAX_RATIO if codec == "zlib" else PEAK_FACTOR
    bound = factor * len(data) + PEAK_SLACK
    assert peak <= bound, f"{codec}: peak {peak >> 20} MiB for a {len(data)}-byte SST"
    assert error is not None and "block 0" in str(error)


def test_a_zstd_frame_lying_about_its_size_is_refused() -> None:
    """The frame header says 1 KiB; the frame decodes to 32 MiB."""
    bomb = bytearray(cramjam.zstd.compress(bytes(32 << 20)))
    fhd = bomb[4]
    single, width = (fhd >> 5) & 1, {1: 2, 2: 4, 3: 8}[fhd >> 6]
    at = 5 + (0 if single else 1) + {0: 0, 1: 1, 2: 2, 3: 4}[fhd & 3]
    assert zstd_content_size(bytes(bomb)) == 32 << 20
    bomb[at : at + width] = (1024 - (256 if width == 2 else 0)).to_bytes(width, "little")
    assert zstd_content_size(bytes(bomb)) == 1024
    lying = bytes(bomb)
    peak, error = peak_and_error(lambda: decompress(4, lying, "s.sst", "block 0", 1 << 20))
    assert error is not None
    assert peak <= PEAK_SLACK


def test_a_zstd_frame_without_content_size_is_capped() -> None:
    """A streamed frame (no content size in its header) decoding past the limit."""
    c = cramjam.zstd.Compressor()
    c.compress(bytes(32 << 20))
    frame = bytes(c.finish())
    peak, error = peak_and_error(lambda: decompress(4, frame, "s.sst", "block 0", 1 << 20))
    assert error is not None
    assert peak <= PEAK_SLACK


@pytest.mark.parametrize("codec", ["zstd", "zlib", "lz4", "snappy"])
def test_sound_blocks_round_trip(codec: str) -> None:
    """A block of the largest value the engine accepts still reads back."""
    batch = batch_from_lists([b"a", b"b"], [2, 1], [0, 0], [bytes(MAX_BLOCK_BYTES - 200), b"x"])
    data, _ = encode_sst(batch, SstOptions(compression=codec))
    got = SstReader.from_bytes(data, "s.sst").read_all()
    assert got.column("value").to_pylist()[1] == b"x"
    assert len(got.column("value")[0].as_py()) == MAX_BLOCK_BYTES - 200
