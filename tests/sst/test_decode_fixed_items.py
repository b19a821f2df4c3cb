"""``decode_fixed`` copying keys and values as fixed-size items (review 53 of 83a2e22).

The copy of each row's key and value changed from a byte-wise ``(rows, width)`` slice to one
``V{width}`` item per row, and a value width of 0 now skips the copy. These tests read SSTs as
a merge does (``scan(readahead=..., groups=True)``: several blocks per GET decoded at once,
groups of blocks of different row counts) with the fast path and with the general walk
(``decode_fixed`` patched out) and compare every column: keys of 1 to 300 bytes, values empty,
one byte, wider than a block, a short last block, a group that mixes a fixed-shape block with
a block of another shape (the fast path must refuse the whole group)."""

from __future__ import annotations

from unittest import mock

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slatedb_core.sst import ENTRY_SCHEMA, SstOptions, SstReader, encode_sst
from slatedb_core.sst.decode import Decoded
from slatedb_core.sst.decode_fixed import decode_fixed


def _batch(keys: list[bytes], values: list[bytes], kinds: list[int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(range(len(keys), 0, -1), pa.uint64()),
            pa.array(kinds, pa.uint8()),
            pa.array(values, pa.binary()),
        ],
        schema=ENTRY_SCHEMA,
    )


def _scan(data: bytes, readahead: int | None) -> pa.Table:
    reader = SstReader.from_bytes(data, "t")
    return pa.Table.from_batches(
        list(reader.scan(readahead=readahead, groups=True)), schema=ENTRY_SCHEMA
    )


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kw=st.sampled_from([1, 2, 15, 16, 17, 300]),
    vw=st.sampled_from([0, 1, 7, 8, 100, 5000]),
    n=st.integers(1, 700),
    block_size=st.sampled_from([1, 64, 1000, 4096]),
    readahead=st.sampled_from([None, 1, 3000, 1 << 20]),
    odd=st.sampled_from(["none", "none", "short value", "long key", "tombstone", "merge"]),
    at=st.integers(0, 10_000),
    seed=st.integers(0, 255),
)
def test_the_fast_path_reads_what_the_general_walk_reads(
    kw: int,
    vw: int,
    n: int,
    block_size: int,
    readahead: int | None,
    odd: str,
    at: int,
    seed: int,
) -> None:
    n = n if kw > 1 else min(n, 256)
    keys = [(i * 2654435761 + seed).to_bytes(8, "big")[-kw:].rjust(kw, b"\x00") for i in range(n)]
    keys = sorted(set(keys))
    n = len(keys)
    values = [bytes([(i + seed) % 251]) * vw for i in range(n)]
    kinds = [0] * n
    i = at % n
    if odd == "short value" and vw:
        values[i] = values[i][:-1]
    elif odd == "long key":
        keys[i] = keys[i] + b"\x00"  # still sorted: the next key is greater in an earlier byte
        if i + 1 < n and keys[i + 1] <= keys[i]:
            keys[i] = keys[i][:-1]
    elif odd == "tombstone":
        kinds[i], values[i] = 1, b""
    elif odd == "merge":
        kinds[i] = 2
    data = encode_sst(_batch(keys, values, kinds), SstOptions(block_size=block_size))[0]
    taken: list[Decoded | None] = []

    def spy(*args: object) -> Decoded | None:
        got = decode_fixed(*args)  # type: ignore[arg-type]
        taken.append(got)
        return got

    with mock.patch("slatedb_core.sst.block.decode_fixed", spy):
        fast = _scan(data, readahead)
    if odd == "none" or (odd == "short value" and not vw):
        assert any(d is not None for d in taken), "the fast path was not taken"
    with mock.patch("slatedb_core.sst.block.decode_fixed", lambda *_: None):
        slow = _scan(data, readahead)
    assert fast.equals(slow)
    assert fast.column(0).to_pylist() == keys
    assert fast.column(3).to_pylist() == values
