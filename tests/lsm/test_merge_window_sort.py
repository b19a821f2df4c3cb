"""The merge's round sort by an 8-byte window of its keys (issue 42, goal 4).

A merge round (:func:`slatedb_core.lsm.iterators.merge_sorted`) of overlapping L0 SSTs sorted
every row's whole key with a stable NumPy sort of fixed-width byte strings, then gathered every
column from the concatenated round. It now sorts 8 bytes of each key (those after the prefix the
whole round shares) as integers, checks the rows whose windows tie (equal keys, or keys that
differ only past the window: the sort by the whole key is taken for the round when such rows came
out of order), and gathers the sorted keys straight from the sorted byte strings. These tests
compare the merge with a model over random sources with the window narrowed to 1-2 bytes (so
windows tie often, with and without the fallback), with tombstones, many versions of a key over
many sources, operand chains folded by a merge operator, and keys of mixed width; rounds are
cut to a few rows (a round now ends at about 64k rows, where its random gather stays in the CPU's
caches)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slatedb_core.lsm import iterators
from slatedb_core.lsm.entries import (
    ENTRY_SCHEMA,
    KIND_MERGE,
    KIND_TOMBSTONE,
    KIND_VALUE,
    batch_from_lists,
)
from slatedb_core.lsm.iterators import merge_sorted, newest_versions
from slatedb_core.lsm.merge_operator import string_append

Row = tuple[bytes, int, int, bytes | None]  # key, seq, kind, value


@contextmanager
def small_rounds(window: int) -> Iterator[None]:
    """Tiny rounds (ended at about 5 rows) and a ``window``-byte sort window, so that small
    inputs tie often."""
    with (
        mock.patch.object(iterators, "_ROUND_ROWS", 5),
        mock.patch.object(iterators, "_MIN_BUFFERED_ROWS", 3),
        mock.patch.object(iterators, "_MIN_PASSTHROUGH_ROWS", 2),
        mock.patch.object(iterators, "_SMALL_BATCH_ROWS", 2),
        mock.patch.object(iterators, "_WINDOW_BYTES", window),
    ):
        yield


def batches(rows: list[Row], cuts: list[int]) -> list[pa.RecordBatch]:
    out, pos = [], 0
    for c in [*sorted(cuts), len(rows)]:
        c = max(pos, min(c, len(rows)))
        part = rows[pos:c]
        out.append(
            batch_from_lists(
                [r[0] for r in part],
                [r[1] for r in part],
                [r[2] for r in part],
                [r[3] for r in part],
            )
        )
        pos = c
    return out


def rows_of(out: list[pa.RecordBatch]) -> list[Row]:
    got: list[Row] = []
    for b in out:
        assert b.schema.equals(ENTRY_SCHEMA)
        got.extend(zip(*(b.column(i).to_pylist() for i in range(4)), strict=True))
    return got


def model(sources: list[dict[bytes, tuple[int, bytes | None]]], drop: bool) -> list[Row]:
    """Newest source wins per key; tombstones dropped when ``drop``."""
    merged: dict[bytes, Row] = {}
    for rank, src in enumerate(sources):
        for k, (kind, v) in src.items():
            merged.setdefault(k, (k, 100 - rank, kind, v))
    return [merged[k] for k in sorted(merged) if not (drop and merged[k][2] == KIND_TOMBSTONE)]


def keys(width_lo: int, width_hi: int) -> st.SearchStrategy[bytes]:
    # a tiny alphabet: keys share prefixes and windows, and differ past the window
    return st.lists(st.sampled_from(b"\x00\x01\xfe"), min_size=width_lo, max_size=width_hi).map(
        bytes
    )


key_st = st.one_of(keys(4, 4), keys(10, 10), keys(0, 6), keys(9, 12))
entry_st = st.one_of(
    st.tuples(st.just(KIND_TOMBSTONE), st.none()),
    st.tuples(st.just(KIND_TOMBSTONE), st.just(b"")),
    st.tuples(st.just(KIND_VALUE), st.binary(max_size=3)),
    st.tuples(st.just(KIND_VALUE), st.just(b"0123456789")),
)


@settings(max_examples=150, deadline=None)
@given(
    sources=st.lists(
        st.tuples(
            st.dictionaries(key_st, entry_st, max_size=30),
            st.lists(st.integers(-1, 31), max_size=4),
        ),
        max_size=7,
    ),
    drop=st.booleans(),
    window=st.sampled_from([1, 2, 8]),
    batch_size=st.integers(1, 40),
)
def test_merge_with_a_narrow_window_equals_the_model(
    sources: list[tuple[dict[bytes, tuple[int, bytes | None]], list[int]]],
    drop: bool,
    window: int,
    batch_size: int,
) -> None:
    streams = [
        batches([(k, 100 - rank, kind, v) for k, (kind, v) in sorted(d.items())], cuts)
        for rank, (d, cuts) in enumerate(sources)
    ]
    with small_rounds(window):
        out = list(merge_sorted(streams, drop_tombstones=drop, batch_size=batch_size))
    assert rows_of(out) == model([d for d, _ in sources], drop)


@settings(max_examples=100, deadline=None)
@given(
    versions=st.lists(
        st.lists(st.tuples(st.integers(0, 40), entry_st), max_size=40), min_size=1, max_size=12
    ),
    window=st.sampled_from([1, 8]),
)
def test_many_versions_of_few_keys_newest_wins(
    versions: list[list[tuple[int, tuple[int, bytes | None]]]], window: int
) -> None:
    """Up to 12 sources (as 16 L0 SSTs per shard) each holding some of the same 41 keys of 16
    bytes that differ only in their last byte: every window ties, the round is never out of
    order, and each key's newest source wins."""
    dicts = [{b"k" * 15 + bytes([i]): e for i, e in src} for src in versions]
    streams = [
        batches([(k, 100 - r, kind, v) for k, (kind, v) in sorted(d.items())], [])
        for r, d in enumerate(dicts)
    ]
    with small_rounds(window):
        assert rows_of(list(merge_sorted(streams))) == model(dicts, True)
        kept = list(merge_sorted(streams, drop_tombstones=False))
    assert rows_of(kept) == model(dicts, False)


