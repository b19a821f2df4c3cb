from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from unittest import mock

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slatedb_core.errors import InvalidArgument
from slatedb_core.lsm import iterators
from slatedb_core.lsm.entries import (
    ENTRY_SCHEMA,
    KIND_TOMBSTONE,
    KIND_VALUE,
    batch_from_lists,
    empty_batch,
    sort_dedup,
    sortable_keys,
)
from slatedb_core.lsm.iterators import iter_rows, merge_sorted, range_filter, search_sorted

Row = tuple[bytes, int, int, bytes | None]  # key, seq, kind, value


def rows_of(batches: Iterator[pa.RecordBatch] | list[pa.RecordBatch]) -> list[Row]:
    out: list[Row] = []
    for b in batches:
        assert b.schema.equals(ENTRY_SCHEMA)
        cols = [b.column(i).to_pylist() for i in range(4)]
        out.extend(zip(*cols, strict=True))
    return out


def batch_of(rows: Sequence[Row]) -> pa.RecordBatch:
    return batch_from_lists(
        [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows]
    )


def split(rows: Sequence[Row], cuts: list[int]) -> list[pa.RecordBatch]:
    """Batches cut at the given positions; repeated or out-of-range cuts make empty batches."""
    out = []
    pos = 0
    for c in [*sorted(cuts), len(rows)]:
        c = max(pos, min(c, len(rows)))
        out.append(batch_of(rows[pos:c]))
        pos = c
    return out


@contextmanager
def tiny_rounds() -> Iterator[None]:
    """Shrink the merge's buffering thresholds so small inputs exercise every path."""
    with (
        mock.patch.object(iterators, "_MIN_BUFFERED_ROWS", 3),
        mock.patch.object(iterators, "_MIN_PASSTHROUGH_ROWS", 2),
        mock.patch.object(iterators, "_SMALL_BATCH_ROWS", 2),
    ):
        yield


def model_merge(sources: list[dict[bytes, tuple[int, bytes | None]]], drop: bool) -> list[Row]:
    merged: dict[bytes, Row] = {}
    for rank, src in enumerate(sources):
        for k, (kind, v) in src.items():
            merged.setdefault(k, (k, rank, kind, v))
    return [merged[k] for k in sorted(merged) if not (drop and merged[k][2] == KIND_TOMBSTONE)]


def binary(alphabet: bytes, min_size: int, max_size: int) -> st.SearchStrategy[bytes]:
    """Keys from a tiny alphabet, so that sources share keys and prefixes often."""
    return st.lists(st.sampled_from(alphabet), min_size=min_size, max_size=max_size).map(bytes)


keys_st = st.one_of(
    binary(b"\x00\x01\xff", 2, 2),  # equal widths: the zero-copy NumPy path
    binary(b"\x00a", 0, 4),  # mixed widths: padding + length suffix
    binary(b"ab", 65, 67),  # too wide to pad: the Arrow fallback
)
entry_st = st.one_of(
    st.tuples(st.just(KIND_TOMBSTONE), st.none()),
    st.tuples(st.just(KIND_VALUE), st.binary(max_size=3)),
)
source_st = st.tuples(
    st.dictionaries(keys_st, entry_st, max_size=25), st.lists(st.integers(-1, 26), max_size=5)
)


@settings(max_examples=300, deadline=None)
@given(
    sources=st.lists(source_st, max_size=5),
    drop=st.booleans(),
    batch_size=st.integers(1, 12),
    tiny=st.booleans(),
)
def test_merge_equals_dict_model(
    sources: list[tuple[dict[bytes, tuple[int, bytes | None]], list[int]]],
    drop: bool,
    batch_size: int,
    tiny: bool,
) -> None:
    streams = []
    for rank, (d, cuts) in enumerate(sources):
        rows = [(k, rank, kind, v) for k, (kind, v) in sorted(d.items())]
        streams.append(split(rows, cuts))
    expected = model_merge([d for d, _ in sources], drop)
    if tiny:
        with tiny_rounds():
            out = list(merge_sorted(streams, drop_tombstones=drop, batch_size=batch_size))
    else:
        out = list(merge_sorted(streams, drop_tombstones=drop, batch_size=batch_size))
    assert rows_of(out) == expected
    assert all(0 < b.num_rows <= batch_size for b in out)


def test_merge_of_no_sources_or_only_empty_ones_is_empty() -> None:
    assert list(merge_sorted([])) == []
    assert list(merge_sorted([[], [empty_batch()], [empty_batch(), empty_batch()]])) == []


