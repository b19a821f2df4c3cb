"""Projection and union of manifests (SlateDB RFC 0004): pure functions, so every case is built by hand."""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from collections.abc import Iterable, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ulid import ULID

from slatedb_core.errors import InvalidArgument, UnionError
from slatedb_core.keys import BytesBound, BytesRange, KeyRange
from slatedb_core.lsm.dbstate import resolve_sst_path
from slatedb_core.manifest.model import (
    Checkpoint,
    CompactedSst,
    ExternalDb,
    Manifest,
    SortedRun,
    SstInfo,
    SstView,
)
from slatedb_core.manifest.projection import (
    UnionInput,
    effective_range,
    project_manifest,
    union_manifests,
)

Span = tuple[bytes | None, bytes | None]  # an SST's (first_key, last_key)

_counter = itertools.count(1)
_BASE = int(ULID.from_str("01J00000000000000000000000"))


def new_id() -> ULID:
    """Increasing ids, so tests can reason about ULID order."""
    return ULID.from_int(_BASE + next(_counter))


def sst(first: bytes | None, last: bytes | None, sst_id: ULID | None = None) -> CompactedSst:
    return CompactedSst(sst_id or new_id(), SstInfo(first_key=first, last_key=last))


def view_of(s: CompactedSst, visible: KeyRange | None = None) -> SstView:
    return SstView(s.id, s.id, None if visible is None else visible.to_bytes_range())


def make_manifest(
    l0: Sequence[Span] = (),
    runs: Sequence[tuple[int, Sequence[Span]]] = (),
    key_range: KeyRange | None = None,
    **fields: object,
) -> Manifest:
    """L0 views (newest first) and sorted runs of non-overlapping SSTs, one view per SST."""
    ssts: list[CompactedSst] = []

    def views(spans: Iterable[Span]) -> tuple[SstView, ...]:
        made = [sst(a, b) for a, b in spans]
        ssts.extend(made)
        return tuple(view_of(s) for s in made)

    m = Manifest(
        l0=views(l0),
        compacted=tuple(SortedRun(run_id, views(spans)) for run_id, spans in runs),
        key_range=None if key_range is None else key_range.to_bytes_range(),
    )
    return dataclasses.replace(m, ssts=tuple(ssts), **fields)  # type: ignore[arg-type]


def eff(m: Manifest, v: SstView) -> KeyRange:
    s = m.sst(v.sst_id)
    assert s is not None
    return effective_range(v, s)


def all_views(m: Manifest) -> list[SstView]:
    return [*m.l0, *(v for r in m.compacted for v in r.views)]


def physical(m: Manifest, sst_id: ULID) -> ULID:
    s = m.sst(sst_id)
    assert s is not None
    return s.original_id or s.id


def read_order(m: Manifest, key: bytes) -> list[tuple[str, ULID]]:
    """The SST files a read of ``key`` consults, in order (L0 newest first, then runs)."""
    out = [("l0", physical(m, v.sst_id)) for v in m.l0 if eff(m, v).contains(key)]
    for r in m.compacted:
        hits = [v for v in r.views if eff(m, v).contains(key)]
        assert len(hits) <= 1, "views of one sorted run overlap"
        out += [("sr", physical(m, v.sst_id)) for v in hits]
    return out


def split(points: Sequence[bytes]) -> list[KeyRange]:
    bounds: list[bytes | None] = [None, *points, None]
    return [KeyRange(a, b) for a, b in itertools.pairwise(bounds)]


def roundtrip(m: Manifest, points: Sequence[bytes], explicit: bool = True) -> Manifest:
    cp = uuid.uuid4()
    return union_manifests(
        [
            UnionInput(project_manifest(m, r), "db", cp, r if explicit else None)
            for r in split(points)
        ]
    )


def check_invariants(m: Manifest) -> None:
    views = all_views(m)
    assert len({v.view_id for v in views}) == len(views)
    assert len({r.id for r in m.compacted}) == len(m.compacted)
    assert {s.id for s in m.ssts} == {v.sst_id for v in views}
    assert len({s.id for s in m.ssts}) == len(m.ssts)
    for r in m.compacted:
        ranges = sorted((eff(m, v) for v in r.views), key=lambda k: k.start or b"")
        for a, b in itertools.pairwise(ranges):
            assert a.intersect(b).is_empty()


