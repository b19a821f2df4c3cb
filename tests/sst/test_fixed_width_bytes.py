"""The fixed-width bulk encoder and the general encoder write the same bytes for the same rows
at our default restart interval (1: every key whole, a restart offset per row), so an SST staged
by a Spark ingest is laid out like one our writer flushes; at any other interval the fixed-width
encoder still stores every key whole (``shared`` 0) and the rows decode the same."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from slatedb_core.sst.builder import SstOptions, encode_sst_into
from slatedb_core.sst.fixed_width import block_entries, encode_fixed_sst_into
from slatedb_core.sst.format import ENTRY_SCHEMA
from slatedb_core.sst.reader import SstReader
from slatedb_core.sst.scratch import Scratch


def _binary(data: bytes, n: int, width: int) -> pa.Array:
    offsets = pa.py_buffer((np.arange(n + 1, dtype=np.int32) * width).tobytes())
    return pa.Array.from_buffers(pa.binary(), n, [None, offsets, pa.py_buffer(data)])


def _both(
    n: int, kw: int, vw: int, seq: int, seed: int, options: SstOptions
) -> tuple[bytes, bytes]:
    rng = np.random.default_rng(seed)
    keys = np.unique(rng.integers(0, 256, (2 * n, kw), dtype=np.uint8), axis=0)[:n]
    n = len(keys)
    values = rng.integers(0, 256, n * vw, dtype=np.uint8)
    rows = rng.permutation(n).astype(np.int64)
    fixed, _ = encode_fixed_sst_into(
        keys.reshape(-1), kw, values, vw, rows, seq, Scratch(), options
    )
    batch = pa.RecordBatch.from_arrays(
        [
            _binary(keys.tobytes(), n, kw),
            pa.array(np.full(n, seq, np.uint64)),
            pa.array(np.zeros(n, np.uint8)),
            _binary(values.reshape(-1, vw)[rows].tobytes(), n, vw),
        ],
        schema=ENTRY_SCHEMA,
    )
    general, _ = encode_sst_into(batch, Scratch(), options)
    return bytes(fixed), bytes(general)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 600),
    kw=st.integers(1, 24),
    vw=st.integers(1, 300),
    block_size=st.sampled_from([1, 40, 512, 4096, 65536]),
    seq=st.integers(0, (1 << 64) - 1),
    seed=st.integers(0, 2**32 - 1),
)
def test_same_bytes_as_the_general_encoder_at_interval_1(
    n: int, kw: int, vw: int, block_size: int, seq: int, seed: int
) -> None:
    fixed, general = _both(n, kw, vw, seq, seed, SstOptions(block_size=block_size))
    assert fixed == general


def test_other_intervals_decode_to_the_same_rows() -> None:
    for interval in (2, 16):
        options = SstOptions(block_size=65536, restart_interval=interval)
        fixed, general = _both(3000, 16, 100, 7, 1, options)
        a = SstReader.from_bytes(fixed, "fixed")
        assert a.read_all().equals(SstReader.from_bytes(general, "general").read_all())
        # fewer restart offsets, so more rows fit a block than at interval 1
        per_block = block_entries(16, 100, 65536, interval)
        assert per_block > block_entries(16, 100, 65536) == 504
        assert len(a.block_offsets) - 1 == -(-3000 // per_block)  # starts plus the end
