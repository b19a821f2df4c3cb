"""What a compaction keeps (issue 38, items 1-3, compaction half): ``retain`` and
``merge_versions`` against a small per-key reference written from SlateDB 0.17's
``MergeOperatorIterator`` (compaction mode) and ``RetentionIterator``."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slatedb_core.errors import MergeOperatorMissing
from slatedb_core.lsm.retention import Retention, retain, retain_stream
from slatedb_core.lsm.row_model import (
    ENTRY_SCHEMA,
    KIND_MERGE,
    KIND_TOMBSTONE,
    KIND_VALUE,
    ROW_SCHEMA,
    Version,
    has_timestamps,
)
from slatedb_core.lsm.versions_merge import merge_versions

Row = tuple[bytes, Version]


def append(key: bytes, existing: bytes | None, operand: bytes) -> bytes:
    return (existing or b"") + b"+" + operand


# ---- the reference: SlateDB's two iterators, one version at a time --------------------------


def ref_key(key: bytes, versions: list[Version], p: Retention) -> list[Version]:
    """SlateDB 0.17, for one key's versions newest first."""
    merged: list[Version] = []
    i = 0
    while i < len(versions):
        e = versions[i]
        if e.kind != KIND_MERGE or (
            p.retention_min_seq is not None and e.seq > p.retention_min_seq
        ):
            if e.kind == KIND_MERGE and p.merge_operator is None:
                raise MergeOperatorMissing(key)
            merged.append(e)
            i += 1
            continue
        if p.merge_operator is None:
            raise MergeOperatorMissing(key)
        ops: list[bytes] = []
        base: Version | None = None
        creates = []
        while i < len(versions) and versions[i].expire_ts == e.expire_ts:
            v = versions[i]
            i += 1
            if v.create_ts is not None:
                creates.append(v.create_ts)
            if v.kind != KIND_MERGE:
                base = v
                break
            ops.append(v.value or b"")
        # the batches of 100 (newest first) folded separately, then onto the base
        chunks = [ops[j : j + 100] for j in range(0, len(ops), 100)]
        partial = []
        for c in chunks:
            acc: bytes | None = None
            for o in reversed(c):
                acc = p.merge_operator(key, acc, o)
            assert acc is not None
            partial.append(acc)
        acc2 = None if base is None or base.kind == KIND_TOMBSTONE else base.value
        for r in reversed(partial):
            acc2 = p.merge_operator(key, acc2, r)
        merged.append(
            Version(
                e.seq,
                KIND_MERGE if base is None else KIND_VALUE,
                acc2,
                e.expire_ts,
                max(creates) if creates else None,
            )
        )
    out: list[Version] = []
    for v in merged:
        is_merge = v.kind == KIND_MERGE
        if v.expire_ts is not None and v.expire_ts <= p.now_ms:
            if is_merge:
                continue
            v = Version(v.seq, KIND_TOMBSTONE, None, None, v.create_ts)
        out.append(v)
        by_seq = p.retention_min_seq is not None and v.seq > p.retention_min_seq
        if not (by_seq or is_merge):
            break
    if p.drop_tombstones:
        while out and out[-1].kind == KIND_TOMBSTONE:
            out.pop()
    return out


def reference(rows: Sequence[Row], p: Retention) -> list[Row]:
    out: list[Row] = []
    i = 0
    while i < len(rows):
        j = i
        while j < len(rows) and rows[j][0] == rows[i][0]:
            j += 1
        out += [(rows[i][0], v) for v in ref_key(rows[i][0], [r[1] for r in rows[i:j]], p)]
        i = j
    return out


def to_batch(rows: Sequence[Row], wide: bool) -> pa.RecordBatch:
    cols = {
        "key": [k for k, _ in rows],
        "seq": [v.seq for _, v in rows],
        "kind": [v.kind for _, v in rows],
        "value": [v.value if v.kind != KIND_TOMBSTONE else None for _, v in rows],
    }
    if not wide:
        return pa.RecordBatch.from_pydict(cols, schema=ENTRY_SCHEMA)
    cols["expire_ts"] = [v.expire_ts for _, v in rows]
    cols["create_ts"] = [v.create_ts for _, v in rows]
    return pa.RecordBatch.from_pydict(cols, schema=ROW_SCHEMA)


def from_batch(b: pa.RecordBatch) -> list[Row]:
    d = b.to_pydict()
    wide = has_timestamps(b)
    out = []
    for i in range(b.num_rows):
        kind = d["kind"][i]
        value = None if kind == KIND_TOMBSTONE else (d["value"][i] or b"")
        out.append(
            (
                d["key"][i],
                Version(
                    d["seq"][i],
                    kind,
                    value,
                    d["expire_ts"][i] if wide else None,
                    d["create_ts"][i] if wide else None,
                ),
            )
        )
    return out