# --- projection -------------------------------------------------------------------------------


def test_projection_keeps_narrows_and_drops_l0_views() -> None:
    m = make_manifest(l0=[(b"a", b"c"), (b"b", b"k"), (b"m", b"p"), (b"e", b"f")])
    p = project_manifest(m, KeyRange(b"d", b"n"))
    kept = {p.sst(v.sst_id).info.first_key: eff(p, v) for v in p.l0}  # type: ignore[union-attr]
    assert kept == {
        b"b": KeyRange(b"d", b"k\x00"),
        b"m": KeyRange(b"m", b"n"),
        b"e": KeyRange(b"e", b"f\x00"),
    }
    assert [v.view_id for v in p.l0] == [m.l0[1].view_id, m.l0[2].view_id, m.l0[3].view_id]
    assert p.l0[0].visible_range == KeyRange(b"d", b"n").to_bytes_range()


def test_projection_bounds_sorted_run_views_by_next_start() -> None:
    # last keys unknown: each view can only own keys up to where the next view starts
    m = make_manifest(runs=[(0, [(b"a", None), (b"m", None)])])
    first, second = m.compacted[0].views
    left = project_manifest(m, KeyRange(b"f", b"h"))
    assert [v.view_id for v in left.compacted[0].views] == [first.view_id]
    right = project_manifest(m, KeyRange(b"p", b"q"))
    assert [v.view_id for v in right.compacted[0].views] == [second.view_id]
    both = project_manifest(m, KeyRange(b"k", b"n"))
    assert [v.view_id for v in both.compacted[0].views] == [first.view_id, second.view_id]


def test_projection_keeps_sorted_run_ids_with_gaps() -> None:
    m = make_manifest(
        runs=[
            (5, [(b"a", b"c"), (b"x", b"z")]),
            (4, [(b"x", b"z")]),
            (3, [(b"b", b"d")]),
            (2, [(b"w", b"y")]),
            (1, [(b"a", b"z")]),
        ]
    )
    p = project_manifest(m, KeyRange(None, b"m"))
    assert [r.id for r in p.compacted] == [5, 3, 1]
    assert len(p.compacted[0].views) == 1


def test_projection_prunes_ssts_and_external_dbs() -> None:
    m = make_manifest(l0=[(b"a", b"b"), (b"c", b"d"), (b"x", b"y")])
    a, c, x = (s.id for s in m.ssts)
    ext = (
        ExternalDb("p1", uuid.uuid4(), uuid.uuid4(), (a, x)),
        ExternalDb("p2", uuid.uuid4(), uuid.uuid4(), (x,)),
    )
    m = dataclasses.replace(m, external_dbs=ext)
    p = project_manifest(m, KeyRange(None, b"e"))
    assert {s.id for s in p.ssts} == {a, c}
    assert p.external_dbs == (dataclasses.replace(ext[0], sst_ids=(a,)),)


def test_projection_narrows_key_range_and_never_widens_it() -> None:
    m = make_manifest(l0=[(b"a", b"z")])
    p = project_manifest(project_manifest(m, KeyRange(b"a", b"z")), KeyRange(b"0", b"m"))
    assert KeyRange.of(p.key_range) == KeyRange(b"a", b"m")
    assert eff(p, p.l0[0]) == KeyRange(b"a", b"m")
    wider = project_manifest(p, KeyRange(None, None))
    assert wider.key_range == p.key_range
    assert wider.l0[0].visible_range == p.l0[0].visible_range


def test_projection_keeps_exact_bounds_when_nothing_narrows() -> None:
    inclusive = BytesRange(BytesBound.included(b"b"), BytesBound.included(b"k"))
    m = make_manifest(l0=[(b"a", b"z")])
    m = dataclasses.replace(
        m, l0=(dataclasses.replace(m.l0[0], visible_range=inclusive),), key_range=inclusive
    )
    p = project_manifest(m, KeyRange(b"a", b"x"))
    assert p.l0[0].visible_range == inclusive
    assert p.key_range == inclusive
    assert project_manifest(make_manifest(l0=[(b"a", b"b")]), KeyRange()).key_range is None


