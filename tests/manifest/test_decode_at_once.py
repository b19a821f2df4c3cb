"""A manifest's SSTs and views decoded at once, every table kind as numpy columns (issue 42,
goal 2: the one decode of an open at 10k SSTs was 75 ms of per-SST calls and dataclass
construction). Property tests: the at-once decode and the one-by-one decode (the path every
manifest took before, still taken when the tables do not share one vtable) give equal
manifests and stamps over random manifests (plain ones, where the fast path is taken, and
mixed ones), and equal outcomes over randomly damaged SlateDB-style manifests (no checksum):
both decode to equal manifests or both raise ``CorruptionError``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from typing import Any
from uuid import uuid4

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ulid import ULID

from slatedb_core.errors import CorruptionError, UnsupportedFeature
from slatedb_core.keys import BytesBound, BytesRange
from slatedb_core.manifest import _decode
from slatedb_core.manifest._encode import DESTROYED_CHECKPOINT_ID
from slatedb_core.manifest.codec import decode_stamped_manifest, encode_manifest
from slatedb_core.manifest.model import (
    AppVersion,
    Checkpoint,
    CompactedSst,
    Manifest,
    SortedRun,
    SstInfo,
    SstView,
    builder,
)
from slatedb_core.manifest.tables import MANIFEST
from tests.manifest.fbtools import drop_slot

NAME = "db/manifest/00000000000000000007.manifest"
U64 = 2**64 - 1

_u64 = st.integers(0, U64)
_ulids = st.binary(min_size=16, max_size=16).map(ULID)
_keys = st.binary(max_size=6)
_bounds = st.one_of(
    st.just(BytesBound.unbounded()), _keys.map(BytesBound.included), _keys.map(BytesBound.excluded)
)
_infos = st.builds(
    SstInfo,
    st.none() | _keys,
    st.none() | _keys,
    *([_u64] * 4),
    st.integers(0, 4),
    _u64,
    _u64,
    st.integers(0, 1),
    _u64,
    _u64,
    st.integers(0, 1),
)


@st.composite
def manifests(draw: st.DrawFn) -> Manifest:
    """Plain (no original ids, no visible ranges, one info layout: the fast path's case) or
    mixed (anything the model allows)."""
    plain = draw(st.booleans())
    if plain:
        first, last = draw(st.booleans()), draw(st.booleans())
        ssts_of = st.builds(
            CompactedSst,
            _ulids,
            st.builds(
                SstInfo,
                _keys if first else st.none(),
                _keys if last else st.none(),
                *([st.integers(1, U64)] * 4),
            ),
        )
    else:
        ssts_of = st.builds(
            CompactedSst, _ulids, _infos, st.integers(0, 2**16 - 1), st.none() | _ulids
        )
    ssts = draw(st.lists(ssts_of, max_size=12, unique_by=lambda s: s.id.bytes))
    rng = st.none() if plain else st.none() | st.builds(BytesRange, _bounds, _bounds)
    views = (
        st.lists(
            st.builds(SstView, _ulids, st.sampled_from([s.id for s in ssts]), rng), max_size=8
        ).map(tuple)
        if ssts
        else st.just(())
    )
    plain_cps = st.builds(
        Checkpoint,
        st.uuids(),
        _u64,
        st.integers(0, 2**32 - 1),
        st.none() | st.integers(1, 2**32 - 1),
    )
    other_cps = st.builds(
        Checkpoint,
        st.uuids(),
        _u64,
        st.integers(0, 2**32 - 1),
        st.none() | st.integers(1, 2**32 - 1),
        st.none() | _u64,
        st.none() | st.text(max_size=4),
    )
    cps = draw(st.lists(plain_cps, max_size=40)) + draw(st.lists(other_cps, max_size=3))
    cps = [c for c in draw(st.permutations(cps)) if c.id != DESTROYED_CHECKPOINT_ID]
    return Manifest(
        ssts=tuple(ssts),
        l0=draw(views),
        compacted=tuple(
            draw(st.lists(st.builds(SortedRun, st.integers(0, 99), views), max_size=3))
        ),
        checkpoints=tuple({c.id: c for c in cps}.values()),
        destroyed_at_s=draw(st.none() | st.integers(0, 2**32 - 1)),
    )


@contextmanager
def one_by_one() -> Iterator[None]:
    """The decode as it was before: every table read by itself."""
    mp = pytest.MonkeyPatch()
    mp.setattr(_decode, "_read_ssts_at_once", lambda *a: None)
    mp.setattr(_decode, "_read_views_at_once", lambda *a: None)
    mp.setattr(_decode, "_plain_checkpoints", lambda *a: {})
    try:
        yield
    finally:
        mp.undo()


def _outcome(data: bytes) -> Any:
    try:
        return decode_stamped_manifest(data, name=NAME)
    except (CorruptionError, UnsupportedFeature) as e:
        return type(e)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=manifests())
def test_at_once_and_one_by_one_decode_alike(m: Manifest) -> None:
    """Issue 42, goal 2: equal manifests, stamps and encoder layouts."""
    data = encode_manifest(m, manifest_id=3, nonce=bytes(16))
    fast, stamp = decode_stamped_manifest(data, name=NAME)
    with one_by_one():
        slow, slow_stamp = decode_stamped_manifest(data, name=NAME)
    assert fast == slow == m
    assert stamp == slow_stamp and stamp.layout == slow_stamp.layout
    for a, b in zip(fast.ssts, slow.ssts, strict=True):
        assert type(a) is type(b) and type(a.info) is type(b.info)
        assert [getattr(a.info, f.name) for f in fields(SstInfo)] == [
            getattr(b.info, f.name) for f in fields(SstInfo)
        ]
        assert all(
            type(getattr(a.info, f.name)) is type(getattr(b.info, f.name)) for f in fields(SstInfo)
        )


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=manifests(), data=st.data())
def test_damaged_manifests_decode_alike_or_raise_alike(m: Manifest, data: st.DataObject) -> None:
    """SlateDB's manifests carry no checksum (our table dropped, as SlateDB writes them): a
    damaged one decodes to the same manifest on both paths, or both raise."""
    buf = bytearray(drop_slot(encode_manifest(m, manifest_id=3), 32))
    for _ in range(data.draw(st.integers(1, 4))):
        buf[data.draw(st.integers(2, len(buf) - 1))] = data.draw(st.integers(0, 255))
    fast = _outcome(bytes(buf))
    with one_by_one():
        slow = _outcome(bytes(buf))
    if isinstance(fast, tuple) and isinstance(slow, tuple):
        assert fast[0] == slow[0]
    else:
        assert fast == slow


def test_the_fast_path_is_taken_for_a_writers_manifest(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plain case (what our writer and SlateDB's write) goes through the at-once reads."""
    calls: list[str] = []
    for name in ("_read_ssts_at_once", "_read_views_at_once"):
        real = getattr(_decode, name)

        def counted(*a: Any, real: Any = real, name: str = name) -> Any:
            out = real(*a)
            calls.append(f"{name}:{out is not None}")
            return out

        monkeypatch.setattr(_decode, name, counted)
    ssts = tuple(CompactedSst(ULID(), SstInfo(b"a%d" % i, b"b%d" % i, 9, 3)) for i in range(50))
    m = Manifest(ssts=ssts, compacted=(SortedRun(0, tuple(SstView(ULID(), s.id) for s in ssts)),))
    assert decode_stamped_manifest(encode_manifest(m), name=NAME)[0] == m
    assert calls == [
        "_read_ssts_at_once:True",
        "_read_views_at_once:True",
        "_read_views_at_once:True",
    ]


def test_plain_checkpoints_are_read_at_once_beside_a_writer_checkpoint() -> None:
    """A writer's manifest: 1,000 checkpoints without metadata and its writer checkpoint (its
    own vtable): the plain ones are read at once, the other one by one, in order."""
    plain = [
        Checkpoint(uuid4(), 7, 1_700_000_000 + i, None if i % 3 else 1_800_000_000)
        for i in range(1000)
    ]
    writer = Checkpoint(uuid4(), 9, 1_700_000_500, None, 4)
    m = Manifest(checkpoints=(*plain[:500], writer, *plain[500:]), destroyed_at_s=5)
    data = encode_manifest(m, manifest_id=9)
    r = _decode.ManifestReader(data[2:])
    positions = r.tables(r.table(MANIFEST, r.root())[12], "checkpoints")
    assert len(_decode._plain_checkpoints(r, positions)) == 1000
    got, stamp = decode_stamped_manifest(data, name=NAME)
    with one_by_one():
        slow, slow_stamp = decode_stamped_manifest(data, name=NAME)
    assert got == slow == m and stamp.layout == slow_stamp.layout


def test_builder_makes_the_object_the_constructor_makes() -> None:
    """model.builder: same type, fields, equality and hash; still frozen; refused for a class
    whose constructor validates (it would skip the validation)."""
    make = builder(SstInfo)
    args = (b"a", None, 1, 2, 3, 4, 1, 5, 6, 0, 7, 8, 1)
    a, b = make(*args), SstInfo(*args)
    assert type(a) is SstInfo and a == b and hash(a) == hash(b) and repr(a) == repr(b)
    with pytest.raises(AttributeError):
        a.first_key = b"x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        builder(AppVersion)
