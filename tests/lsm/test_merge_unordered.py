"""The merge's unordered mode (``merge_sorted(..., ordered=False)``, issue 42, goal 4).

A Spark partition needs each live row once, in no particular order. The merge of overlapping L0
SSTs gathered every round's rows in key order (a random copy of every key and value: ~15% of a
Spark read's scan CPU on the 10M-row uncompacted table). Unordered, a round whose keys are each
in one source and all values is handed on as its sources' pieces; any other round (a key in two
sources, a tombstone, an operand, key windows that tie) is merged in key order as before. These
tests compare the unordered merge, as a set of rows, with the model the ordered merge is held
to (newest source wins, tombstones dropped, operands folded) over random sources with tiny
rounds and narrow key windows, so that every path is taken."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slatedb_core.errors import InvalidArgument
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
    """Tiny rounds and buffers and a ``window``-byte key window: small inputs tie often."""
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


def model(sources: list[dict[bytes, tuple[int, bytes | None]]]) -> list[Row]:
    """Newest source wins per key; tombstones dropped; in key order."""
    merged: dict[bytes, Row] = {}
    for rank, src in enumerate(sources):
        for k, (kind, v) in src.items():
            merged.setdefault(k, (k, 100 - rank, kind, v))
    return [merged[k] for k in sorted(merged) if merged[k][2] != KIND_TOMBSTONE]


def keys(width_lo: int, width_hi: int) -> st.SearchStrategy[bytes]:
    return st.lists(st.sampled_from(b"\x00\x01\xfe"), min_size=width_lo, max_size=width_hi).map(
        bytes
    )


key_st = st.one_of(keys(4, 4), keys(10, 10), keys(0, 6), keys(9, 12), keys(16, 16))
entry_st = st.one_of(
    st.tuples(st.just(KIND_TOMBSTONE), st.none()),
    st.tuples(st.just(KIND_VALUE), st.binary(max_size=3)),
    st.tuples(st.just(KIND_VALUE), st.just(b"0123456789")),
    st.tuples(st.just(KIND_VALUE), st.just(b"fixed-width")),
)


@settings(max_examples=100, deadline=None)
@given(
    sources=st.lists(
        st.tuples(
            st.dictionaries(key_st, entry_st, max_size=30),
            st.lists(st.integers(-1, 31), max_size=4),
        ),
        max_size=7,
    ),
    window=st.sampled_from([1, 2, 8]),
    batch_size=st.integers(1, 40),
    small=st.booleans(),
)
def test_unordered_merge_holds_the_models_rows(
    sources: list[tuple[dict[bytes, tuple[int, bytes | None]], list[int]]],
    window: int,
    batch_size: int,
    small: bool,
) -> None:
    """Keys in several sources (newest wins), tombstones hiding older values, keys of mixed
    widths, windows that tie: the same rows as the ordered merge, each once."""
    streams = [
        batches([(k, 100 - rank, kind, v) for k, (kind, v) in sorted(d.items())], cuts)
        for rank, (d, cuts) in enumerate(sources)
    ]
    if small:
        with small_rounds(window):
            out = list(merge_sorted(streams, batch_size=batch_size, ordered=False))
    else:
        out = list(merge_sorted(streams, batch_size=batch_size, ordered=False))
    assert all(0 < b.num_rows <= batch_size for b in out)
    assert sorted(rows_of(out)) == model([d for d, _ in sources])


@settings(max_examples=100, deadline=None)
@given(
    sources=st.lists(
        st.dictionaries(
            st.integers(0, 30),
            st.lists(
                st.one_of(
                    st.tuples(st.just(KIND_MERGE), st.binary(min_size=1, max_size=2)),
                    st.tuples(st.just(KIND_VALUE), st.binary(max_size=2)),
                    st.tuples(st.just(KIND_TOMBSTONE), st.none()),
                ),
                min_size=1,
                max_size=3,
            ),
            max_size=12,
        ),
        max_size=5,
    ),
    window=st.sampled_from([1, 8]),
)
def test_unordered_operand_chains_fold_as_the_ordered_merge(
    sources: list[dict[int, list[tuple[int, bytes | None]]]], window: int
) -> None:
    """Operand chains (SlateDB RFC 0006): a round holding one is merged in key order, folded."""

    def streams() -> list[Iterator[pa.RecordBatch]]:
        out = []
        for r, d in enumerate(sources):
            rows: list[Row] = []
            for key, vers in sorted(d.items()):
                for j, (kind, v) in enumerate(vers):
                    rows.append((b"key-%010d" % key, 1000 - 10 * r - j, kind, v))
            out.append(newest_versions(batches(rows, [3]), keep_operands=True))
        return out

    with small_rounds(window):
        ordered = rows_of(list(merge_sorted(streams(), merge_operator=string_append)))
        unordered = rows_of(
            list(merge_sorted(streams(), merge_operator=string_append, ordered=False))
        )
    assert sorted(unordered) == ordered


def _random_sources(overlap: bool) -> tuple[list[list[pa.RecordBatch]], dict[bytes, bytes]]:
    """Sixteen sources of random 16-byte keys and 100-byte values (as an ingest's L0 SSTs);
    with ``overlap``, each source also rewrites some keys of the one after it (newer)."""
    rng = np.random.default_rng(11)
    per = [sorted({rng.bytes(16) for _ in range(3000)}) for _ in range(16)]
    if overlap:
        for r in range(15):
            per[r] = sorted(set(per[r]) | set(per[r + 1][::50]))
    newest: dict[bytes, bytes] = {}
    srcs = []
    for r, ks in enumerate(per):
        vals = [(b"%02d" % r) * 50 for _ in ks]
        for k, v in zip(ks, vals, strict=True):
            newest.setdefault(k, v)
        srcs.append([batch_from_lists(ks, [100 - r] * len(ks), [KIND_VALUE] * len(ks), vals)])
    return srcs, newest


def test_distinct_random_keys_are_never_gathered() -> None:
    """Sixteen overlapping sources whose keys are each in one source: no round is gathered in
    key order, and every row comes once."""
    srcs, newest = _random_sources(overlap=False)
    with mock.patch.object(iterators, "_gather", side_effect=AssertionError("gathered")):
        out = list(merge_sorted(srcs, batch_size=65536, ordered=False))
    got = {k: v for k, _, _, v in rows_of(out)}
    assert len(got) == sum(b.num_rows for b in out) == len(newest)
    assert got == newest


def test_keys_in_two_sources_take_the_newest() -> None:
    """Keys rewritten in a newer source: their rounds are merged in key order, the newest
    version wins, and no row comes twice."""
    srcs, newest = _random_sources(overlap=True)
    out = list(merge_sorted(srcs, batch_size=65536, ordered=False))
    rows = rows_of(out)
    assert len(rows) == len(newest)
    assert {k: v for k, _, _, v in rows} == newest


def test_unordered_needs_tombstones_dropped() -> None:
    with pytest.raises(InvalidArgument, match="ordered=False"):
        list(merge_sorted([], drop_tombstones=False, ordered=False))