def test_projection_leaves_epochs_and_wal_fields_and_drops_checkpoints() -> None:
    cp = Checkpoint(uuid.uuid4(), manifest_id=3, create_time_s=1)
    m = make_manifest(
        l0=[(b"a", b"b")],
        writer_epoch=7,
        compactor_epoch=4,
        replay_after_wal_id=9,
        wal_id_last_seen=9,
        next_wal_sst_id=10,
        last_l0_seq=77,
        checkpoints=(cp,),
    )
    p = project_manifest(m, KeyRange(b"a", b"c"))
    assert p.checkpoints == ()
    untouched = dataclasses.replace(p, checkpoints=m.checkpoints, l0=m.l0, key_range=m.key_range)
    assert untouched == m


def test_projection_onto_an_empty_range_keeps_nothing() -> None:
    m = make_manifest(l0=[(b"a", b"z")], runs=[(0, [(b"a", b"z")])])
    p = project_manifest(m, KeyRange(b"q", b"q"))
    assert (p.l0, p.compacted, p.ssts) == ((), (), ())


# --- union ------------------------------------------------------------------------------------


def sample_manifest() -> Manifest:
    return make_manifest(
        l0=[(b"a", b"z"), (b"c", b"h"), (b"p", b"r")],
        runs=[
            (7, [(b"a", b"e"), (b"f", b"q"), (b"r", b"w")]),
            (3, [(b"b", b"y")]),
            (0, [(b"a", b"c"), (b"d", b"f"), (b"g", b"k"), (b"l", b"t"), (b"u", b"z")]),
        ],
        key_range=KeyRange(b"a", b"zz"),
        last_l0_seq=40,
    )


def tiles(ranges: Sequence[KeyRange]) -> KeyRange:
    """The single range that adjacent ``ranges`` cover."""
    ordered = sorted(ranges, key=lambda r: r.start or b"")
    for a, b in itertools.pairwise(ordered):
        assert a.end == b.start, f"pieces {a} and {b} leave a gap or overlap"
    return KeyRange(ordered[0].start, ordered[-1].end)


def test_union_of_projections_restores_views_and_key_range() -> None:
    m = sample_manifest()
    u = roundtrip(m, [b"d", b"k", b"s"])
    check_invariants(u)
    assert u.key_range == m.key_range
    for level, before, after in [("l0", m.l0, u.l0)] + [
        (f"run {r.id}", r.views, u.compacted[i].views) for i, r in enumerate(m.compacted)
    ]:
        pieces: dict[ULID, list[KeyRange]] = {}
        for v in after:
            pieces.setdefault(v.sst_id, []).append(eff(u, v))
        assert {v.sst_id: eff(m, v) for v in before} == {
            i: tiles(rs) for i, rs in pieces.items()
        }, level
    assert [r.id for r in u.compacted] == [2, 1, 0]  # one run per original tier, renumbered
    assert u.last_l0_seq == 40
    assert {s.id for s in u.ssts} == {s.id for s in m.ssts}


def test_union_result_is_a_fresh_uninitialized_database() -> None:
    a = make_manifest(
        l0=[(b"a", b"b")],
        writer_epoch=3,
        compactor_epoch=2,
        last_l0_seq=5,
        replay_after_wal_id=4,
        wal_id_last_seen=4,
        next_wal_sst_id=5,
    )
    b = make_manifest(l0=[(b"x", b"y")], writer_epoch=9, last_l0_seq=11)
    u = union_manifests([UnionInput(a, "a", uuid.uuid4()), UnionInput(b, "b", uuid.uuid4())])
    assert (u.writer_epoch, u.compactor_epoch, u.initialized, u.checkpoints) == (0, 0, False, ())
    assert (u.replay_after_wal_id, u.wal_id_last_seen, u.next_wal_sst_id) == (0, 0, 1)
    assert u.last_l0_seq == 11
    assert u.key_range is None  # neither source declared a range: all keys
    assert [v.sst_id for v in u.l0] == [a.ssts[0].id, b.ssts[0].id]


