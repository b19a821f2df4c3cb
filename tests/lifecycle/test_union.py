"""Union of databases (SlateDB RFC 0004, "Manifest Projection and Union"): shards made by projected clones
merge back into one database, with the same re-run guarantees as a clone."""

from __future__ import annotations

import itertools
import uuid
from datetime import timedelta

import pytest

from slatedb_core.checkpoints import create_checkpoint
from slatedb_core.compactor import run_compaction_once
from slatedb_core.errors import DatabaseNotInitialized, SlateDBError, UnionError
from slatedb_core.keys import KeyRange
from slatedb_core.lifecycle.clone import CloneConflict, SourceCheckpointLost, create_clone
from slatedb_core.lifecycle.union import UnionSource, create_union
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import (
    CheckpointOptions,
    CompactorOptions,
    DbOptions,
)
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.testing import FaultRule, FaultyStore
from slatedb_core.writer.db import Db
from tests.lifecycle.lifecycle_steps import OPTS, content, key, manifest, memory

BOUNDS: list[bytes | None] = [None, b"k025", b"k050", b"k075", None]


def make_db(store: ObjectStore, path: str = "db", options: DbOptions = OPTS) -> None:
    """Keys k000..k099 in a sorted run and L0, everything flushed out of the WAL."""
    with Db.open(path, store, options) as db:
        for lo in (0, 50):
            for i in range(lo, lo + 50):
                db.put(key(i), b"sr%d" % i, await_durable=False)
            db.flush_memtable()
        run_compaction_once(path, store, CompactorOptions(l0_trigger=2))
        for i in range(20, 80, 3):
            db.put(key(i), b"l0-%d" % i, await_durable=False)
        db.flush_memtable()


def ranges() -> list[KeyRange]:
    return [KeyRange(lo, hi) for lo, hi in itertools.pairwise(BOUNDS)]


def shard(store: ObjectStore, source: str, prefix: str) -> list[UnionSource]:
    """Project ``source`` into 4 shards from one checkpoint; their union sources."""
    cp = create_checkpoint(source, store, CheckpointOptions(lifetime=timedelta(minutes=5)))
    out = []
    for i, rng in enumerate(ranges()):
        create_clone(f"{prefix}{i}", source, store, cp.id, rng)
        out.append(UnionSource(f"{prefix}{i}", range=rng))
    return out


def test_union_of_four_projected_clones_equals_the_database(store: ObjectStore) -> None:
    make_db(store)
    expected = content(store, "db")
    sources = shard(store, "db", "shard")
    m = create_union("merged", sources, store)
    assert m.initialized and m.writer_epoch == 0 and m.key_range is None
    assert content(store, "merged") == expected
    db = manifest(store, "db")
    for e in m.external_dbs:
        assert e.final_checkpoint_id is not None
        assert manifest(store, e.path).checkpoint(e.final_checkpoint_id) is not None
    assert {e.path for e in m.external_dbs} == {"db"}  # the shards own no SSTs
    assert {s.original_id or s.id for s in m.ssts} <= {s.id for s in db.ssts}
    with Db.open("merged", store, OPTS) as w:  # a writer can take it over
        w.put(b"new", b"1")
        w.flush_memtable()
    assert content(store, "merged") == expected | {b"new": b"1"}
    assert b"new" not in content(store, "db")


def test_union_without_explicit_ranges_uses_the_shards_key_ranges() -> None:
    store = memory()
    make_db(store)
    sources = [UnionSource(s.path) for s in shard(store, "db", "shard")]
    create_union("merged", list(reversed(sources)), store)
    assert content(store, "merged") == content(store, "db")


def test_round_trip_shards_written_then_unioned_holds_every_shards_content(
    store: ObjectStore,
) -> None:
    make_db(store)
    sources = shard(store, "db", "shard")
    expected: dict[bytes, bytes] = {}
    for i, src in enumerate(sources):
        with Db.open(src.path, store, OPTS) as db:
            lo = 25 * i
            db.put(key(lo), b"shard-%d" % i)  # overwrite
            db.put(key(lo + 1) + b"-new", b"added-%d" % i)
            db.delete(key(lo + 2))
            db.flush_memtable()
        expected |= content(store, src.path)
    m = create_union("merged", sources, store)
    assert content(store, "merged") == expected
    assert {e.path for e in m.external_dbs} == {"db", *(s.path for s in sources)}
    run_compaction_once("merged", store, CompactorOptions(l0_trigger=2))
    assert content(store, "merged") == expected


def test_source_with_wal_only_data_is_refused_and_leaves_nothing_behind() -> None:
    store = memory()
    make_db(store)
    sources = shard(store, "db", "shard")
    with Db.open(sources[1].path, store, OPTS) as db:
        db.put(key(30), b"only-in-wal")  # durable in the WAL, not flushed to L0
    checkpoints = len(manifest(store, sources[1].path).checkpoints)
    with pytest.raises(UnionError, match="WAL"):
        create_union("merged", sources, store)
    assert ManifestStore(store, "merged").try_read_latest() is None
    assert len(manifest(store, sources[1].path).checkpoints) == checkpoints  # ephemeral dropped
    with Db.open(sources[1].path, store, OPTS) as db:
        db.flush_memtable()
    create_union("merged", sources, store)
    assert content(store, "merged")[key(30)] == b"only-in-wal"