def _chains(draw_rows: list[tuple[int, list[tuple[int, bytes | None]]]], rank: int) -> list[Row]:
    """One source's rows: per key, its versions newest first (seqs falling with the rank)."""
    out: list[Row] = []
    for key, vers in sorted(draw_rows):
        for j, (kind, v) in enumerate(vers):
            out.append((b"key-%010d" % key, 1000 - 10 * rank - j, kind, v))
    return out


op_entry = st.one_of(
    st.tuples(st.just(KIND_MERGE), st.binary(min_size=1, max_size=2)),
    st.tuples(st.just(KIND_VALUE), st.binary(max_size=2)),
    st.tuples(st.just(KIND_TOMBSTONE), st.none()),
)


@settings(max_examples=200, deadline=None)
@given(
    sources=st.lists(
        st.dictionaries(
            st.integers(0, 30), st.lists(op_entry, min_size=1, max_size=3), max_size=12
        ),
        max_size=5,
    ),
    window=st.sampled_from([1, 2, 8]),
)
def test_operand_chains_fold_as_the_model_folds(
    sources: list[dict[int, list[tuple[int, bytes | None]]]], window: int
) -> None:
    """Keys whose newest rows are merge operands fold over every source (SlateDB RFC 0006),
    the round sorted by the window like any other."""
    streams = [
        newest_versions(batches(_chains(list(d.items()), r), [3]), keep_operands=True)
        for r, d in enumerate(sources)
    ]
    expected: list[tuple[bytes, bytes]] = []
    for key in sorted({k for d in sources for k in d}):
        rows = [e for d in sources if key in d for e in _newest_chain(d[key])]
        value = _fold(rows)
        if value is not None:
            expected.append((b"key-%010d" % key, value))
    with small_rounds(window):
        got = [
            (k, v)
            for b in merge_sorted(streams, merge_operator=string_append)
            for k, v in zip(b.column(0).to_pylist(), b.column(3).to_pylist(), strict=True)
        ]
    assert got == expected


def _newest_chain(vers: list[tuple[int, bytes | None]]) -> list[tuple[int, bytes | None]]:
    """A source's versions of a key a read needs: the newest, and while operands, the next."""
    out = []
    for kind, v in vers:
        out.append((kind, v))
        if kind != KIND_MERGE:
            break
    return out


