"""Building a bloom filter without temporaries the size of its keys (issue 42, goal 3): the hashes
are probed a chunk at a time, and a streamed SST's per-batch hash arrays are taken as they are
(never joined); the filter's bytes are the ones the one-shot build (SlateDB 0.17's, checked by
tests/sst/test_slatedb_oracle.py) makes, and the build's peak memory is about the filter's own
bit array."""

from __future__ import annotations

import itertools
import struct
import tracemalloc

import numpy as np
import numpy.typing as npt
import pytest

from slatedb_core.sst.bloom import build_bloom, build_filter_block, num_probes


def one_shot(hashes: npt.NDArray[np.uint64], bits_per_key: int) -> bytes:
    """The filter as the module doc defines it, every hash probed at once (the previous build)."""
    n = len(hashes)
    nbytes = (((n * bits_per_key) & 0xFFFFFFFF) + 7) // 8
    k = num_probes(bits_per_key)
    if nbytes == 0:
        return struct.pack(">H", k)
    m = np.uint64(8 * nbytes)
    bits = np.zeros(int(m), dtype=np.bool_)
    h = (hashes & np.uint64(0xFFFFFFFF)) % m
    d = (hashes >> np.uint64(32)) % m
    for i in range(k):
        d = (d + np.uint64(i)) % m
        bits[h] = True
        h = (h + d) % m
    return struct.pack(">H", k) + np.packbits(bits, bitorder="little").tobytes()


def hashes_of(n: int, seed: int) -> npt.NDArray[np.uint64]:
    return np.random.default_rng(seed).integers(0, 1 << 64, n, dtype=np.uint64, endpoint=False)


@pytest.mark.parametrize("n", [0, 1, 7, 1000, 65_536, 200_003])
@pytest.mark.parametrize("bits", [1, 10, 20])
def test_chunked_and_split_builds_equal_the_one_shot_filter(n: int, bits: int) -> None:
    hashes = hashes_of(n, n + bits)
    want = one_shot(hashes, bits)
    assert build_bloom(hashes, bits) == want
    cuts = sorted({0, n, *np.random.default_rng(n).integers(0, n + 1, 5).tolist()})
    pieces = [hashes[a:b] for a, b in itertools.pairwise(cuts)]
    assert build_bloom(pieces, bits) == want
    assert build_filter_block(pieces, bits) == build_filter_block(hashes, bits)


def test_build_peaks_near_its_bit_array() -> None:
    n = 1_000_000
    hashes = hashes_of(n, 1)
    pieces = [hashes[a : a + 100_000].copy() for a in range(0, n, 100_000)]
    del hashes
    tracemalloc.start()
    try:
        build_filter_block(pieces, 10)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    bit_array = n * 10  # one byte per bit before packing
    # the bit array, its packed copy and the block (1.25 B/key each), chunk temporaries; the
    # one-shot build also held a joined copy of the hashes and four arrays of n probes (~3x)
    assert peak < bit_array * 1.5, peak
