"""A sorted run's SST handles are built when a read first reaches them (issue 42, goal 2: an
open at 10k SSTs spent half its CPU building 10k ``SstHandle``s, their paths and key ranges,
before any read). Property tests: a lazy run (what :func:`build_handles` makes) answers every
point read, batch read and scan exactly as the eager run of the same views does, over random
runs of real SSTs (a key's versions cut across SSTs, views clipped by random visible ranges,
several views of one SST, views out of key order), and exposes the same views in the same
order; a state built after a commit reuses the handles (and open readers) built before."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ulid import ULID

from slatedb_core.keys import BoundKind, BytesBound, BytesRange
from slatedb_core.lsm import dbstate
from slatedb_core.lsm.dbstate import SortedRunHandle, SstHandle, build_handles, resolve_sst_path
from slatedb_core.lsm.entries import ENTRY_SCHEMA
from slatedb_core.manifest.model import CompactedSst, Manifest, SortedRun, SstInfo, SstView
from slatedb_core.sst.builder import encode_sst
from slatedb_core.sst.create import write_new_sst
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store

DB = "db"
KEYS = [b"k%02d" % i for i in range(24)]
PROBES = [b"", b"a", *KEYS, *(k + b"\x00" for k in KEYS[::5]), b"z"]


def _sst(store: ObjectStore, rows: list[tuple[bytes, int, int]]) -> CompactedSst:
    """An SST of ``rows`` (key, seq, kind), keys ascending, a key's versions newest first."""
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([r[0] for r in rows], pa.binary()),
            pa.array([r[1] for r in rows], pa.uint64()),
            pa.array([r[2] for r in rows], pa.uint8()),
            pa.array([None if r[2] == 1 else b"v%d" % r[1] for r in rows], pa.binary()),
        ],
        schema=ENTRY_SCHEMA,
    )
    data, info = encode_sst(batch)
    return write_new_sst(store, DB, data, info)


def _bound(draw: Any) -> BytesBound:
    kind = draw(st.sampled_from([BoundKind.UNBOUNDED, BoundKind.INCLUDED, BoundKind.EXCLUDED]))
    if kind == BoundKind.UNBOUNDED:
        return BytesBound.unbounded()
    return BytesBound(kind, draw(st.sampled_from(KEYS)))


@st.composite
def runs(
    draw: Any,
) -> tuple[list[list[tuple[bytes, int, int]]], list[tuple[int, BytesRange | None]]]:
    """SST contents (a run's rows cut anywhere, inside a key's versions too) and the views:
    (index of the SST, visible range), in any order, some SSTs seen by several views."""
    keys = sorted(draw(st.sets(st.sampled_from(KEYS), min_size=1, max_size=14)))
    rows: list[tuple[bytes, int, int]] = []
    seq = 1000
    for k in keys:
        for _ in range(draw(st.integers(1, 3))):
            rows.append((k, seq, draw(st.sampled_from([0, 0, 1]))))
            seq -= 1
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(rows) - 1)), max_size=5)))
    parts = [rows[a:b] for a, b in zip([0, *cuts], [*cuts, len(rows)], strict=True) if rows[a:b]]
    views: list[tuple[int, BytesRange | None]] = []
    for i in range(len(parts)):
        for _ in range(draw(st.integers(1, 2))):
            rng = None
            if draw(st.booleans()):
                start = _bound(draw)
                end = _bound(draw)
                if start.kind != BoundKind.UNBOUNDED and end.kind != BoundKind.UNBOUNDED:
                    lo, hi = sorted([start.key or b"", end.key or b""])
                    start, end = BytesBound(start.kind, lo), BytesBound(end.kind, hi)
                rng = BytesRange(start, end)
            views.append((i, rng))
    return parts, draw(st.permutations(views))


def _eager(store: ObjectStore, m: Manifest, v: SstView) -> SstHandle:
    """The handle the eager build made: every bound and the path computed now."""
    sst = m.sst(v.sst_id)
    assert sst is not None
    return SstHandle(store, resolve_sst_path(DB, m, sst), sst, v, None)


def _rows(batches: Any) -> list[tuple[Any, ...]]:
    return [tuple(r.values()) for b in batches for r in b.to_pylist()]


@pytest.fixture(scope="module")
def mem() -> ObjectStore:
    return open_store("memory://")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run=runs(), data=st.data())
