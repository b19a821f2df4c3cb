"""The SST index and stats writers lay out bytes exactly as the ``flatbuffers`` package's
Builder does (the layout SlateDB 0.17 writes; the oracle tests check whole SSTs against the
wheel). The reference here builds the same tables with that Builder."""

from __future__ import annotations

import flatbuffers  # type: ignore[import-untyped, unused-ignore]
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from slatedb_core.sst.index import decode_index, encode_index, encode_stats


def _builder_index(offsets: list[int], first_keys: list[bytes]) -> bytes:
    b = flatbuffers.Builder(0)
    metas = []
    for off, key in zip(offsets, first_keys, strict=True):
        vec = b.CreateByteVector(key)
        b.StartObject(2)
        b.PrependUint64Slot(0, off, 0)
        b.PrependUOffsetTRelativeSlot(1, vec, 0)
        metas.append(b.EndObject())
    b.StartVector(4, len(metas), 4)
    for m in reversed(metas):
        b.PrependUOffsetTRelative(m)
    vec = b.EndVector()
    b.StartObject(1)
    b.PrependUOffsetTRelativeSlot(0, vec, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


def _builder_stats(puts: list[int], dels: list[int], merges: list[int], rk: int, rv: int) -> bytes:
    b = flatbuffers.Builder(0)
    tables = []
    for p, d, m in zip(puts, dels, merges, strict=True):
        b.StartObject(3)
        b.PrependUint16Slot(2, m, 0)
        b.PrependUint16Slot(1, d, 0)
        b.PrependUint16Slot(0, p, 0)
        tables.append(b.EndObject())
    vec = None
    if tables:
        b.StartVector(4, len(tables), 4)
        for t in reversed(tables):
            b.PrependUOffsetTRelative(t)
        vec = b.EndVector()
    b.StartObject(6)
    b.PrependUint64Slot(4, rv, 0)
    b.PrependUint64Slot(3, rk, 0)
    b.PrependUint64Slot(2, sum(merges), 0)
    b.PrependUint64Slot(1, sum(dels), 0)
    b.PrependUint64Slot(0, sum(puts), 0)
    if vec is not None:
        b.PrependUOffsetTRelativeSlot(5, vec, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 1 << 40), st.binary(max_size=20)), max_size=40))
def test_index_bytes_are_the_flatbuffers_builders(blocks: list[tuple[int, bytes]]) -> None:
    offsets = [0, *sorted({o for o, _ in blocks})]
    keys = [b"", *[k for _, k in blocks][: len(offsets) - 1]]
    keys += [b"k"] * (len(offsets) - len(keys))
    ours = encode_index(offsets, keys)
    assert ours == _builder_index(offsets, keys)
    assert decode_index("t", ours) == (offsets, keys)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(*[st.sampled_from([0, 1, 7, 300, 65535])] * 3), max_size=30),
    st.integers(0, 1 << 40),
    st.integers(0, 1 << 40),
)
def test_stats_bytes_are_the_flatbuffers_builders(
    blocks: list[tuple[int, int, int]], rk: int, rv: int
) -> None:
    puts, dels, merges = ([b[i] for b in blocks] for i in range(3))
    ours = encode_stats(
        np.asarray(puts, np.int64), np.asarray(dels, np.int64), np.asarray(merges, np.int64), rk, rv
    )
    assert ours == _builder_stats(puts, dels, merges, rk, rv)