def test_union_refuses_overlapping_inputs_naming_both() -> None:
    a = make_manifest(l0=[(b"a", b"k")])
    b = make_manifest(l0=[(b"j", b"z")])
    with pytest.raises(UnionError, match=r"'left'.*'right'|'right'.*'left'"):
        union_manifests([UnionInput(a, "left", uuid.uuid4()), UnionInput(b, "right", uuid.uuid4())])
    declared = dataclasses.replace(b, key_range=KeyRange(b"k", None).to_bytes_range())
    with pytest.raises(UnionError, match="overlap"):  # a's data reaches k
        union_manifests([UnionInput(a, "l", uuid.uuid4()), UnionInput(declared, "r", uuid.uuid4())])
    assert issubclass(UnionError, InvalidArgument)


def test_union_refuses_non_adjacent_or_partial_explicit_ranges() -> None:
    a = make_manifest(l0=[(b"a", b"c")])
    b = make_manifest(l0=[(b"x", b"y")])
    with pytest.raises(UnionError, match="not adjacent"):
        union_manifests(
            [
                UnionInput(a, "a", uuid.uuid4(), KeyRange(b"a", b"m")),
                UnionInput(b, "b", uuid.uuid4(), KeyRange(b"n", None)),
            ]
        )
    with pytest.raises(UnionError, match="every union input or for none"):
        union_manifests(
            [
                UnionInput(a, "a", uuid.uuid4(), KeyRange(b"a", b"m")),
                UnionInput(b, "b", uuid.uuid4()),
            ]
        )
    with pytest.raises(UnionError, match="at least one"):
        union_manifests([])


def test_union_cuts_inputs_to_their_explicit_ranges() -> None:
    a = make_manifest(l0=[(b"a", b"p")])
    b = make_manifest(l0=[(b"k", b"z")])
    u = union_manifests(
        [
            UnionInput(b, "b", uuid.uuid4(), KeyRange(b"m", None)),
            UnionInput(a, "a", uuid.uuid4(), KeyRange(None, b"m")),
        ]
    )
    assert [eff(u, v) for v in u.l0] == [KeyRange(b"a", b"m"), KeyRange(b"m", b"z\x00")]
    assert u.key_range is None  # the explicit ranges cover every key


def test_union_key_range_is_the_hull_of_declared_ranges() -> None:
    a = make_manifest(l0=[(b"a", b"b")], key_range=KeyRange(b"a", b"c"))
    b = make_manifest(l0=[(b"x", b"y")], key_range=KeyRange(b"p", b"z"))
    u = union_manifests([UnionInput(a, "a", uuid.uuid4()), UnionInput(b, "b", uuid.uuid4())])
    assert KeyRange.of(u.key_range) == KeyRange(b"a", b"z")
    free = dataclasses.replace(b, key_range=None)
    u = union_manifests([UnionInput(a, "a", uuid.uuid4()), UnionInput(free, "b", uuid.uuid4())])
    assert u.key_range is None


@pytest.mark.parametrize(
    ("replayed", "seen", "next_id"),
    [(3, 5, 4), (3, 3, 6)],  # a WAL SST past the flushed one is known / was allocated
)
def test_union_refuses_input_with_uncompacted_wal(replayed: int, seen: int, next_id: int) -> None:
    good = make_manifest(
        l0=[(b"a", b"b")], replay_after_wal_id=8, wal_id_last_seen=8, next_wal_sst_id=9
    )
    bad = make_manifest(
        l0=[(b"x", b"y")],
        replay_after_wal_id=replayed,
        wal_id_last_seen=seen,
        next_wal_sst_id=next_id,
    )
    with pytest.raises(UnionError, match=r"'bad'.*WAL"):
        union_manifests(
            [UnionInput(good, "good", uuid.uuid4()), UnionInput(bad, "bad", uuid.uuid4())]
        )


def test_union_refuses_uninitialized_input() -> None:
    m = make_manifest(l0=[(b"a", b"b")], initialized=False)
    with pytest.raises(UnionError, match="not initialized"):
        union_manifests([UnionInput(m, "a", uuid.uuid4())])


