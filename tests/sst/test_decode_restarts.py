"""The restart offsets of many blocks decoded at once (``decode_blocks``, gathered for all the
blocks of a GET since session 53: a scan of SlateDB's 4 KiB blocks decodes ~2,000 a GET): rows
as block by block, and a block whose restart array is damaged (under a CRC recomputed, so only
the decoder can see it) is a CorruptionError naming that block, wherever it lies in the group."""

from __future__ import annotations

import itertools
import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slatedb_core.errors import CorruptionError
from slatedb_core.sst import SstOptions, SstReader, encode_sst
from slatedb_core.sst.decode import decode_blocks
from slatedb_core.sst.format import CRC_LEN
from tests.sst import batch_of

ENTRIES = [(b"key-%05d" % i, 1000 - i, 0, b"v" * (i % 7)) for i in range(400)]


def blocks_of(interval: int) -> tuple[bytes, list[tuple[int, int]]]:
    """The stored bytes of an SST's data blocks (uncompressed) and each block's span without
    its CRC."""
    data, _ = encode_sst(batch_of(ENTRIES), SstOptions(block_size=256, restart_interval=interval))
    offs = SstReader.from_bytes(data, "t").block_offsets
    return data[: offs[-1]], [(a, b - CRC_LEN) for a, b in itertools.pairwise(offs)]


@pytest.mark.parametrize("interval", [1, 16])
def test_many_blocks_decode_as_each_block_alone(interval: int) -> None:
    raw, spans = blocks_of(interval)
    assert len(spans) > 10
    whole = decode_blocks("t", pa.py_buffer(raw), spans, 0, 0)
    keys: list[bytes] = []
    for a, b in spans:
        keys += decode_blocks("t", pa.py_buffer(raw), [(a, b)], 0, 0).keys.to_pylist()
    assert whole.keys.to_pylist() == keys == [e[0] for e in ENTRIES]
    assert whole.counts == [
        len(decode_blocks("t", pa.py_buffer(raw), [s], 0, 0).keys) for s in spans
    ]


@settings(max_examples=60, deadline=None)
@given(
    block=st.integers(0, 1000),
    damage=st.sampled_from(["first not 0", "not rising", "past the rows", "equal"]),
    interval=st.sampled_from([1, 16]),
)
def test_a_damaged_restart_array_names_its_block(block: int, damage: str, interval: int) -> None:
    raw, spans = blocks_of(interval)
    j = block % len(spans)
    a, b = spans[j]
    (r,) = struct.unpack_from(">H", raw, b - 2)
    if r < 2 and damage in ("not rising", "equal"):
        damage = "past the rows"
    at = b - 2 - 2 * r  # the restart array: r big-endian u16s
    rows = at - a
    offsets = list(struct.unpack_from(f">{r}H", raw, at))
    if damage == "first not 0":
        offsets[0] = 1
    elif damage == "not rising":
        offsets[1], offsets[-1] = offsets[-1], offsets[1]
        if r == 2:
            offsets[1] = 0
    elif damage == "equal":
        offsets[-1] = offsets[-2]
    else:
        offsets[-1] = rows
    damaged = bytearray(raw)
    struct.pack_into(f">{r}H", damaged, at, *offsets)
    with pytest.raises(CorruptionError, match=f"block {7 + j} has bad restart offsets"):
        decode_blocks("t", pa.py_buffer(bytes(damaged)), spans, 7, 0)