def test_shards_without_wal_data_in_range_need_no_flush_before_union() -> None:
    """The parent's WAL tail (keys k090..k094) goes only to the last shard; the others count as
    flushed at once, and the last one after its writer flushed the copied tail into L0."""
    store = memory()
    make_db(store)
    with Db.open("db", store, OPTS) as db:
        for i in range(90, 95):
            db.put(key(i), b"wal-%d" % i)
    expected = content(store, "db")
    sources = []
    for i, rng in enumerate(ranges()):  # each from its own ephemeral checkpoint
        m = create_clone(f"shard{i}", "db", store, projection=rng)
        assert (m.wal_id_last_seen > m.replay_after_wal_id) == (i == 3)
        sources.append(UnionSource(f"shard{i}", range=rng))
    with pytest.raises(UnionError, match="shard3"):
        create_union("merged", sources, store)
    with Db.open("shard3", store, OPTS) as db:
        db.flush_memtable()
    m = create_union("merged", sources, store)
    assert content(store, "merged") == expected
    assert sorted(e.path for e in m.external_dbs) == ["db"] * 4 + ["shard3"]


def test_reopened_idle_source_is_not_mistaken_for_one_with_wal_data() -> None:
    store = memory()
    make_db(store)
    sources = shard(store, "db", "shard")
    for _ in range(2):
        Db.open(sources[0].path, store, OPTS).close()  # leaves empty fencing WAL SSTs
    create_union("merged", sources, store)
    assert content(store, "merged") == content(store, "db")


def test_overlapping_or_gapped_sources_are_refused() -> None:
    store = memory()
    make_db(store)
    cp = create_checkpoint("db", store)
    create_clone("a", "db", store, cp.id, KeyRange(None, key(60)))
    create_clone("b", "db", store, cp.id, KeyRange(key(40), None))
    with pytest.raises(UnionError, match="overlap"):
        create_union("merged", [UnionSource("a"), UnionSource("b")], store)
    gapped = [
        UnionSource("a", range=KeyRange(None, key(30))),
        UnionSource("b", range=KeyRange(key(50), None)),
    ]
    with pytest.raises(UnionError, match="adjacent"):
        create_union("merged", gapped, store)
    assert ManifestStore(store, "merged").try_read_latest() is None


def test_rerun_returns_the_union_and_other_databases_conflict() -> None:
    store = memory()
    make_db(store)
    sources = shard(store, "db", "shard")
    first = create_union("merged", sources, store)
    assert create_union("merged", sources, store) == first
    with Db.open("plain", store, OPTS):
        pass
    with pytest.raises(CloneConflict):
        create_union("plain", sources, store)
    with pytest.raises(SourceCheckpointLost):
        create_union("other", [UnionSource("db", checkpoint=uuid.uuid4())], store)


CRASHES = {
    "ephemeral-checkpoint": ("put_if_absent", "shard2/manifest/*", 0),
    "dest-manifest": ("put_if_absent", "merged/manifest/*", 0),
    "final-checkpoint-in-root": ("put_if_absent", "db/manifest/*", 0),
    "final-checkpoint-in-shard": ("put_if_absent", "shard3/manifest/*", 1),
    "initialized": ("put_if_absent", "merged/manifest/*", 1),
}


@pytest.mark.parametrize("step", list(CRASHES))
def test_crash_at_any_step_then_rerun_finishes_the_union(step: str) -> None:
    inner = memory()
    make_db(inner)
    sources = shard(inner, "db", "shard")
    for src in sources:  # give every shard SSTs of its own, so each needs a final checkpoint
        with Db.open(src.path, inner, OPTS) as db:
            db.put(src.range.start or b"a", b"own")  # type: ignore[union-attr]
            db.flush_memtable()
    expected: dict[bytes, bytes] = {}
    for src in sources:
        expected |= content(inner, src.path)
    store = FaultyStore(inner)
    op, glob, skip = CRASHES[step]
    store.add_rule(FaultRule(op, glob, fail_before=1.0, skip=skip))
    with pytest.raises(SlateDBError):
        create_union("merged", sources, store)
    stored = ManifestStore(inner, "merged").try_read_latest()
    if stored is not None:
        assert not stored.manifest.initialized
        with pytest.raises(DatabaseNotInitialized):
            Db.open("merged", inner, OPTS)
    m = create_union("merged", sources, inner)
    assert m.initialized and len(m.external_dbs) == 5
    for e in m.external_dbs:
        assert e.final_checkpoint_id is not None
        assert manifest(inner, e.path).checkpoint(e.final_checkpoint_id) is not None
    assert content(inner, "merged") == expected


def test_repeated_project_then_union_cycles_keep_external_dbs_bounded() -> None:
    store = memory()
    make_db(store)
    expected = content(store, "db")
    current = "db"
    sizes = []
    for cycle in range(10):
        sources = shard(store, current, f"c{cycle}-s")
        current = f"c{cycle}-union"
        m = create_union(current, sources, store)
        sizes.append(len(m.external_dbs))
    assert max(sizes) <= 2, sizes
    assert content(store, current) == expected