def test_union_renames_clashing_sst_ids_and_keeps_original_id() -> None:
    early = sst(b"x", b"x")  # written before the clashing id: keeps its id
    shared, later = new_id(), new_id()
    a_ssts = (sst(b"a", b"c", shared),)
    a = Manifest(ssts=a_ssts, l0=(view_of(a_ssts[0]),))
    b_ssts = (early, sst(b"p", b"r", shared), sst(b"s", b"t", later))
    b = Manifest(
        ssts=b_ssts,
        l0=(view_of(early),),
        compacted=(SortedRun(0, (view_of(b_ssts[1]), view_of(b_ssts[2]))),),
    )
    u = union_manifests([UnionInput(b, "dbb", uuid.uuid4()), UnionInput(a, "dba", uuid.uuid4())])
    check_invariants(u)
    by_file = {(s.original_id or s.id, resolve_sst_path("u", u, s)) for s in u.ssts}
    assert by_file == {
        (shared, "dba/compacted/" + str(shared) + ".sst"),
        (shared, "dbb/compacted/" + str(shared) + ".sst"),
        (later, "dbb/compacted/" + str(later) + ".sst"),
        (early.id, "dbb/compacted/" + str(early.id) + ".sst"),
    }
    renamed = [s for s in u.ssts if s.original_id is not None]
    assert {s.original_id for s in renamed} == {shared, later}  # the clash and the SST after it
    assert u.sst(early.id) is not None  # older than the clash: id kept
    first, second = sorted(renamed, key=lambda s: s.id)
    assert (first.original_id, second.original_id) == (shared, later)  # ULID order kept
    assert first.id > later
    run_files = [physical(u, v.sst_id) for v in u.compacted[0].views]
    assert run_files == [shared, later]
    assert resolve_sst_path("u", u, u.sst(u.compacted[0].views[0].sst_id)).startswith("dbb/")  # type: ignore[arg-type]


def test_union_shares_one_sst_named_by_several_inputs() -> None:
    m = make_manifest(l0=[(b"a", b"z")])
    u = roundtrip(m, [b"h", b"p"])
    assert len(u.ssts) == 1 and len(u.l0) == 3
    assert all(s.original_id is None for s in u.ssts)
    assert len({v.view_id for v in u.l0}) == 3  # pieces of one view get distinct view ids


def test_union_dedupes_external_dbs_and_issues_new_final_checkpoints() -> None:
    m = make_manifest(l0=[(b"a", b"c"), (b"d", b"f"), (b"x", b"y")])
    a, d, x = (s.id for s in m.ssts)
    cp1, cp2 = uuid.uuid4(), uuid.uuid4()
    old = ExternalDb("parent", cp1, uuid.uuid4(), (a, d))
    m = dataclasses.replace(m, external_dbs=(old, ExternalDb("parent", cp2, uuid.uuid4(), (x,))))
    u = union_manifests(
        [UnionInput(project_manifest(m, r), "db", uuid.uuid4(), r) for r in split([b"b", b"e"])]
    )
    entries = {(e.path, e.source_checkpoint_id): e for e in u.external_dbs}
    assert set(entries) == {("parent", cp1), ("parent", cp2)}  # "db" owns nothing referenced
    assert set(entries["parent", cp1].sst_ids) == {a, d}
    assert entries["parent", cp2].sst_ids == (x,)
    finals = {e.final_checkpoint_id for e in u.external_dbs}
    assert len(finals) == 2 and not finals & {e.final_checkpoint_id for e in m.external_dbs}


def test_union_records_each_source_with_its_owned_ssts() -> None:
    a = make_manifest(l0=[(b"a", b"b"), (b"c", b"d")])
    ext_id = a.ssts[1].id
    cp = uuid.uuid4()
    a = dataclasses.replace(a, external_dbs=(ExternalDb("grand", cp, uuid.uuid4(), (ext_id,)),))
    b = make_manifest(runs=[(0, [(b"x", b"y")])])
    ca, cb = uuid.uuid4(), uuid.uuid4()
    u = union_manifests([UnionInput(a, "a", ca), UnionInput(b, "b", cb)])
    got = {(e.path, e.source_checkpoint_id): e.sst_ids for e in u.external_dbs}
    assert got == {("grand", cp): (ext_id,), ("a", ca): (a.ssts[0].id,), ("b", cb): (b.ssts[0].id,)}
    assert all(e.final_checkpoint_id is not None for e in u.external_dbs)
    assert resolve_sst_path("u", u, u.sst(ext_id)).startswith("grand/")  # type: ignore[arg-type]