def test_a_lazy_run_reads_as_the_eager_run(run: Any, data: Any, mem: ObjectStore) -> None:
    """Issue 42 goal 2 (lazy handles): get, get_sorted and scan of every probe and range."""
    parts, view_specs = run
    ssts = [_sst(mem, p) for p in parts]
    views = tuple(SstView(ULID(), ssts[i].id, rng) for i, rng in view_specs)
    m = Manifest(ssts=tuple(ssts), compacted=(SortedRun(7, views),))
    _, (lazy,), _ = build_handles(mem, DB, m, None)
    eager = SortedRunHandle(7, [_eager(mem, m, v) for v in views])
    assert lazy._starts == eager._starts
    assert lazy.known == {}  # nothing built before a read
    for key in data.draw(st.permutations(PROBES)):
        assert lazy.get(key) == eager.get(key), key
    probe = sorted(set(data.draw(st.lists(st.sampled_from(PROBES), max_size=12))))
    assert lazy.get_sorted(probe) == eager.get_sorted(probe)
    start = data.draw(st.none() | st.sampled_from(PROBES))
    end = data.draw(st.none() | st.sampled_from(PROBES))
    if start is not None and end is not None:
        start, end = sorted([start, end])
    assert _rows(lazy.scan(start, end)) == _rows(eager.scan(start, end))
    built = [(h.view, h.sst, h.path, h._lo, h._hi, h.range) for h in lazy.views]
    assert built == [(h.view, h.sst, h.path, h._lo, h._hi, h.range) for h in eager.views]
    assert {(h.view.view_id, h.view.sst_id): h for h in lazy.views} == lazy.known


def test_a_lazy_run_of_an_unknown_sst_raises_at_build(mem: ObjectStore) -> None:
    """As the eager build did: a view of an SST the manifest lacks is a KeyError at once."""
    sst = _sst(mem, [(b"a", 1, 0)])
    ghost = ULID()
    m = Manifest(
        ssts=(sst,), compacted=(SortedRun(0, (SstView(ULID(), sst.id), SstView(ULID(), ghost))),)
    )
    with pytest.raises(KeyError) as e:
        build_handles(mem, DB, m, None)
    assert e.value.args == (ghost,)


def test_a_changed_run_reuses_the_handles_read_before(mem: ObjectStore) -> None:
    """A commit that changes a run (a view added) keeps the handles (and open readers) a read
    built in the previous state; a view never read is built when first read."""
    a, b, c = (_sst(mem, [(k, 1, 0)]) for k in (b"a", b"b", b"c"))
    va, vb, vc = (SstView(ULID(), s.id) for s in (a, b, c))
    m1 = Manifest(ssts=(a, b), compacted=(SortedRun(0, (va, vb)),))
    _, (r1,), h1 = build_handles(mem, DB, m1, None)
    assert r1.get(b"a") is not None
    ha = r1.known[(va.view_id, va.sst_id)]
    m2 = Manifest(ssts=(a, b, c), compacted=(SortedRun(0, (va, vb, vc)),))
    _, (r2,), h2 = build_handles(mem, DB, m2, None, h1)
    assert r2 is not r1 and r2.known == {}
    assert r2.get(b"a") is not None and r2.get(b"c") is not None
    assert r2.known[(va.view_id, va.sst_id)] is ha and ha._reader is not None
    assert isinstance(h2, dbstate.HandleMap) and h2.find((vc.view_id, vc.sst_id)) is not None
    # an unchanged run is the same handle, what it built kept
    _, (r3,), _ = build_handles(mem, DB, m2, None, h2)
    assert r3 is r2


def test_an_open_at_20k_ssts_builds_no_sst_handle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 42 goal 2: building a state of one 20k-SST run built 20k handles (paths, key
    ranges) before any read; now none, and a point read builds the one it reads."""
    built = []
    real = SstHandle.__init__

    def counting(self: SstHandle, *a: Any, **k: Any) -> None:
        built.append(1)
        real(self, *a, **k)

    monkeypatch.setattr(SstHandle, "__init__", counting)
    store = open_store("memory://")
    ssts = tuple(
        CompactedSst(ULID(), SstInfo(first_key=b"k%08d" % (2 * i), last_key=b"k%08d" % (2 * i + 1)))
        for i in range(20_000)
    )
    m = Manifest(ssts=ssts, compacted=(SortedRun(0, tuple(SstView(ULID(), s.id) for s in ssts)),))
    _, (run,), _ = build_handles(store, DB, m, None)
    assert len(built) == 0
    assert run.first_view(b"k%08d" % 501) == 250
    h = run.view(250)
    assert len(built) == 1 and h.sst is ssts[250] and h.path == resolve_sst_path(DB, m, ssts[250])