# ---- generated histories -------------------------------------------------------------------


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[Row], bool, bool]:
    """Key-sorted rows, each key's versions newest first (distinct seqs overall)."""
    with_ts = draw(st.booleans())
    with_merges = draw(st.booleans())
    nkeys = draw(st.integers(0, 8))
    seqs = iter(draw(st.permutations(list(range(1, 200))))[:150])
    kinds = [KIND_VALUE, KIND_TOMBSTONE] + ([KIND_MERGE] * 2 if with_merges else [])
    rows: list[Row] = []
    for k in range(nkeys):
        key = b"k%02d" % k
        nv = draw(st.integers(1, 6))
        ks = sorted((next(seqs) for _ in range(nv)), reverse=True)
        for s in ks:
            kind = draw(st.sampled_from(kinds))
            expire = draw(st.sampled_from([None, None, 50, 100, 150])) if with_ts else None
            create = draw(st.sampled_from([None, 10, 20])) if with_ts else None
            value = None if kind == KIND_TOMBSTONE else b"v%d" % s
            rows.append((key, Version(s, kind, value, expire, create)))
    return rows, with_ts, with_merges


policies = st.builds(
    Retention,
    now_ms=st.sampled_from([0, 75, 100, 200]),
    retention_min_seq=st.sampled_from([None, 0, 50, 100, 150, 300]),
    drop_tombstones=st.booleans(),
    merge_operator=st.sampled_from([None, append]),
)


@settings(max_examples=250, deadline=None)
@given(histories(), policies)
def test_retain_matches_slatedb_reference(h: tuple[list[Row], bool, bool], p: Retention) -> None:
    rows, wide, _ = h
    try:
        expected = reference(rows, p)
    except MergeOperatorMissing:
        with pytest.raises(MergeOperatorMissing):
            retain(to_batch(rows, wide), p)
        return
    got = from_batch(retain(to_batch(rows, wide), p))
    assert got == expected


@settings(max_examples=150, deadline=None)
@given(histories(), policies, st.integers(1, 4), st.integers(0, 2**32))
def test_merge_versions_then_retain_matches_reference(
    h: tuple[list[Row], bool, bool], p: Retention, nsrc: int, seed: int
) -> None:
    """The rows spread over sources (newer seqs in newer sources, batches cut anywhere, even
    inside a key's versions): the merge hands retain every version of each key together."""
    rows, wide, _ = h
    rng = random.Random(seed)
    # a source per seq band: source 0 the newest
    top = max((v.seq for _, v in rows), default=0) + 1
    cuts = sorted(rng.sample(range(1, top + 1), min(nsrc - 1, top))) if top > 1 else []
    bands = [0, *cuts, top + 1]
    sources = []
    for a, b in reversed(list(itertools.pairwise(bands))):
        part = [r for r in rows if a <= r[1].seq < b]
        batches = []
        i = 0
        while i < len(part):
            n = rng.randint(1, 4)
            chunk = part[i : i + n]
            stamped = any(v.expire_ts is not None or v.create_ts is not None for _, v in chunk)
            batches.append(to_batch(chunk, stamped or (wide and rng.random() < 0.5)))
            i += n
        sources.append(batches)
    try:
        expected = reference(rows, p)
    except MergeOperatorMissing:
        with pytest.raises(MergeOperatorMissing):
            list(retain_stream(merge_versions(sources), p))
        return
    got = [r for b in retain_stream(merge_versions(sources), p) for r in from_batch(b)]
    assert got == expected
    fused = [r for b in merge_versions(sources, p) for r in from_batch(b)]  # the compactor's
    assert fused == expected


def test_snapshot_keeps_the_boundary_version() -> None:
    """SlateDB's own example (retention_iterator.rs): a = v0 (1), a = v1 (2), snapshot at 3,
    delete a (4): the compaction keeps the tombstone and v1, drops v0."""
    rows = [
        (b"a", Version(4, KIND_TOMBSTONE, None, None, None)),
        (b"a", Version(2, KIND_VALUE, b"v1", None, None)),
        (b"a", Version(1, KIND_VALUE, b"v0", None, None)),
    ]
    p = Retention(now_ms=0, retention_min_seq=3, drop_tombstones=True)
    assert [v.seq for _, v in from_batch(retain(to_batch(rows, False), p))] == [4, 2]
    # without the snapshot: newest-wins, and the tombstone goes at the bottom
    assert retain(to_batch(rows, False), Retention(now_ms=0, drop_tombstones=True)).num_rows == 0


def test_expired_value_becomes_a_tombstone_that_keeps_create_ts() -> None:
    rows = [
        (b"a", Version(5, KIND_VALUE, b"x", 100, 7)),
        (b"b", Version(6, KIND_VALUE, b"y", 300, 8)),
    ]
    got = from_batch(retain(to_batch(rows, True), Retention(now_ms=100)))
    assert got == [
        (b"a", Version(5, KIND_TOMBSTONE, None, None, 7)),
        (b"b", Version(6, KIND_VALUE, b"y", 300, 8)),
    ]


def test_fast_path_returns_the_batch_itself() -> None:
    """No timestamps, operands or repeated keys, nothing to drop: no copy at all."""
    rows = [(b"k%d" % i, Version(i + 1, KIND_VALUE, b"v", None, None)) for i in range(10)]
    b = to_batch(rows, False)
    assert retain(b, Retention(now_ms=0, drop_tombstones=True)) is b


def test_operand_without_operator_is_a_typed_error_naming_the_key() -> None:
    rows = [
        (b"a", Version(5, KIND_VALUE, b"x", None, None)),
        (b"m", Version(4, KIND_VALUE, b"new", None, None)),
        (b"m", Version(3, KIND_MERGE, b"old-operand", None, None)),
    ]
    with pytest.raises(MergeOperatorMissing) as e:
        retain(to_batch(rows, False), Retention(now_ms=0))
    assert e.value.key == b"m"