def _fold(rows: list[tuple[int, bytes | None]]) -> bytes | None:
    """string_append over newest-first rows: operands onto the first value (None: none)."""
    ops: list[bytes] = []
    base: bytes | None = None
    for kind, v in rows:
        if kind == KIND_MERGE:
            assert v is not None
            ops.append(v)
            continue
        base = v if kind == KIND_VALUE else None
        break
    if not ops:
        return base
    return (base or b"") + b"".join(reversed(ops))


def test_random_16_byte_keys_take_the_window_sort() -> None:
    """Sixteen overlapping sources of random 16-byte keys (as the ingest's L0 SSTs): the round
    is sorted by the window with no fallback, and the merged keys come out whole and sorted."""
    rng = np.random.default_rng(7)
    srcs: list[list[pa.RecordBatch]] = []
    everything: dict[bytes, int] = {}
    for r in range(16):
        ks = sorted({rng.bytes(16) for _ in range(3000)})
        for k in ks:
            everything.setdefault(k, r)
        srcs.append(
            [
                batch_from_lists(
                    ks, [100 - r] * len(ks), [KIND_VALUE] * len(ks), [b"v%d" % r] * len(ks)
                )
            ]
        )
    with mock.patch.object(iterators, "_full_sort", side_effect=AssertionError("fallback")):
        out = list(merge_sorted(srcs, batch_size=65536))
    got = rows_of(out)
    assert [r[0] for r in got] == sorted(everything)
    assert [r[3] for r in got] == [b"v%d" % everything[k] for k in sorted(everything)]


def test_window_ties_out_of_order_fall_back_to_the_full_sort() -> None:
    """Keys equal in the window and out of order past it: the round is sorted by whole keys."""
    a = [b"p" * 8 + b"\x02", b"q" * 8 + b"\x01"]
    b = [b"p" * 8 + b"\x01", b"q" * 8 + b"\x02"]
    srcs = [[batch_from_lists(a, [2, 2], [KIND_VALUE] * 2, [b"a", b"a"])]]
    srcs.append([batch_from_lists(b, [1, 1], [KIND_VALUE] * 2, [b"b", b"b"])])
    calls = []
    real = iterators._full_sort

    def spy(*args: object) -> object:
        calls.append(1)
        return real(*args)  # type: ignore[arg-type]

    with small_rounds(8), mock.patch.object(iterators, "_full_sort", side_effect=spy):
        got = rows_of(list(merge_sorted(srcs)))
    assert [r[0] for r in got] == sorted(a + b)
    assert calls


@pytest.mark.parametrize("window", [1, 8])
def test_a_round_of_one_repeated_key(window: int) -> None:
    """Every key equal (the common prefix is the whole key): the newest row is kept."""
    srcs = [[batch_from_lists([b"same"], [10 - r], [KIND_VALUE], [b"%d" % r])] for r in range(5)]
    with small_rounds(window):
        assert rows_of(list(merge_sorted(srcs))) == [(b"same", 10, KIND_VALUE, b"0")]


@settings(max_examples=80, deadline=None)
@given(
    sources=st.lists(
        st.dictionaries(
            st.tuples(st.sampled_from([b"pre", b"prefix-key-"]), keys(13, 13)).map(
                lambda t: (t[0] + t[1])[:16].ljust(16, b"\x00")
            ),
            entry_st,
            max_size=30,
        ),
        min_size=2,
        max_size=6,
    ),
    drop=st.booleans(),
)
def test_16_byte_keys_with_a_shared_prefix_read_the_window_across_words(
    sources: list[dict[bytes, tuple[int, bytes | None]]], drop: bool
) -> None:
    """16-byte keys whose round shares 3 or 11 bytes: the window starts inside a key's 8-byte
    word (shifted from two words) or covers the rest of the key."""
    streams = [
        batches([(k, 100 - r, kind, v) for k, (kind, v) in sorted(d.items())], [5])
        for r, d in enumerate(sources)
    ]
    with small_rounds(8):
        out = list(merge_sorted(streams, drop_tombstones=drop))
    assert rows_of(out) == model(sources, drop)
