"""SstStreamEncoder: a compacted SST built batch by batch must be byte for byte the SST
:func:`encode_sst` makes of all the rows at once (so a compaction that streams its output writes
the same objects as one that held them), while holding at most one block's rows unencoded."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slatedb_core.errors import InvalidArgument
from slatedb_core.lsm.entries import ENTRY_SCHEMA
from slatedb_core.sst import KIND_TOMBSTONE, KIND_VALUE, SstOptions, SstReader, encode_sst
from slatedb_core.sst.builder import SstStreamEncoder

Row = tuple[bytes, int, int, bytes]


def batch(rows: list[Row]) -> pa.RecordBatch:
    keys, seqs, kinds, values = zip(*rows, strict=True) if rows else ([], [], [], [])
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(seqs, pa.uint64()),
            pa.array(kinds, pa.uint8()),
            pa.array(values, pa.binary()),
        ],
        schema=ENTRY_SCHEMA,
    )


def random_rows(rng: np.random.Generator, n: int, fixed: bool) -> list[Row]:
    if fixed:
        keys = sorted({rng.bytes(16) for _ in range(n)})
        return [(k, int(rng.integers(1, 1 << 40)), KIND_VALUE, rng.bytes(100)) for k in keys]
    keys = sorted({rng.bytes(int(rng.integers(1, 24))) for _ in range(n)})
    out: list[Row] = []
    for k in keys:
        if rng.random() < 0.1:
            out.append((k, int(rng.integers(1, 1 << 40)), KIND_TOMBSTONE, b""))
        else:
            out.append(
                (k, int(rng.integers(1, 1 << 40)), KIND_VALUE, rng.bytes(int(rng.integers(0, 300))))
            )
    return out


def streamed(rows: list[Row], cuts: list[int], options: SstOptions) -> tuple[bytes, object]:
    enc = SstStreamEncoder(options)
    at = 0
    for c in [*sorted(cuts), len(rows)]:
        enc.add(batch(rows[at:c]))
        at = max(at, c)
    data, info = enc.finish()
    return bytes(data), info


OPTIONS = [
    SstOptions(),
    SstOptions(block_size=4096),
    SstOptions(block_size=512, restart_interval=16),
    SstOptions(block_size=1024, compression="zstd"),
    SstOptions(block_size=300, bloom_bits_per_key=0),
    SstOptions(block_size=4096, min_filter_keys=10_000),
]


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("fixed", [True, False])
def test_same_bytes_as_one_shot(options: SstOptions, fixed: bool) -> None:
    rng = np.random.default_rng(7)
    rows = random_rows(rng, 3000, fixed)
    want, want_info = encode_sst(batch(rows), options)
    for cuts in ([], [1], [1, 2, 3], [1500], list(range(0, 3000, 97)), [0, 2999]):
        got, info = streamed(rows, cuts, options)
        assert got == want
        assert info == want_info
    assert SstReader.from_bytes(got, "t").read_all().equals(pa.Table.from_batches([batch(rows)]))


@given(st.data())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_same_bytes_any_split(data: st.DataObject) -> None:
    n = data.draw(st.integers(0, 400))
    rng = np.random.default_rng(data.draw(st.integers(0, 1 << 30)))
    rows = random_rows(rng, n, data.draw(st.booleans()))
    cuts = data.draw(st.lists(st.integers(0, len(rows)), max_size=8))
    options = SstOptions(
        block_size=data.draw(st.sampled_from([64, 200, 1000, 4096])),
        restart_interval=data.draw(st.sampled_from([1, 3, 16])),
    )
    want, want_info = encode_sst(batch(rows), options)
    got, info = streamed(rows, cuts, options)
    assert got == want
    assert info == want_info


def test_holds_at_most_one_block_of_rows() -> None:
    """The rows kept unencoded between batches never exceed what one block holds."""
    rng = np.random.default_rng(3)
    rows = random_rows(rng, 20_000, True)
    options = SstOptions(block_size=4096)
    per_block = (4096 - 2) // (1 + 1 + 1 + 16 + 100 + 9 + 2)  # fixed-width rows, restart each
    enc = SstStreamEncoder(options)
    for at in range(0, len(rows), 1000):
        enc.add(batch(rows[at : at + 1000]))
        assert 1 <= enc.buffered_rows <= per_block
        assert enc.rows == at + 1000
        assert enc.encoded_bytes >= (at + 1000 - per_block) * 129
    data, info = enc.finish()
    assert enc.buffered_rows == 0
    assert info.entry_count == len(rows)
    assert bytes(data) == encode_sst(batch(rows), options)[0]


def test_refuses_keys_out_of_order_across_batches() -> None:
    enc = SstStreamEncoder(SstOptions(block_size=4096))
    enc.add(batch([(b"b", 1, KIND_VALUE, b"x"), (b"c", 1, KIND_VALUE, b"y")]))
    with pytest.raises(InvalidArgument):
        enc.add(batch([(b"a", 1, KIND_VALUE, b"z")]))


def test_empty() -> None:
    data, info = SstStreamEncoder().finish()
    want, want_info = encode_sst(batch([]))
    assert bytes(data) == want and info == want_info
