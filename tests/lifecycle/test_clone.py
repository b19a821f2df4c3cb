"""Clones (SlateDB RFC 0004, "Clones"): content, isolation, nesting, projection, and re-runs after a crash
at every step."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta

import pytest

from slatedb_core.checkpoints import create_checkpoint
from slatedb_core.compactor import run_compaction_once
from slatedb_core.errors import (
    CheckpointNotFound,
    DatabaseDestroyed,
    DatabaseNotFound,
    DatabaseNotInitialized,
    InvalidArgument,
    SlateDBError,
)
from slatedb_core.keys import KeyRange
from slatedb_core.lifecycle.clone import (
    EPHEMERAL_LIFETIME,
    CloneConflict,
    SourceCheckpointLost,
    create_clone,
)
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import (
    CheckpointOptions,
    CompactorOptions,
    DbReaderOptions,
    ReaderMode,
)
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.testing import FaultRule, FaultyStore
from slatedb_core.writer.db import Db
from tests.lifecycle.lifecycle_steps import OPTS, content, key, manifest, memory


def fill(db: Db, lo: int, hi: int, tag: bytes = b"v") -> dict[bytes, bytes]:
    out = {key(i): tag + b"%d" % i for i in range(lo, hi)}
    for k, v in out.items():
        db.put(k, v, await_durable=False)
    db.flush()
    return out


def make_parent(
    store: ObjectStore, path: str = "parent", wal_only: bool = True
) -> dict[bytes, bytes]:
    """A database with data in a sorted run, in L0 and (optionally) only in its WAL."""
    expected: dict[bytes, bytes] = {}
    with Db.open(path, store, OPTS) as db:
        for lo in (0, 20):
            expected |= fill(db, lo, lo + 20, b"sr")
            db.flush_memtable()
        run_compaction_once(path, store, CompactorOptions(l0_trigger=2))
        expected |= fill(db, 40, 60, b"l0")
        db.flush_memtable()
        expected |= fill(db, 10, 15, b"l0-over")  # newer versions of sorted-run keys
        db.flush_memtable()
        if wal_only:
            expected |= fill(db, 60, 70, b"wal")
            expected |= fill(db, 0, 3, b"wal-over")
    m = ManifestStore(store, path).read_latest().manifest
    assert m.compacted and m.l0
    if wal_only:
        assert m.wal_id_last_seen <= m.replay_after_wal_id  # no reader has seen that WAL
    return expected


# ---- content ---------------------------------------------------------------------------------
def test_clone_serves_the_parents_sorted_run_l0_and_wal_data(store: ObjectStore) -> None:
    expected = make_parent(store)
    m = create_clone("clone", "parent", store)
    assert m.initialized
    assert content(store, "clone") == expected


def test_clone_manifest_records_parent_and_pins_it_with_a_final_checkpoint(
    store: ObjectStore,
) -> None:
    make_parent(store, wal_only=False)
    before = time.time()
    m = create_clone("clone", "parent", store)
    parent = manifest(store, "parent")
    (entry,) = m.external_dbs
    assert entry.path == "parent" and entry.final_checkpoint_id is not None
    owned = {s.id for s in parent.ssts}
    assert set(entry.sst_ids) == owned and owned
    final = parent.checkpoint(entry.final_checkpoint_id)
    source = parent.checkpoint(entry.source_checkpoint_id)
    assert final is not None and final.expire_time_s is None
    assert source is not None and source.manifest_id == final.manifest_id
    assert source.expire_time_s is not None
    assert source.expire_time_s <= before + EPHEMERAL_LIFETIME.total_seconds() + 60
    pinned = ManifestStore(store, "parent").read(source.manifest_id).manifest
    assert m.writer_epoch == pinned.writer_epoch + 1
    assert m.compactor_epoch == pinned.compactor_epoch
    assert m.checkpoints == () or all(c.writer_epoch is not None for c in m.checkpoints)


def test_clone_from_a_given_checkpoint_excludes_later_writes(store: ObjectStore) -> None:
    expected = make_parent(store, wal_only=False)
    cp = create_checkpoint("parent", store, CheckpointOptions())
    with Db.open("parent", store, OPTS) as db:
        fill(db, 100, 110, b"later")
        db.flush_memtable()
    m = create_clone("clone", "parent", store, parent_checkpoint=cp.id)
    assert m.external_dbs[-1].source_checkpoint_id == cp.id
    assert content(store, "clone") == expected
    latest = create_clone("clone-latest", "parent", store)
    assert latest.external_dbs[-1].source_checkpoint_id != cp.id
    assert len(content(store, "clone-latest")) == len(expected) + 10


def test_clone_from_a_checkpoint_taken_with_scope_all_includes_wal_writes() -> None:
    store = memory()
    with Db.open("parent", store, OPTS) as db:
        data = fill(db, 0, 10)
        cp = db.create_checkpoint()
    create_clone("clone", "parent", store, parent_checkpoint=cp.id)
    assert content(store, "clone") == data


def test_rerunning_a_finished_clone_returns_it_without_writing() -> None:
    store = FaultyStore(memory())
    make_parent(store)
    first = create_clone("clone", "parent", store)
    writes = {op: n for op, n in store.counters.snapshot().items() if op.startswith("put")}
    again = create_clone("clone", "parent", store)
    assert again == first
    after = {op: n for op, n in store.counters.snapshot().items() if op.startswith("put")}
    assert after == writes


def test_existing_database_that_is_not_this_clone_is_a_conflict() -> None:
    store = memory()
    make_parent(store, "parent", wal_only=False)
    make_parent(store, "other", wal_only=False)
    m = create_clone("clone", "parent", store)
    with pytest.raises(CloneConflict):
        create_clone("clone", "other", store)
    with pytest.raises(CloneConflict):
        create_clone("clone", "parent", store, parent_checkpoint=uuid.uuid4())
    ok = create_clone("clone", "parent", store, m.external_dbs[0].source_checkpoint_id)
    assert ok == m
    with Db.open("plain", store, OPTS):
        pass
    with pytest.raises(CloneConflict):
        create_clone("plain", "parent", store)


def test_bad_parents_and_paths_are_refused_with_typed_errors() -> None:
    store = memory()
    with pytest.raises(DatabaseNotFound):
        create_clone("clone", "missing", store)
    ManifestStore(store, "unfinished").create_initial(Manifest(initialized=False))
    with pytest.raises(DatabaseNotInitialized):
        create_clone("clone", "unfinished", store)
    ManifestStore(store, "gone").create_initial(Manifest(destroyed_at_s=1))
    with pytest.raises(DatabaseDestroyed):
        create_clone("clone", "gone", store)
    make_parent(store, wal_only=False)
    for bad in ("parent", "parent/inner", "", "/abs"):
        with pytest.raises(InvalidArgument):
            create_clone(bad, "parent", store)
    create_clone("shard", "parent", store, projection=KeyRange(None, key(10)))
    with pytest.raises(InvalidArgument, match="none of"):
        create_clone("clone", "shard", store, projection=KeyRange(key(10), None))
    checkpoints = manifest(store, "shard").checkpoints
    assert not [c for c in checkpoints if c.name == "clone-source:clone"]  # dropped again
    assert ManifestStore(store, "clone").try_read_latest() is None


# ---- stale checkpoints -----------------------------------------------------------------------
def test_missing_or_expired_source_checkpoint_is_a_clear_error() -> None:
    store = memory()
    make_parent(store, wal_only=False)
    with pytest.raises(SourceCheckpointLost, match="retry without it"):
        create_clone("clone", "parent", store, parent_checkpoint=uuid.uuid4())
    cp = create_checkpoint("parent", store, CheckpointOptions(lifetime=timedelta(minutes=1)))
    with pytest.raises(CheckpointNotFound, match="expired"):
        create_clone("clone", "parent", store, cp.id, now=lambda: time.time() + 3600)
    assert ManifestStore(store, "clone").try_read_latest() is None


def test_rerun_after_the_ephemeral_checkpoint_expired_says_to_start_over() -> None:
    inner = memory()
    make_parent(inner)
    store = FaultyStore(inner)
    # crash right after the clone manifest: the final checkpoint was never taken
    store.add_rule(FaultRule("put_if_absent", "parent/manifest/*", fail_before=1.0, skip=1))
    with pytest.raises(SlateDBError):
        create_clone("clone", "parent", store)
    later = time.time() + EPHEMERAL_LIFETIME.total_seconds() + 60
    with pytest.raises(SourceCheckpointLost, match="hard-destroy the unfinished"):
        create_clone("clone", "parent", inner, now=lambda: later)
    assert not manifest(inner, "clone").initialized
    destroy("clone", inner, soft=False)  # what the message says to do
    assert create_clone("clone2", "parent", inner, now=lambda: later).initialized


# ---- crashes ---------------------------------------------------------------------------------
CRASHES = {
    # step: (op, path glob, rules to skip first)
    "ephemeral-checkpoint": ("put_if_absent", "parent/manifest/*", 0),
    "wal-listing": ("list", "parent/wal*", 0),
    "clone-manifest": ("put_if_absent", "clone/manifest/*", 0),
    "final-checkpoint": ("put_if_absent", "parent/manifest/*", 1),
    "wal-tail-read": ("get", "parent/wal/*", 0),
    "wal-end-read": ("get", "parent/wal/*", 1),
    "wal-copy-read": ("get", "parent/wal/*", 2),
    "first-wal-copy": ("put_if_absent", "clone/wal/*", 0),
    "later-wal-copy": ("put_if_absent", "clone/wal/*", 1),
    "initialized": ("put_if_absent", "clone/manifest/*", 1),
}


@pytest.mark.parametrize("after_effect", [False, True], ids=["before", "after"])
@pytest.mark.parametrize("step", list(CRASHES))
def test_crash_at_any_step_then_rerun_finishes_the_clone(step: str, after_effect: bool) -> None:
    inner = memory()
    expected = make_parent(inner)
    store = FaultyStore(inner)
    op, glob, skip = CRASHES[step]
    p = 1.0 if after_effect else 0.0
    store.add_rule(FaultRule(op, glob, 1.0 - p, p, skip=skip))  # every later matching call fails
    try:
        create_clone("clone", "parent", store)
        crashed = False
    except SlateDBError:
        crashed = True
    stored = ManifestStore(inner, "clone").try_read_latest()
    if crashed and stored is not None:
        assert not stored.manifest.initialized  # never looks finished before it is
        with pytest.raises(DatabaseNotInitialized):
            Db.open("clone", inner, OPTS)
    m = create_clone("clone", "parent", inner)
    assert m.initialized
    parent = manifest(inner, "parent")
    for e in m.external_dbs:
        assert e.final_checkpoint_id is not None
        assert parent.checkpoint(e.final_checkpoint_id) is not None
    assert content(inner, "clone") == expected


def test_crash_is_reached_for_every_step() -> None:
    """The fault rules above really interrupt the clone (so the test above tests re-runs)."""
    for step, (op, glob, skip) in CRASHES.items():
        inner = memory()
        make_parent(inner)
        store = FaultyStore(inner)
        store.add_rule(FaultRule(op, glob, skip=skip, fail_before=1.0))
        with pytest.raises(SlateDBError):
            create_clone("clone", "parent", store)
        stored = ManifestStore(inner, "clone").try_read_latest()
        assert stored is None or not stored.manifest.initialized, step


# ---- isolation, nesting, projection ----------------------------------------------------------
def test_writes_to_clone_and_parent_stay_apart(store: ObjectStore) -> None:
    expected = make_parent(store)
    create_clone("clone", "parent", store)
    with Db.open("clone", store, OPTS) as c:
        c.put(b"only-clone", b"c")
        c.put(key(0), b"changed-in-clone")
        c.flush_memtable()
    with Db.open("parent", store, OPTS) as p:
        p.put(b"only-parent", b"p")
        p.delete(key(1))
        p.flush_memtable()
    parent, clone = content(store, "parent"), content(store, "clone")
    assert b"only-clone" not in parent and parent[key(0)] == expected[key(0)]
    assert b"only-parent" not in clone and clone[key(1)] == expected[key(1)]
    assert clone[key(0)] == b"changed-in-clone" and key(1) not in parent


def test_clone_of_a_clone_reads_the_grandparents_ssts(store: ObjectStore) -> None:
    expected = make_parent(store)
    create_clone("child", "parent", store)
    with Db.open("child", store, OPTS) as c:
        expected |= fill(c, 200, 210, b"child")
        c.flush_memtable()
        expected |= fill(c, 210, 212, b"child-wal")
    g = create_clone("grandchild", "child", store)
    assert [e.path for e in g.external_dbs] == ["parent", "child"]
    assert content(store, "grandchild") == expected
    final = g.external_dbs[0].final_checkpoint_id
    assert final is not None and manifest(store, "parent").checkpoint(final) is not None


def test_nested_clone_after_the_parents_ephemeral_checkpoint_expired() -> None:
    """The inherited entry's source checkpoint is long gone; the parent's own final checkpoint
    pins the same manifest and stands in for it."""
    store = memory()
    expected = make_parent(store)
    create_clone("child", "parent", store)
    later = time.time() + 3600
    create_clone("grandchild", "child", store, now=lambda: later)
    assert content(store, "grandchild") == expected


def test_projected_clone_serves_only_its_range(store: ObjectStore) -> None:
    expected = make_parent(store)
    rng = KeyRange(key(10), key(65))
    m = create_clone("shard", "parent", store, projection=rng)
    assert KeyRange.of(m.key_range) == rng
    inside = {k: v for k, v in expected.items() if rng.contains(k)}
    with Db.open("shard", store, OPTS) as db:
        assert dict(db.scan()) == inside
        with pytest.raises(InvalidArgument):
            db.get(key(1))
        db.flush_memtable()  # the clipped WAL tail reaches L0: nothing outside the range
        for s in db.manifest.manifest.ssts:
            if s.id not in m.external_dbs[-1].sst_ids:
                assert s.info.first_key is not None and s.info.last_key is not None
                assert rng.contains(s.info.first_key) and rng.contains(s.info.last_key)
    options = DbReaderOptions(mode=ReaderMode.FOLLOW_LATEST)
    with DbReader.open("shard", store, options=options) as reader:
        for outside in (key(1), key(65)):  # SlateDB RFC 0004: reads wholly outside the range fail
            with pytest.raises(InvalidArgument):
                reader.get(outside)
        assert reader.get(key(10)) == expected[key(10)]


def test_projection_outside_the_wal_tail_copies_no_wal() -> None:
    store = memory()
    make_parent(store)  # WAL tail: k060..k069 and k000..k002
    m = create_clone("shard", "parent", store, projection=KeyRange(key(20), key(50)))
    assert m.wal_id_last_seen == m.replay_after_wal_id
    assert list(store.list("shard/wal")) == []
    with_tail = create_clone("tail", "parent", store, projection=KeyRange(key(65), None))
    assert with_tail.wal_id_last_seen > with_tail.replay_after_wal_id


def test_racing_clones_of_one_path_both_finish_the_same_clone() -> None:
    store = memory()
    expected = make_parent(store)
    rng = KeyRange(key(1), key(65))  # clipped WAL SSTs: both runs must write identical bytes
    results: list[Manifest] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(create_clone("clone", "parent", store, projection=rng))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    ids = {r.external_dbs[-1].final_checkpoint_id for r in results}
    assert len(ids) == 1 and all(r.initialized for r in results)
    assert content(store, "clone") == {k: v for k, v in expected.items() if rng.contains(k)}
    live = [c for c in manifest(store, "parent").checkpoints if c.name == "clone-source:clone"]
    assert len(live) == 1  # the losers dropped their ephemeral checkpoints
