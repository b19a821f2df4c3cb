"""The merge's regrouping of its output (``_rechunk``): the rows in order, every batch but the
last of ``batch_size // 2`` to ``batch_size`` rows, and a large input batch cut into zero-copy
slices rather than sliced at ``batch_size`` with its remainder copied into the next batch."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from slatedb_core.lsm.iterators import _rechunk


def _batch(start: int, n: int) -> pa.RecordBatch:
    return pa.record_batch([pa.array(range(start, start + n), pa.int64())], ["x"])


@settings(max_examples=300, deadline=None)
@given(sizes=st.lists(st.integers(0, 300), max_size=25), size=st.integers(1, 120))
def test_rechunk_keeps_the_rows_and_sizes_batches_between_half_and_whole(
    sizes: list[int], size: int
) -> None:
    batches, at = [], 0
    for n in sizes:
        batches.append(_batch(at, n))
        at += n
    out = list(_rechunk(batches, size))
    assert [x for b in out for x in b.column(0).to_pylist()] == list(range(at))
    assert all(0 < b.num_rows <= size for b in out)
    assert all(b.num_rows >= max(1, size // 2) for b in out[:-1])


def test_a_large_batch_is_cut_into_equal_slices_of_its_own_buffers() -> None:
    big = _batch(0, 250)
    out = list(_rechunk([big], 100))
    assert [b.num_rows for b in out] == [83, 83, 84]
    data = big.column(0).buffers()[1].address
    assert all(b.column(0).buffers()[1].address == data for b in out)
