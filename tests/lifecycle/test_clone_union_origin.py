"""Clones and unions recognise their own destination by its origin record (SlateDB RFC 0004,
"Clones", "Union"; slatedb_core.lifecycle.origin): a re-run finishes or returns what it made,
even after GC detached its parent or collected its manifest 1, and a destination that holds
another database is refused untouched."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from slatedb_core.checkpoints import create_checkpoint
from slatedb_core.cli.main import cli
from slatedb_core.cli.read import register
from slatedb_core.compactor import run_compaction_once
from slatedb_core.errors import CorruptionError, ObjectNotFound, SlateDBError
from slatedb_core.gc import run_gc_once
from slatedb_core.keys import KeyRange
from slatedb_core.lifecycle.clone import CloneConflict, create_clone
from slatedb_core.lifecycle.union import UnionSource, create_union
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import (
    CheckpointOptions,
    CompactorOptions,
    GarbageCollectorOptions,
)
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultRule, FaultyStore
from slatedb_core.writer.db import Db
from tests.lifecycle.lifecycle_steps import OPTS, content, key

register(cli)


def make_db(store: ObjectStore, path: str, lo: int = 0, hi: int = 100, tag: bytes = b"v") -> None:
    """Keys [lo, hi) flushed to L0 (nothing left only in the WAL)."""
    with Db.open(path, store, OPTS) as db:
        for i in range(lo, hi):
            db.put(key(i), tag + b"%d" % i, await_durable=False)
        db.flush_memtable()


# ---- items 9 and 13: is the database at the destination this clone / union? -----------------
GC = GarbageCollectorOptions(min_age=timedelta(0), db_delete_grace=timedelta(0))


def manifests(store: ObjectStore, path: str) -> list[int]:
    return [e.id for e in ManifestStore(store, path).list()]


def collect_manifest_1(store: ObjectStore, path: str) -> None:
    """Commit past manifest 1 (open a writer twice), then GC with min_age 0 until it is gone."""
    for _ in range(2):
        Db.open(path, store, OPTS).close()
    for _ in range(3):
        run_gc_once(path, store, GC)
    assert 1 not in manifests(store, path)


def detached_clone(store: ObjectStore, checkpoint: uuid.UUID | None = None) -> None:
    """'clone' of 'parent' whose own compaction replaced every SST of the parent; GC has
    detached it (final checkpoint and external_dbs entry gone) and collected its manifest 1."""
    make_db(store, "parent", 0, 50)
    create_clone("clone", "parent", store, checkpoint)
    with Db.open("clone", store, OPTS) as db:
        db.put(key(99), b"own")
        db.flush_memtable()
    run_compaction_once("clone", store, CompactorOptions(l0_trigger=1))
    collect_manifest_1(store, "clone")
    m = ManifestStore(store, "clone").read_latest().manifest
    assert m.external_dbs == ()  # detached
    assert "clone:clone" not in names(store, "parent")  # its final checkpoint released


def read_origin(store: ObjectStore, path: str) -> bytes | None:
    """The raw origin record of ``path`` (slatedb_core.lifecycle.origin), None if there is none."""
    try:
        return store.get(f"{path}/clone.origin").data
    except ObjectNotFound:
        return None


def manifest_of(store: ObjectStore, path: str) -> Manifest:
    return ManifestStore(store, path).read_latest().manifest


def names(store: ObjectStore, path: str) -> list[str | None]:
    return [cp.name for cp in manifest_of(store, path).checkpoints]


@pytest.fixture
def sources() -> ObjectStore:
    """'a' holds k000..k049, 'b' k050..k099, 'c' k100..k149; all flushed."""
    store = open_store("memory://")
    make_db(store, "a", 0, 50)
    make_db(store, "b", 50, 100)
    make_db(store, "c", 100, 150)
    return store


AB = [UnionSource("a"), UnionSource("b")]


def refused_untouched(store: ObjectStore, dest: str, srcs: list[UnionSource]) -> None:
    """create_union(dest, srcs) raises CloneConflict and changes nothing anywhere."""

    def state() -> dict[str, tuple[list[int], list[uuid.UUID]]]:
        return {
            p: (manifests(store, p), [cp.id for cp in manifest_of(store, p).checkpoints])
            for p in (dest, "a", "b", "c")
        }

    before = state()
    origin = read_origin(store, dest)
    with pytest.raises(CloneConflict):
        create_union(dest, srcs, store)
    assert state() == before  # no ephemeral or final checkpoint taken, nothing committed
    assert read_origin(store, dest) == origin


def refused_untouched_but_ephemeral(dest: str, store: ObjectStore, srcs: list[UnionSource]) -> None:
    before = manifests(store, dest)
    with pytest.raises(CloneConflict):
        create_union(dest, srcs, store)
    assert manifests(store, dest) == before and read_origin(store, dest) is None


def test_rerun_of_a_finished_clone_after_gc_detached_its_parent_returns_it() -> None:
    """Found by the review of RELIABILITY.md findings 9, 10, 13 (was test_review_union_clone_reader.py)."""
    store = open_store("memory://")
    detached_clone(store)
    latest = ManifestStore(store, "clone").read_latest()
    parent = ManifestStore(store, "parent").read_latest()
    assert create_clone("clone", "parent", store) == latest.manifest
    assert ManifestStore(store, "clone").read_latest().id == latest.id  # nothing committed
    assert ManifestStore(store, "parent").read_latest() == parent  # no checkpoint taken


def test_rerun_of_a_detached_clone_at_its_checkpoint_and_at_another() -> None:
    """Found by the review of RELIABILITY.md findings 9, 10, 13 (was test_review_union_clone_reader.py)."""
    store = open_store("memory://")
    make_db(store, "parent", 0, 50)
    cp = create_checkpoint("parent", store, CheckpointOptions()).id
    other = create_checkpoint("parent", store, CheckpointOptions()).id
    create_clone("clone", "parent", store, cp)
    with Db.open("clone", store, OPTS) as db:
        db.put(key(99), b"own")
        db.flush_memtable()
    run_compaction_once("clone", store, CompactorOptions(l0_trigger=1))
    collect_manifest_1(store, "clone")
    assert ManifestStore(store, "clone").read_latest().manifest.external_dbs == ()
    assert create_clone("clone", "parent", store, cp).initialized
    with pytest.raises(CloneConflict, match="cloned at checkpoint"):
        create_clone("clone", "parent", store, other)


def test_a_detached_clone_path_still_refuses_what_it_is_not() -> None:
    """Found by the review of RELIABILITY.md findings 9, 10, 13 (was test_review_union_clone_reader.py)."""
    store = open_store("memory://")
    detached_clone(store)
    make_db(store, "other", 0, 10)
    before = manifests(store, "clone")
    other = manifests(store, "other")
    with pytest.raises(CloneConflict, match="is a clone of 'parent'"):
        create_clone("clone", "other", store)
    with pytest.raises(CloneConflict, match="not within"):
        create_clone("clone", "parent", store, projection=KeyRange(key(0), key(10)))
    with pytest.raises(CloneConflict):
        create_union("clone", [UnionSource("parent")], store)
    assert manifests(store, "clone") == before
    assert manifests(store, "other") == other  # no checkpoint taken there


def test_clone_refuses_a_union_that_references_the_parent() -> None:
    """Found by the review of RELIABILITY.md findings 9, 10, 13 (was test_review_union_clone_reader.py)."""
    store = open_store("memory://")
    make_db(store, "parent", 0, 50)
    make_db(store, "other", 50, 100)
    create_union("dest", [UnionSource("parent"), UnionSource("other")], store)
    assert any(e.path == "parent" for e in manifest_of(store, "dest").external_dbs)
    with pytest.raises(CloneConflict, match="union"):
        create_clone("dest", "parent", store)


def test_clone_refuses_an_ordinary_database_whose_manifest_1_was_collected() -> None:
    """Found by the review of RELIABILITY.md findings 9, 10, 13 (was test_review_union_clone_reader.py)."""
    store = open_store("memory://")
    make_db(store, "parent", 0, 50)
    make_db(store, "plain", 0, 10)
    collect_manifest_1(store, "plain")
    with pytest.raises(CloneConflict):
        create_clone("plain", "parent", store)
    assert read_origin(store, "plain") is None


def test_union_refuses_an_ordinary_database_whose_manifest_1_was_collected(
    sources: ObjectStore,
) -> None:
    """Found by the review of RELIABILITY.md findings 9, 10, 13 (was test_review_union_clone_reader.py)."""
    make_db(sources, "dest", 200, 210)
    collect_manifest_1(sources, "dest")
    refused_untouched(sources, "dest", AB)


def test_union_refuses_a_clone_of_something_else(sources: ObjectStore) -> None:
    """Found by the review of RELIABILITY.md findings 9, 10, 13 (was test_review_union_clone_reader.py)."""
    create_clone("dest", "c", sources)
    before = {p: manifests(sources, p) for p in ("dest", "a", "b", "c")}
    with pytest.raises(CloneConflict, match="clone of 'c'"):
        create_union("dest", AB, sources)
    assert {p: manifests(sources, p) for p in ("dest", "a", "b", "c")} == before


def test_union_refuses_an_unfinished_clone_of_one_of_its_sources(sources: ObjectStore) -> None:
    """A clone of 'a' interrupted before its final checkpoints: born uninitialized like a union,
    naming 'a' in external_dbs, and still not this union.

    Found by the review of RELIABILITY.md findings 9, 10, 13 (was test_review_union_clone_reader.py)."""
    faulty = FaultyStore(sources)  # the commit of initialized=True always fails
    faulty.add_rule(
        FaultRule(op="put_if_absent", path_glob="dest/manifest/*2.manifest", fail_before=1.0)
    )
    with pytest.raises(SlateDBError):
        create_clone("dest", "a", faulty)
    assert not manifest_of(sources, "dest").initialized
    with pytest.raises(CloneConflict, match="clone of 'a'"):
        create_union("dest", AB, sources)


def test_union_refuses_a_union_of_other_sources_or_ranges(sources: ObjectStore) -> None:
    """Found by the review of RELIABILITY.md findings 9, 10, 13 (was test_review_union_clone_reader.py)."""
    create_union("ac", [UnionSource("a"), UnionSource("c")], sources)
    refused_untouched(sources, "ac", AB)
    ranged = [
        UnionSource("a", range=KeyRange(None, key(50))),
        UnionSource("b", range=KeyRange(key(50), None)),
    ]
    create_union("ab", ranged, sources)
    other = [
        UnionSource("a", range=KeyRange(None, key(60))),
        UnionSource("b", range=KeyRange(key(60), None)),
    ]
    with pytest.raises(CloneConflict, match="other ranges"):
        create_union("ab", other, sources)
    with pytest.raises(CloneConflict):
        create_union("ab", AB, sources)  # the same sources without their ranges: another union
    assert create_union("ab", list(reversed(ranged)), sources).initialized  # order is no matter


def test_union_rerun_after_gc_collected_its_manifest_1_and_detached_a_source(
    sources: ObjectStore,
) -> None:
    """Found by the review of RELIABILITY.md findings 9, 10, 13 (was test_review_union_clone_reader.py)."""
    m = create_union("dest", AB, sources)
    assert read_origin(sources, "dest") is not None
    with Db.open("dest", sources, OPTS) as db:
        db.put(key(200), b"own")
        db.flush_memtable()
    run_compaction_once("dest", sources, CompactorOptions(l0_trigger=1))
    collect_manifest_1(sources, "dest")
    assert manifest_of(sources, "dest").external_dbs == ()  # both sources detached
    assert create_union("dest", AB, sources) == manifest_of(sources, "dest")
    assert m.initialized
    with pytest.raises(CloneConflict):
        create_union("dest", [UnionSource("a"), UnionSource("c")], sources)


def test_union_interrupted_before_its_origin_record_is_recognised_by_manifest_1(
    sources: ObjectStore,
) -> None:
    """A crash right after manifest 1: no record yet. The re-run recognises its manifest 1 by
    the final checkpoint ids (derived from the request), finishes and writes the record; another
    request is refused.

    Found by the review of RELIABILITY.md findings 9, 10, 13 (was test_review_union_clone_reader.py)."""
    faulty = FaultyStore(sources)
    faulty.add_rule(FaultRule(op="put_if_absent", path_glob="dest/clone.origin", fail_before=1.0))
    with pytest.raises(SlateDBError):
        create_union("dest", AB, faulty)
    assert read_origin(sources, "dest") is None
    assert not manifest_of(sources, "dest").initialized
    refused_untouched_but_ephemeral("dest", sources, [UnionSource("a"), UnionSource("c")])
    refused_untouched_but_ephemeral("dest", sources, [UnionSource("a")])
    assert create_union("dest", AB, sources).initialized
    assert read_origin(sources, "dest") is not None
    assert content(sources, "dest") == {key(i): b"v%d" % i for i in range(100)}


def test_clone_interrupted_before_its_origin_record_finishes_on_rerun() -> None:
    """Found by the review of RELIABILITY.md findings 9, 10, 13 (was test_review_union_clone_reader.py)."""
    store = open_store("memory://")
    make_db(store, "parent", 0, 50)
    make_db(store, "other", 0, 10)
    faulty = FaultyStore(store)
    faulty.add_rule(FaultRule(op="put_if_absent", path_glob="clone/clone.origin", fail_before=1.0))
    with pytest.raises(SlateDBError):
        create_clone("clone", "parent", faulty)
    assert read_origin(store, "clone") is None
    with pytest.raises(CloneConflict):
        create_clone("clone", "other", store)
    assert create_clone("clone", "parent", store).initialized
    assert read_origin(store, "clone") is not None
    with pytest.raises(CloneConflict, match="is a clone of 'parent'"):
        create_clone("clone", "other", store)


def test_a_damaged_origin_record_is_a_corruption_error(sources: ObjectStore) -> None:
    """Found by the review of RELIABILITY.md findings 9, 10, 13 (was test_review_union_clone_reader.py)."""
    create_union("dest", AB, sources)
    data = bytearray(sources.get("dest/clone.origin").data)
    data[-8] ^= 0xFF
    sources.delete("dest/clone.origin")
    sources.put("dest/clone.origin", bytes(data))
    with pytest.raises(CorruptionError, match=r"clone\.origin"):
        create_union("dest", AB, sources)
