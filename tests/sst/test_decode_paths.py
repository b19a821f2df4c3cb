"""The decoder's fast path (every restart interval one row with one-byte header varints, our
restart interval 1) against its general walk: the same rows, timestamps and expiry, and the
same refusals of damaged blocks."""

from __future__ import annotations

import itertools
import struct
import zlib

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slatedb_core.errors import CorruptionError
from slatedb_core.sst import ENTRY_SCHEMA, SstOptions, SstReader, encode_sst
from slatedb_core.sst import decode as dec_mod
from slatedb_core.sst.decode import Decoded, decode_blocks


@st.composite
def rows(draw: st.DrawFn) -> pa.RecordBatch:
    keys = sorted(draw(st.sets(st.binary(min_size=1, max_size=150), min_size=1, max_size=40)))
    n = len(keys)
    kinds = [draw(st.sampled_from([0, 0, 0, 1, 2])) for _ in keys]
    values = [
        b"" if k == 1 else bytes([i % 256]) * draw(st.sampled_from([0, 5, 12, 13, 200]))
        for i, k in enumerate(kinds)
    ]
    expire = [draw(st.none() | st.integers(0, 2000)) for _ in keys]
    create = [draw(st.none() | st.integers(-5, 2000)) for _ in keys]
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(range(n, 0, -1), pa.uint64()),
            pa.array(kinds, pa.uint8()),
            pa.array(values, pa.binary()),
            pa.array(expire, pa.int64()),
            pa.array(create, pa.int64()),
        ],
        schema=ENTRY_SCHEMA.append(pa.field("expire_ts", pa.int64())).append(
            pa.field("create_ts", pa.int64())
        ),
    )


def _spans(data: bytes) -> tuple[pa.Buffer, list[tuple[int, int]]]:
    reader = SstReader.from_bytes(data, "t")
    offs = reader.block_offsets
    return pa.py_buffer(data), [(a, b - 4) for a, b in itertools.pairwise(offs)]


def _same(a: Decoded, b: Decoded) -> None:
    assert a.keys.equals(b.keys) and a.values.equals(b.values)
    assert np.array_equal(a.seqs, b.seqs) and np.array_equal(a.kinds, b.kinds)
    assert np.array_equal(a.expire, b.expire) and np.array_equal(a.create, b.create)
    assert a.counts == b.counts and a.has_expire == b.has_expire


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=rows(), block_size=st.sampled_from([1, 100, 4096]), now=st.integers(0, 2000))
def test_fast_path_decodes_what_the_general_walk_decodes(
    batch: pa.RecordBatch, block_size: int, now: int
) -> None:
    data, _ = encode_sst(batch, SstOptions(block_size=block_size, restart_interval=1))
    raw, spans = _spans(data)
    fast = [decode_blocks("t", raw, [s], i, now) for i, s in enumerate(spans)]
    group = decode_blocks("t", raw, spans, 0, now)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(dec_mod, "_one_row_each", lambda *_: None)
        general = [decode_blocks("t", raw, [s], i, now) for i, s in enumerate(spans)]
        general_group = decode_blocks("t", raw, spans, 0, now)
    for f, g in zip(fast, general, strict=True):
        _same(f, g)
    _same(group, general_group)


def _reseal(data: bytearray, start: int, end: int) -> None:
    data[end - 4 : end] = struct.pack(">I", zlib.crc32(bytes(data[start : end - 4])))


@pytest.mark.parametrize("path", ["fast", "general"])
def test_damaged_rows_under_a_valid_checksum_are_corruption_on_both_paths(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if path == "general":
        monkeypatch.setattr(dec_mod, "_one_row_each", lambda *_: None)
    entries = [(b"key%03d" % i, 100 - i, 0, b"v" * 20) for i in range(60)]
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([e[0] for e in entries]),
            pa.array([e[1] for e in entries], pa.uint64()),
            pa.array([e[2] for e in entries], pa.uint8()),
            pa.array([e[3] for e in entries]),
        ],
        schema=ENTRY_SCHEMA,
    )
    data, _ = encode_sst(batch, SstOptions(block_size=256))
    good = SstReader.from_bytes(data, "t")
    start, end = good.block_offsets[1], good.block_offsets[2]
    first = list(good.scan())[1].column(0)[0].as_py()
    row = 3 + 6 + 20  # header, key, value: then seq (8) and flags
    edits = {
        "second row shares a prefix (a restart row)": (row + 9, b"\x02"),
        "value length runs into the next row": (2, b"\x16"),
        "value length short of the seq": (2, b"\x12"),
        "unknown flags": (3 + 6 + 20 + 8, b"\x40"),
        "expire flag without its timestamp": (3 + 6 + 20 + 8, b"\x02"),
        "key length zero": (1, b"\x00"),
        "a two-byte varint running into the key": (1, b"\x86"),
    }
    for what, (at, patch) in edits.items():
        bad = bytearray(data)
        bad[start + at : start + at + len(patch)] = patch
        _reseal(bad, start, end)
        reader = SstReader.from_bytes(bytes(bad), "t")
        with pytest.raises(CorruptionError, match="block 1"):
            reader.get(first)
        with pytest.raises(CorruptionError, match="block 1"):
            list(reader.scan())
        assert what
