"""The decoder of blocks whose rows all have one shape (:mod:`slatedb_core.sst.decode_fixed`,
issue 42, goal 4) against the general walk (:func:`slatedb_core.sst.decode.decode_blocks`): on
every SST it accepts, the same rows field for field; on a damaged block it accepts nothing the
general walk refuses; and an SST read through it scans as the general walk does."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slatedb_core.errors import CorruptionError
from slatedb_core.sst import ENTRY_SCHEMA, SstOptions, SstReader, encode_sst
from slatedb_core.sst.builder import encode_sst_into
from slatedb_core.sst.decode import Decoded, decode_blocks
from slatedb_core.sst.decode_fixed import decode_fixed
from slatedb_core.sst.fixed_width import encode_fixed_sst_into
from slatedb_core.sst.scratch import Scratch

TS_SCHEMA = ENTRY_SCHEMA.append(pa.field("expire_ts", pa.int64())).append(
    pa.field("create_ts", pa.int64())
)


@st.composite
def fixed_rows(draw: st.DrawFn) -> tuple[pa.RecordBatch, bool]:
    """Sorted rows whose keys share one width and values another (``fixed``: nothing else), or,
    now and then, with a tombstone, TTL or a shorter value mixed in."""
    kw = draw(st.sampled_from([1, 3, 16, 127, 130]))
    vw = draw(st.sampled_from([0, 5, 100, 127, 200]))
    keys = sorted(
        draw(
            st.sets(
                st.binary(min_size=kw, max_size=kw), min_size=1, max_size=300 if kw > 1 else 200
            )
        )
    )
    n = len(keys)
    merges = draw(st.booleans())
    kinds = [2 if merges and draw(st.booleans()) else 0 for _ in keys]
    values = [bytes([i % 251]) * vw for i in range(n)]
    expire: list[int | None] = [None] * n
    fixed = True
    odd = draw(st.sampled_from(["none", "none", "tombstone", "ttl", "short value"]))
    if odd != "none":
        i = draw(st.integers(0, n - 1))
        fixed = False
        if odd == "tombstone":
            kinds[i], values[i] = 1, b""
            fixed = vw == 0 and not merges
        elif odd == "ttl":
            expire[i] = draw(st.integers(0, 2000))
        elif vw:
            values[i] = values[i][:-1]
        else:
            fixed = True
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(range(n, 0, -1), pa.uint64()),
            pa.array(kinds, pa.uint8()),
            pa.array(values, pa.binary()),
            pa.array(expire, pa.int64()),
            pa.array([None] * n, pa.int64()),
        ],
        schema=TS_SCHEMA,
    )
    return batch, fixed


def _spans(data: bytes) -> tuple[pa.Buffer, list[tuple[int, int]]]:
    reader = SstReader.from_bytes(data, "t")
    return pa.py_buffer(data), [(a, b - 4) for a, b in itertools.pairwise(reader.block_offsets)]


def _same(a: Decoded, b: Decoded) -> None:
    assert a.keys.equals(b.keys) and a.values.equals(b.values)
    assert np.array_equal(a.seqs, b.seqs) and np.array_equal(a.kinds, b.kinds)
    assert a.seqs.dtype == b.seqs.dtype and a.kinds.dtype == b.kinds.dtype
    assert np.array_equal(a.expire, b.expire) and np.array_equal(a.create, b.create)
    assert a.counts == b.counts and a.has_expire == b.has_expire


def _encode(batch: pa.RecordBatch, encoder: str, block_size: int, interval: int) -> bytes:
    opts = SstOptions(block_size=block_size, restart_interval=interval)
    if encoder == "general":
        return encode_sst(batch, opts)[0]
    scratch = Scratch()
    if encoder == "general_into":
        return bytes(encode_sst_into(batch, scratch, opts)[0])
    keys, values = batch.column(0), batch.column(3)
    kw, vw = len(keys[0].as_py()), len(values[0].as_py())
    kdata = np.frombuffer(keys.buffers()[2], np.uint8)[: kw * len(keys)]
    vbuf = values.buffers()[2]
    vdata = np.frombuffer(vbuf, np.uint8)[: vw * len(values)] if vbuf else np.zeros(0, np.uint8)
    rows = np.arange(len(keys), dtype=np.int64)
    return bytes(encode_fixed_sst_into(kdata, kw, vdata, vw, rows, 1, scratch, opts)[0])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=fixed_rows(),
    encoder=st.sampled_from(["general", "general_into", "fixed"]),
    block_size=st.sampled_from([1, 300, 4096, 65536]),
    interval=st.sampled_from([1, 1, 3, 16]),
    now=st.integers(0, 2000),
)
def test_decodes_what_the_general_walk_decodes(
    case: tuple[pa.RecordBatch, bool], encoder: str, block_size: int, interval: int, now: int
) -> None:
    batch, fixed = case
    if encoder == "fixed" and (not fixed or pc_any_merge(batch) or not batch.column(3)[0].as_py()):
        encoder = "general"  # the bulk encoder writes plain values of one width only
    data = _encode(batch, encoder, block_size, interval)
    raw, spans = _spans(data)
    for group in [spans, *([s] for s in spans), spans[1:3]]:
        if not group:
            continue
        got = decode_fixed(raw, group)
        first = spans.index(group[0])
        want = decode_blocks("t", raw, group, first, now)
        if got is not None:
            _same(got, want)
        elif fixed and (interval == 1 or encoder == "fixed"):
            # one shape, whole keys in every row: the fast path must take it
            raise AssertionError(f"refused a block of fixed rows ({encoder}, {interval})")


def pc_any_merge(batch: pa.RecordBatch) -> bool:
    return bool((batch.column(2).to_numpy(zero_copy_only=False) == 2).any())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), interval=st.sampled_from([1, 4]))
def test_a_damaged_block_is_refused_or_read_as_the_general_walk_reads_it(
    data: st.DataObject, interval: int
) -> None:
    n = 40
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([b"k%05d" % i for i in range(n)], pa.binary()),
            pa.array(range(n, 0, -1), pa.uint64()),
            pa.array([2 if i % 7 == 0 else 0 for i in range(n)], pa.uint8()),
            pa.array([b"v" * 10] * n, pa.binary()),
        ],
        schema=ENTRY_SCHEMA,
    )
    sst, _ = encode_sst(batch, SstOptions(block_size=200, restart_interval=interval))
    _, spans = _spans(sst)
    a, b = spans[1]
    bad = bytearray(sst)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(a, b - 1))
        bad[at] = data.draw(st.integers(0, 255))
    damaged = pa.py_buffer(bytes(bad))
    got = decode_fixed(damaged, spans[:3])
    try:
        want = decode_blocks("t", damaged, spans[:3], 0, 0)
    except CorruptionError:
        assert got is None  # nothing the general walk refuses
        return
    if got is not None:
        _same(got, want)


@pytest.mark.parametrize("encoder", ["general", "fixed"])
def test_an_sst_scans_and_gets_as_with_the_general_walk(
    encoder: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = 5000
    rng = np.random.default_rng(7)
    keys = sorted(set(rng.integers(0, 1 << 62, n).tolist()))
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([k.to_bytes(8, "big") for k in keys], pa.binary()),
            pa.array(range(len(keys), 0, -1), pa.uint64()),
            pa.array([0] * len(keys), pa.uint8()),
            pa.array([rng.bytes(100) for _ in keys], pa.binary()),
        ],
        schema=ENTRY_SCHEMA,
    )
    data = _encode(batch, encoder, 4096, 1)
    probe = [batch.column(0)[i].as_py() for i in range(0, len(keys), 97)] + [b"\x00" * 8]

    def read() -> tuple[list[pa.RecordBatch], list[tuple[int, int, bytes] | None]]:
        reader = SstReader.from_bytes(data, "t")
        return list(reader.scan()), [reader.get(k) for k in probe]

    fast_scan, fast_gets = read()
    assert decode_fixed(*_spans(data)) is not None
    monkeypatch.setattr("slatedb_core.sst.block.decode_fixed", lambda *_: None)
    slow_scan, slow_gets = read()
    assert pa.Table.from_batches(fast_scan).equals(pa.Table.from_batches(slow_scan))
    rows = pa.Table.from_batches(fast_scan)
    assert rows.select([0, 3]).equals(pa.Table.from_batches([batch]).select([0, 3]))
    assert fast_gets == slow_gets and fast_gets[-1] is None