def test_single_source_passes_through_and_filters_tombstones() -> None:
    rows: list[Row] = [(b"a", 1, 0, b"1"), (b"b", 2, 1, None), (b"c", 3, 0, b"3")]
    src = [batch_of(rows)]
    assert rows_of(merge_sorted([src])) == [rows[0], rows[2]]
    assert rows_of(merge_sorted([src], drop_tombstones=False)) == rows
    assert [b.num_rows for b in merge_sorted([src])] == [2]


def test_identical_keys_everywhere_newest_source_wins() -> None:
    keys = [b"k%03d" % i for i in range(50)]
    srcs = [[batch_of([(k, 10 - r, 0, b"v%d" % r) for k in keys])] for r in range(4)]
    out = rows_of(merge_sorted(srcs))
    assert out == [(k, 10, 0, b"v0") for k in keys]


def test_tombstones_hide_older_values_and_disappear() -> None:
    newest = [batch_of([(b"a", 9, KIND_TOMBSTONE, None), (b"b", 9, KIND_TOMBSTONE, b"")])]
    older = [batch_of([(b"a", 1, 0, b"old"), (b"b", 1, 0, b"old"), (b"c", 1, 0, b"keep")])]
    assert rows_of(merge_sorted([newest, older])) == [(b"c", 1, 0, b"keep")]
    only_tombstones = rows_of(merge_sorted([newest, newest]))
    assert only_tombstones == []
    kept = rows_of(merge_sorted([newest, older], drop_tombstones=False))
    assert [(r[0], r[2]) for r in kept] == [(b"a", 1), (b"b", 1), (b"c", 0)]


def test_disjoint_sources_are_emitted_without_copying() -> None:
    a = batch_of([(b"a%05d" % i, 1, 0, b"x") for i in range(3000)])
    b = batch_of([(b"b%05d" % i, 1, 0, b"y") for i in range(3000)])
    out = list(merge_sorted([[b], [a]], batch_size=3000))
    assert rows_of(out) == rows_of([a, b])
    assert out[0].column(3).buffers()[2].address == a.column(3).buffers()[2].address


def test_merge_output_is_rechunked_to_batch_size() -> None:
    srcs = [[batch_of([(b"%05d" % i, r, 0, b"v") for i in range(r, 5000, 3)])] for r in range(3)]
    out = list(merge_sorted(srcs, batch_size=1000))
    # "about batch_size": 500 to 1000 rows each (the last may hold fewer), cut without copies
    assert sum(b.num_rows for b in out) == 5000
    assert all(500 <= b.num_rows <= 1000 for b in out[:-1]) and 0 < out[-1].num_rows <= 1000
    with pytest.raises(InvalidArgument):
        merge_sorted(srcs, batch_size=0)


def test_merge_reads_sources_lazily() -> None:
    pulled = []

    def source(rank: int) -> Iterator[pa.RecordBatch]:
        for i in range(300):
            pulled.append((rank, i))
            yield batch_of([(b"%05d" % (100 * i + j), rank, 0, b"v") for j in range(rank, 100, 2)])

    it = merge_sorted([source(0), source(1)], batch_size=10)
    next(it)
    assert len(pulled) < 400  # a bounded look-ahead (~8k rows per source), not all 600 batches


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(keys_st, unique=True, max_size=40), needle=keys_st)
def test_search_sorted_matches_bisect(keys: list[bytes], needle: bytes) -> None:
    keys.sort()
    arr = pa.array(keys, pa.binary())
    assert search_sorted(arr, needle, "left") == bisect.bisect_left(keys, needle)
    assert search_sorted(arr, needle, "right") == bisect.bisect_right(keys, needle)
    if len(keys) > 2:  # a sliced array has a non-zero offset into its buffers
        assert search_sorted(arr.slice(1), needle, "left") == bisect.bisect_left(keys[1:], needle)
    large = pa.array(keys, pa.large_binary())
    assert search_sorted(large, needle, "right") == bisect.bisect_right(keys, needle)


def test_search_sorted_rejects_bad_side() -> None:
    with pytest.raises(InvalidArgument):
        search_sorted(pa.array([b"a"], pa.binary()), b"a", "middle")  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(keys_st, max_size=40))
def test_sortable_keys_preserve_byte_order(keys: list[bytes]) -> None:
    half = len(keys) // 2
    chunks = [pa.array(keys[:half], pa.binary()), pa.array(keys[half:], pa.binary())]
    skeys = sortable_keys(chunks)
    if not keys:
        assert skeys is None
        return
    if skeys is None:
        assert max(map(len, keys)) > 64
        return
    order = sorted(range(len(keys)), key=lambda i: (skeys[i], i))
    assert [keys[i] for i in order] == sorted(keys)