def test_union_merges_runs_of_one_tier_and_keeps_each_sources_order() -> None:
    a = make_manifest(runs=[(5, [(b"a", b"b")]), (3, [(b"a", b"c")]), (1, [(b"a", b"d")])])
    b = make_manifest(runs=[(5, [(b"x", b"y")]), (1, [(b"w", b"z")])])
    u = union_manifests([UnionInput(a, "a", uuid.uuid4()), UnionInput(b, "b", uuid.uuid4())])
    shape = [[u.sst(v.sst_id).info.first_key for v in r.views] for r in u.compacted]  # type: ignore[union-attr]
    assert shape == [[b"a", b"x"], [b"a"], [b"a", b"w"]]
    assert [r.id for r in u.compacted] == [2, 1, 0]
    # ids in conflicting orders: fall back to aligning runs by depth from the oldest
    c = make_manifest(runs=[(1, [(b"m", b"n")]), (5, [(b"m", b"o")]), (9, [(b"m", b"p")])])
    u = union_manifests([UnionInput(a, "a", uuid.uuid4()), UnionInput(c, "c", uuid.uuid4())])
    shape = [[u.sst(v.sst_id).info.last_key for v in r.views] for r in u.compacted]  # type: ignore[union-attr]
    assert shape == [[b"b", b"n"], [b"c", b"o"], [b"d", b"p"]]


# --- project/union cycles ---------------------------------------------------------------------


def clone_shard(parent: Manifest, parent_path: str, cp: uuid.UUID, r: KeyRange) -> Manifest:
    """What a projected clone holds: the projection plus an entry for the parent's own SSTs."""
    p = project_manifest(parent, r)
    listed = {i for e in p.external_dbs for i in e.sst_ids}
    owned = tuple(s.id for s in p.ssts if s.id not in listed)
    entry = (ExternalDb(parent_path, cp, uuid.uuid4(), owned),) if owned else ()
    return dataclasses.replace(p, external_dbs=(*p.external_dbs, *entry))


def test_project_union_cycles_keep_external_dbs_constant() -> None:
    m = sample_manifest()
    ancestor = ExternalDb("ancestor", uuid.uuid4(), uuid.uuid4(), (m.ssts[0].id, m.ssts[4].id))
    m = dataclasses.replace(m, external_dbs=(ancestor,))
    files = {s.id: resolve_sst_path("root", m, s) for s in m.ssts}
    ranges = split([b"d", b"k", b"s"])
    path, counts = "root", []
    for cycle in range(10):
        cp = uuid.uuid4()
        shards = [
            UnionInput(clone_shard(m, path, cp, r), f"c{cycle}/s{i}", uuid.uuid4(), r)
            for i, r in enumerate(ranges)
        ]
        m, path = union_manifests(shards), f"c{cycle}/u"
        m = dataclasses.replace(m, initialized=True)
        check_invariants(m)
        counts.append(len(m.external_dbs))
        assert {s.id: resolve_sst_path(path, m, s) for s in m.ssts} == files
        assert len(m.compacted) == 3
    assert counts == [2] * 10  # the ancestor and the root, never one per shard per cycle


def test_project_union_cycles_from_one_database_do_not_grow() -> None:
    m = sample_manifest()
    base = dataclasses.replace(
        m, external_dbs=(ExternalDb("ancestor", uuid.uuid4(), uuid.uuid4(), (m.ssts[2].id,)),)
    )
    m = base
    counts = []
    for _ in range(10):
        m = dataclasses.replace(roundtrip(m, [b"c", b"j", b"q"]), initialized=True)
        counts.append((len(m.external_dbs), len(m.ssts), len(m.compacted)))
    assert counts == [(2, len(base.ssts), 3)] * 10


# --- property: project into k parts, union back ---------------------------------------------

KEYS = [bytes([c]) for c in b"abcdefgh"] + [bytes([c, d]) for c in b"aceg" for d in b"bdf"]
PROBES = sorted({b"", *KEYS, *(k + b"\x00" for k in KEYS), b"z"})
key = st.sampled_from(KEYS)
maybe_key = st.none() | key


