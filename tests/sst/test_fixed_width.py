"""The fixed-width SST encoder (SlateDB's row codec v2, every key stored whole): the same rows as
the general encoder, decoded by the same reader; corruption is detected."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slatedb_core.errors import CorruptionError, InvalidArgument
from slatedb_core.sst.builder import SstOptions, encode_sst_into
from slatedb_core.sst.cache import BlockCache
from slatedb_core.sst.fixed_width import block_entries, encode_fixed_sst_into
from slatedb_core.sst.format import ENTRY_SCHEMA
from slatedb_core.sst.reader import SstReader
from slatedb_core.sst.scratch import Scratch
from slatedb_core.store.checksum import crc32


def _fixed(data: bytes, n: int, width: int) -> pa.Array:
    offsets = pa.py_buffer((np.arange(n + 1, dtype=np.int32) * width).tobytes())
    return pa.Array.from_buffers(pa.binary(), n, [None, offsets, pa.py_buffer(data)])


def _case(
    n: int, key_width: int, value_width: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted unique keys, unsorted values, and the permutation matching them up."""
    rng = np.random.default_rng(seed)
    keys = np.unique(rng.integers(0, 256, (n * 2, key_width), dtype=np.uint8), axis=0)
    keys = keys[np.sort(rng.choice(len(keys), size=min(n, len(keys)), replace=False))]
    n = len(keys)
    values = rng.integers(0, 256, n * value_width, dtype=np.uint8)
    return keys.reshape(-1), values, rng.permutation(n).astype(np.int64)


def _general(
    keys: np.ndarray,
    kw: int,
    values: np.ndarray,
    vw: int,
    rows: np.ndarray,
    seq: int,
    options: SstOptions,
) -> tuple[bytes, object]:
    n = len(rows)
    sorted_values = values.reshape(-1, vw)[rows].reshape(-1).tobytes()
    batch = pa.RecordBatch.from_arrays(
        [
            _fixed(keys.tobytes(), n, kw),
            pa.array(np.full(n, seq, np.uint64)),
            pa.array(np.zeros(n, np.uint8)),
            _fixed(sorted_values, n, vw),
        ],
        schema=ENTRY_SCHEMA,
    )
    data, info = encode_sst_into(batch, Scratch(), options)
    return bytes(data), info


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 700),
    key_width=st.integers(1, 24),
    value_width=st.integers(1, 200),
    block_size=st.sampled_from([1, 8, 40, 100, 512, 4096, 65536]),
    bloom_bits=st.sampled_from([0, 10]),
    seq=st.integers(0, (1 << 64) - 1),
    seed=st.integers(0, 2**32 - 1),
)
def test_same_entries_as_the_general_encoder(
    n: int,
    key_width: int,
    value_width: int,
    block_size: int,
    bloom_bits: int,
    seq: int,
    seed: int,
) -> None:
    keys, values, rows = _case(n, key_width, value_width, seed)
    options = SstOptions(block_size=block_size, bloom_bits_per_key=bloom_bits)
    want, want_info = _general(keys, key_width, values, value_width, rows, seq, options)
    got, info = encode_fixed_sst_into(
        keys, key_width, values, value_width, rows, seq, Scratch(), options
    )
    got = bytes(got)
    reader = SstReader.from_bytes(got, "fixed")
    assert reader.read_all().equals(SstReader.from_bytes(want, "general").read_all())
    n = len(rows)
    assert len(got) == info.size_bytes
    assert (info.first_key, info.last_key, info.entry_count) == (
        want_info.first_key,
        want_info.last_key,
        want_info.entry_count,
    )
    assert reader.info == info
    for i in (0, n // 2, n - 1):  # point lookups through the bloom filter and the index
        key = keys[i * key_width : (i + 1) * key_width].tobytes()
        value = values.reshape(-1, value_width)[rows[i]].tobytes()
        assert reader.get(key) == (seq, 0, value)


def test_reads_back_and_reuses_the_scratch_buffer() -> None:
    keys, values, rows = _case(5000, 16, 100, 7)
    scratch = Scratch()
    for seq in (3, 4):  # the second call writes over the first's buffer
        data, info = encode_fixed_sst_into(
            keys, 16, values, 100, rows, seq, scratch, SstOptions(block_size=4096)
        )
        table = SstReader.from_bytes(bytes(data), "t").read_all()
        assert table.column("key").to_pylist() == [bytes(k) for k in keys.reshape(-1, 16)]
        assert table.column("value").to_pylist() == [
            bytes(v) for v in values.reshape(-1, 100)[rows]
        ]
        assert set(table.column("seq").to_pylist()) == {seq}
        assert info.entry_count == 5000 and info.size_bytes == len(data)
    # 128-byte rows (3 varint bytes, key, value, seq, flags) and 2 restarts + count in 4096
    assert block_entries(16, 100, 4096) == 31


def test_a_damaged_block_is_a_corruption_error() -> None:
    keys, values, rows = _case(300, 8, 20, 3)
    data, _ = encode_fixed_sst_into(
        keys, 8, values, 20, rows, 9, Scratch(), SstOptions(block_size=1024)
    )
    good = bytes(data)
    flipped = bytearray(good)
    flipped[100] ^= 1  # a key byte of block 0
    with pytest.raises(CorruptionError, match="checksum"):
        SstReader.from_bytes(bytes(flipped), "t").read_all()
    # a row header that lies about the key's length, checksummed again: caught by the walk
    lying = bytearray(good)
    lying[1] = 9
    size = SstReader.from_bytes(good, "t").block_offsets[1]
    lying[size - 4 : size] = crc32(bytes(lying[: size - 4])).to_bytes(4, "big")
    with pytest.raises(CorruptionError, match="block 0"):
        SstReader.from_bytes(bytes(lying), "t").read_all()


def test_refuses_what_it_cannot_encode() -> None:
    keys, values, rows = _case(10, 4, 4, 1)
    with pytest.raises(InvalidArgument):
        encode_fixed_sst_into(keys, 4, values, 4, rows, 0, Scratch(), SstOptions(compression="lz4"))
    with pytest.raises(InvalidArgument):
        encode_fixed_sst_into(keys, 4, values, 4, rows[:0], 0, Scratch())


def test_a_cached_block_counts_its_columns() -> None:
    """The block cache's budget sees every column a reader builds for a block."""
    keys, values, rows = _case(2000, 16, 100, 5)
    data, _ = encode_fixed_sst_into(
        keys, 16, values, 100, rows, 1, Scratch(), SstOptions(block_size=4096)
    )
    cache = BlockCache(1 << 30)
    reader = SstReader.from_bytes(bytes(data), "f", cache=cache)
    assert reader.get(keys[:16].tobytes()) == (1, 0, values.reshape(-1, 100)[rows[0]].tobytes())
    per_row = 16 + 100 + 8 + 1 + 4 + 4  # keys, values, seq, kind and two offsets
    assert len(cache) == 1 and cache.size_bytes > block_entries(16, 100, 4096) * per_row
