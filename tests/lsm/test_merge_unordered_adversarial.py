"""Adversarial inputs for the merge's unordered mode (review 53 of 8b7c7cf, issue 42 goal 4).

``merge_sorted(ordered=False)`` hands a round's pieces on as they are when its keys are all
values and no two 8-byte key windows tie. These tests use the real round and buffer sizes (not
the tiny ones of tests/lsm/test_merge_unordered.py) with keys built to sit where a shortcut could
go wrong: a key rewritten or deleted in a newer source exactly at a source's buffer boundary
(8192 rows) or a round's end; distinct keys whose windows tie (a long shared prefix, a
difference past the window); keys that differ only inside the window; keys of one width
mixed with a few of another; empty and null-free values of mixed widths. Each result is held to a
dict model (newest source wins, tombstones hide older values) as a multiset (no row twice), and
the batches are all collected before any is read (a piece handed on must not alias a buffer the
merge reuses)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slatedb_core.lsm.entries import KIND_MERGE, KIND_TOMBSTONE, KIND_VALUE, batch_from_lists
from slatedb_core.lsm.iterators import merge_sorted, newest_versions
from slatedb_core.lsm.merge_operator import string_append

Entry = tuple[int, bytes | None]  # kind, value


def _source(d: Mapping[bytes, Entry], seq: int, cut: int = 3000) -> list[pa.RecordBatch]:
    items = sorted(d.items())
    out = []
    for i in range(0, max(1, len(items)), cut):
        part = items[i : i + cut]
        out.append(
            batch_from_lists(
                [k for k, _ in part],
                [seq] * len(part),
                [e[0] for _, e in part],
                [e[1] for _, e in part],
            )
        )
    return out


def _model(sources: Sequence[Mapping[bytes, Entry]]) -> Counter[tuple[bytes, bytes | None]]:
    newest: dict[bytes, Entry] = {}
    for d in sources:  # newest first
        for k, e in d.items():
            newest.setdefault(k, e)
    return Counter((k, e[1]) for k, e in newest.items() if e[0] == KIND_VALUE)


def _unordered(
    sources: Sequence[Mapping[bytes, Entry]], batch_size: int = 65536
) -> Counter[tuple[bytes, bytes | None]]:
    streams = [_source(d, 1000 - i) for i, d in enumerate(sources)]
    out = list(merge_sorted(streams, batch_size=batch_size, ordered=False))  # all, then read
    assert all(0 < b.num_rows <= batch_size for b in out)
    return Counter(
        (k, v)
        for b in out
        for k, v in zip(b.column(0).to_pylist(), b.column(3).to_pylist(), strict=True)
    )


def _random_keys(rng: np.random.Generator, n: int, width: int, prefix: bytes = b"") -> list[bytes]:
    raw = rng.integers(0, 256, size=(n, width - len(prefix)), dtype=np.uint8)
    return sorted({prefix + bytes(r) for r in raw})


@pytest.mark.parametrize("kind", [KIND_VALUE, KIND_TOMBSTONE])
@pytest.mark.parametrize("at", [8191, 8192, 16383])
def test_a_rewrite_at_a_buffer_or_round_boundary_wins(kind: int, at: int) -> None:
    """Four sources of 17k distinct random keys; the newest source rewrites (or deletes) the
    key at row ``at`` of each older source: the newest version, or nothing, once."""
    rng = np.random.default_rng(at)
    older = [
        {k: (KIND_VALUE, b"old%d" % i * 10) for k in _random_keys(rng, 17_000, 16)}
        for i in range(3)
    ]
    newest: dict[bytes, Entry] = {
        k: (KIND_VALUE, b"n" * 100) for k in _random_keys(rng, 17_000, 16)
    }
    for d in older:
        k = sorted(d)[at]
        newest[k] = (kind, b"NEW" if kind == KIND_VALUE else None)
    sources: list[Mapping[bytes, Entry]] = [newest, *older]
    assert _unordered(sources) == _model(sources)


def test_distinct_keys_whose_windows_tie() -> None:
    """24-byte keys sharing 4 bytes, then 8 bytes of only two patterns, then random bytes:
    distinct keys tie on the 8-byte window after the shared prefix in every round; some are
    rewritten in a newer source (and one deleted)."""
    rng = np.random.default_rng(5)
    mids = [b"\x00" * 8, b"\xff" * 8]
    sources: list[dict[bytes, Entry]] = []
    for s in range(5):
        d: dict[bytes, Entry] = {}
        for k in _random_keys(rng, 6000, 12):
            d[b"PFX!" + mids[k[0] & 1] + k] = (KIND_VALUE, b"v%d" % s)
        sources.append(d)
    shared = sorted(sources[4])[::97]
    for k in shared:
        sources[0][k] = (KIND_VALUE, b"rewritten")
    sources[1][shared[3]] = (KIND_TOMBSTONE, None)
    assert _unordered(sources) == _model(sources)


def test_keys_that_differ_only_inside_the_window() -> None:
    """Keys of 16 bytes with a 12-byte shared prefix: the window is the last 4 bytes (and
    zero-padded). Two sources hold interleaved keys, a third rewrites a few."""
    pre = b"tenant-0042-"
    a = {pre + i.to_bytes(4, "big"): (KIND_VALUE, b"a") for i in range(0, 60_000, 2)}
    b = {pre + i.to_bytes(4, "big"): (KIND_VALUE, b"b") for i in range(1, 60_000, 2)}
    c: dict[bytes, Entry] = {pre + i.to_bytes(4, "big"): (KIND_VALUE, b"c") for i in (0, 8191)}
    c[pre + (8192).to_bytes(4, "big")] = (KIND_TOMBSTONE, None)
    sources: list[Mapping[bytes, Entry]] = [c, a, b]
    assert _unordered(sources) == _model(sources)
    assert _unordered([a, b]) == _model([a, b])


def test_keys_of_two_widths_where_one_is_a_prefix() -> None:
    """Keys ``k`` and ``k + b"\\x00"`` in different sources: padded to one width they would be
    equal; both rows come, each once."""
    rng = np.random.default_rng(9)
    base = _random_keys(rng, 20_000, 8)
    a = {k: (KIND_VALUE, b"short") for k in base}
    b = {k + b"\x00": (KIND_VALUE, b"long") for k in base[::3]}
    c = {k: (KIND_VALUE, b"") for k in _random_keys(rng, 20_000, 9)}
    for sources in ([a, b], [b, a], [a, b, c], [c, b, a]):
        assert _unordered(sources) == _model(sources)


@pytest.mark.slow
@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    nsrc=st.integers(2, 6),
    rows=st.integers(1, 12_000),
    width=st.sampled_from([1, 2, 7, 8, 9, 16, 17]),
    overlap=st.sampled_from([0.0, 0.0, 0.001, 0.05]),
    dead=st.sampled_from([0.0, 0.01, 0.5]),
    batch_size=st.sampled_from([1, 100, 8192, 65536]),
)
def test_random_sources_at_real_sizes(
    seed: int,
    nsrc: int,
    rows: int,
    width: int,
    overlap: float,
    dead: float,
    batch_size: int,
) -> None:
    """Random databases at the merge's real sizes: keys of one width (narrow ones repeat across
    sources), a share rewritten in newer sources, a share of tombstones, values of mixed widths
    (empty ones too): the unordered merge is the model, as a multiset."""
    rng = np.random.default_rng(seed)
    sources: list[dict[bytes, Entry]] = []
    for s in range(nsrc):
        d: dict[bytes, Entry] = {}
        for k in _random_keys(rng, rows, width):
            r = rng.random()
            if r < dead:
                d[k] = (KIND_TOMBSTONE, None)
            else:
                d[k] = (KIND_VALUE, b"x" * int(rng.integers(0, 3)) + b"%d" % s * (r < 0.5))
        sources.append(d)
    for s in range(1, nsrc):
        for k in list(sources[s])[:: max(1, int(1 / overlap))] if overlap else []:
            sources[0][k] = (KIND_VALUE, b"top")
    assert _unordered(sources, batch_size) == _model(sources)


def test_operands_across_sources_at_a_boundary() -> None:
    """Merge operands (SlateDB RFC 0006) in the newest source over values of older sources,
    one at a buffer boundary, among 20k distinct keys: folded as the ordered merge folds them."""
    rng = np.random.default_rng(3)
    older = {k: (KIND_VALUE, b"base") for k in _random_keys(rng, 20_000, 16)}
    ks = sorted(older)
    newer: dict[bytes, Entry] = {k: (KIND_VALUE, b"n") for k in _random_keys(rng, 20_000, 16)}
    for i in (0, 8191, 8192, 19_999):
        newer[ks[i]] = (KIND_MERGE, b"+op")

    def streams() -> list[Iterator[pa.RecordBatch]]:
        return [
            newest_versions(_source(newer, 2000), keep_operands=True),
            newest_versions(_source(older, 1000), keep_operands=True),
        ]

    ordered = [
        r
        for b in merge_sorted(streams(), merge_operator=string_append)
        for r in zip(b.column(0).to_pylist(), b.column(3).to_pylist(), strict=True)
    ]
    unordered = [
        r
        for b in list(merge_sorted(streams(), merge_operator=string_append, ordered=False))
        for r in zip(b.column(0).to_pylist(), b.column(3).to_pylist(), strict=True)
    ]
    assert Counter(unordered) == Counter(ordered)
    got = dict(unordered)
    assert all(got[ks[i]] in (b"base,+op", b"base+op") for i in (0, 8191, 8192, 19_999))


def test_foreign_arrow_types_and_empty_batches() -> None:
    """Sources of large_binary keys and values and int64 seqs (conformed on the way in), empty
    batches between others, and one empty source: the model's rows, each once."""
    rng = np.random.default_rng(21)
    a = {k: (KIND_VALUE, b"a" * 9) for k in _random_keys(rng, 12_000, 16)}
    b: dict[bytes, Entry] = {k: (KIND_VALUE, b"b") for k in _random_keys(rng, 12_000, 16)}
    b.update({k: (KIND_TOMBSTONE, None) for k in sorted(a)[::500]})

    def foreign(batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
        out: list[pa.RecordBatch] = []
        for x in batches:
            out.append(x.slice(0, 0))
            out.append(
                pa.RecordBatch.from_arrays(
                    [
                        x.column(3).cast(pa.large_binary()),
                        x.column(0).cast(pa.large_binary()),
                        x.column(2),
                        x.column(1).cast(pa.int64()),
                    ],
                    names=["value", "key", "kind", "seq"],
                )
            )
        return out

    streams: list[list[pa.RecordBatch]] = [[], foreign(_source(b, 2000)), _source(a, 1000)]
    out = list(merge_sorted(streams, batch_size=4096, ordered=False))
    got = Counter(
        (k, v)
        for x in out
        for k, v in zip(x.column(0).to_pylist(), x.column(3).to_pylist(), strict=True)
    )
    assert got == _model([b, a])