@st.composite
def ranges(draw: st.DrawFn) -> KeyRange:
    a, b = draw(maybe_key), draw(maybe_key)
    if a is not None and b is not None and b < a:
        a, b = b, a
    return KeyRange(a, b)


@st.composite
def manifests(draw: st.DrawFn) -> Manifest:
    ssts: list[CompactedSst] = []

    def views(spans: Sequence[tuple[bytes, bytes]]) -> tuple[SstView, ...]:
        out = []
        for first, last in spans:
            s = sst(first, last)
            ssts.append(s)
            out.append(view_of(s, draw(st.none() | ranges())))
        return tuple(out)

    l0_spans = [
        tuple(sorted(draw(st.lists(key, min_size=2, max_size=2))))
        for _ in range(draw(st.integers(0, 4)))
    ]
    run_ids = sorted(draw(st.sets(st.integers(0, 9), max_size=3)), reverse=True)
    runs = []
    for run_id in run_ids:
        bounds = sorted(draw(st.sets(key, min_size=1, max_size=8)))
        spans = [
            (bounds[i], bounds[i + 1] if i + 1 < len(bounds) else bounds[i])
            for i in range(0, len(bounds), 2)
        ]
        runs.append(SortedRun(run_id, views(spans)))
    l0 = views(l0_spans)  # type: ignore[arg-type]
    kr = draw(st.none() | ranges())
    return Manifest(
        ssts=tuple(ssts),
        l0=l0,
        compacted=tuple(runs),
        key_range=None if kr is None else kr.to_bytes_range(),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(manifests(), st.sets(key, min_size=1, max_size=4), st.booleans())
def test_project_then_union_reads_the_same_files_for_every_key(
    m: Manifest, points: set[bytes], explicit: bool
) -> None:
    u = roundtrip(m, sorted(points), explicit)
    check_invariants(u)
    held = KeyRange.of(m.key_range)  # union may drop data a manifest holds outside its key_range
    for k in filter(held.contains, PROBES):
        assert read_order(u, k) == read_order(m, k), k
    if held.is_empty():
        assert KeyRange.of(u.key_range).is_empty()
    else:
        assert KeyRange.of(u.key_range) == held


def read_files(m: Manifest, path: str, key: bytes) -> list[tuple[str, str]]:
    """Like ``read_order`` but naming each file by where path resolution finds it."""
    out = []
    for level, views in [("l0", m.l0), *(("sr", r.views) for r in m.compacted)]:
        for v in views:
            s = m.sst(v.sst_id)
            assert s is not None
            if effective_range(v, s).contains(key):
                out.append((level, resolve_sst_path(path, m, s)))
    return out


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(manifests(), st.sets(key, min_size=1, max_size=4))
def test_union_of_databases_with_clashing_ids_reads_each_sources_files(
    m: Manifest, points: set[bytes]
) -> None:
    # every part at its own path: an SST spanning parts is a different file in each (id clash)
    parts = [(project_manifest(m, r), f"db{i}", r) for i, r in enumerate(split(sorted(points)))]
    u = union_manifests([UnionInput(p, path, uuid.uuid4(), r) for p, path, r in parts])
    check_invariants(u)
    for k in PROBES:
        p, path, _ = next(x for x in parts if x[2].contains(k))
        assert read_files(u, "u", k) == read_files(p, path, k), k


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(manifests(), st.sets(key, min_size=1, max_size=4), st.sets(key, min_size=1, max_size=4))
def test_reunion_of_a_union_with_renamed_ssts_reads_the_same_files(
    m: Manifest, first: set[bytes], second: set[bytes]
) -> None:
    parts = [(project_manifest(m, r), f"db{i}", r) for i, r in enumerate(split(sorted(first)))]
    u1 = union_manifests([UnionInput(p, path, uuid.uuid4(), r) for p, path, r in parts])
    u1 = dataclasses.replace(u1, initialized=True)
    cp = uuid.uuid4()
    shards = [
        UnionInput(clone_shard(u1, "u1", cp, r), f"e{i}", uuid.uuid4(), r)
        for i, r in enumerate(split(sorted(second)))
    ]
    u2 = union_manifests(shards)
    check_invariants(u2)
    for k in PROBES:
        assert read_files(u2, "u2", k) == read_files(u1, "u1", k), k