def test_range_filter_slices_and_stops_at_end() -> None:
    rows = [(b"%02d" % i, 1, 0, b"v") for i in range(20)]
    pulled = []

    def source() -> Iterator[pa.RecordBatch]:
        for b in split(rows, [5, 10, 10, 15]):
            pulled.append(b.num_rows)
            yield b

    got = rows_of(range_filter(source(), b"07", b"12"))
    assert [r[0] for r in got] == [b"07", b"08", b"09", b"10", b"11"]
    assert len(pulled) == 4  # the batch holding "15".."19" is never read
    assert rows_of(range_filter(split(rows, [7]), None, None)) == rows
    assert rows_of(range_filter(split(rows, [7]), b"19x", None)) == []
    assert rows_of(range_filter(split(rows, [7]), None, b"00")) == []
    assert [r[0] for r in rows_of(range_filter(split(rows, []), b"18", None))] == [b"18", b"19"]


def test_iter_rows_yields_live_pairs() -> None:
    rows: list[Row] = [
        (b"a", 1, 0, b"1"),
        (b"b", 1, 1, None),
        (b"c", 1, 0, None),
        (b"d", 1, 0, b""),
    ]
    assert list(iter_rows([batch_of(rows), empty_batch()])) == [
        (b"a", b"1"),
        (b"c", b""),
        (b"d", b""),
    ]


def test_sort_dedup_keeps_highest_seq() -> None:
    batch = batch_of(
        [
            (b"b", 5, 0, b"b5"),
            (b"a", 7, 1, None),
            (b"b", 9, 0, b"b9"),
            (b"a", 3, 0, b"a3"),
            (b"b", 1, 0, b"b1"),
        ]
    )
    assert rows_of([sort_dedup(batch)]) == [(b"a", 7, 1, None), (b"b", 9, 0, b"b9")]
    table = pa.Table.from_batches([batch.slice(0, 2), batch.slice(2)])
    assert rows_of([sort_dedup(table)]) == rows_of([sort_dedup(batch)])
    assert sort_dedup(empty_batch()).num_rows == 0


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(keys_st, entry_st), max_size=40), data=st.data())
def test_sort_dedup_equals_model(
    rows: list[tuple[bytes, tuple[int, bytes | None]]], data: st.DataObject
) -> None:
    seqs = data.draw(st.permutations(range(len(rows))))
    entries = [(k, s, kind, v) for (k, (kind, v)), s in zip(rows, seqs, strict=True)]
    best: dict[bytes, Row] = {}
    for e in entries:
        if e[0] not in best or best[e[0]][1] < e[1]:
            best[e[0]] = e
    assert rows_of([sort_dedup(batch_of(entries))]) == [best[k] for k in sorted(best)]


def test_sort_dedup_returns_sorted_input_unchanged() -> None:
    batch = batch_of([(b"a", 1, 0, b"1"), (b"b", 2, 0, b"2")])
    assert sort_dedup(batch) is batch


def test_sort_dedup_conforms_foreign_arrow_data() -> None:
    foreign = pa.table(
        {
            "value": pa.array([b"x", b"y"], pa.large_binary()),
            "key": pa.array([b"b", b"a"], pa.large_binary()),
            "seq": pa.array([1, 2], pa.int64()),
            "kind": pa.array([0, 0], pa.int8()),
        }
    )
    assert rows_of([sort_dedup(foreign)]) == [(b"a", 2, 0, b"y"), (b"b", 1, 0, b"x")]
    with pytest.raises(InvalidArgument):
        sort_dedup(pa.table({"key": [b"a"]}))
    with pytest.raises(InvalidArgument):
        sort_dedup(foreign.set_column(2, "seq", pa.array([-1, 2], pa.int64())))


def test_newest_versions_keeps_the_first_row_of_each_key_across_batches() -> None:
    from slatedb_core.lsm.iterators import newest_versions

    def batch(rows: list[tuple[bytes, int]]) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays(
            [
                pa.array([k for k, _ in rows], pa.binary()),
                pa.array([s for _, s in rows], pa.uint64()),
                pa.array([0] * len(rows), pa.uint8()),
                pa.array([b"v%d" % s for _, s in rows]),
            ],
            schema=ENTRY_SCHEMA,
        )

    # SlateDB's order: key ascending, seq descending; "b" straddles the two batches
    out = list(
        newest_versions(
            [
                batch([(b"a", 9), (b"a", 3), (b"b", 8)]),
                batch([(b"b", 2), (b"b", 1), (b"c", 7)]),
                batch([]),
            ]
        )
    )
    got = [
        (k, s)
        for b in out
        for k, s in zip(b.column(0).to_pylist(), b.column(1).to_pylist(), strict=True)
    ]
    assert got == [(b"a", 9), (b"b", 8), (b"c", 7)]
    unique = batch([(b"a", 1), (b"b", 1)])
    assert next(iter(newest_versions([unique]))) is unique  # nothing to drop: passed through
