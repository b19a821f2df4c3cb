from __future__ import annotations

import dataclasses
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta

import pytest

from slatedb_core.checkpoints import (
    CheckpointCreateResult,
    checkpoint_change,
    create_checkpoint,
    delete_checkpoint,
    drop_pins_change,
    expire_change,
    extend_pins_change,
    list_checkpoints,
    pin_change,
    refresh_checkpoint,
    writer_checkpoint,
    writer_checkpoint_change,
)
from slatedb_core.errors import (
    CheckpointNotFound,
    DatabaseDestroyed,
    DatabaseNotFound,
    DatabaseNotInitialized,
    InvalidArgument,
)
from slatedb_core.manifest.model import Checkpoint, Manifest
from slatedb_core.manifest.store import FencedManifest, ManifestStore, StoredManifest
from slatedb_core.options import CheckpointOptions
from slatedb_core.store.objectstore import ObjectStore

DB = "db"
T0 = 1_700_000_000.0


def at(t: float) -> Callable[[], float]:
    return lambda: t


@pytest.fixture
def ms(store: ObjectStore) -> ManifestStore:
    m = ManifestStore(store, DB)
    m.create_initial(Manifest())
    return m


def bump(ms: ManifestStore) -> int:
    """Commit an unrelated edit, as another process would."""
    return ms.update(lambda m: dataclasses.replace(m, wal_id_last_seen=m.wal_id_last_seen + 1)).id


# ---- create ---------------------------------------------------------------------------------
def test_create_from_latest_pins_the_manifest_it_commits(
    store: ObjectStore, ms: ManifestStore
) -> None:
    bump(ms)  # latest is 2
    res = create_checkpoint(DB, store)
    assert res.manifest_id == 3
    latest = ms.read_latest()
    assert latest.id == 3
    cp = ms.read(3).manifest.checkpoint(res.id)
    assert cp is not None and cp.manifest_id == 3 and cp.expire_time_s is None
    assert ms.read(2).manifest.checkpoint(res.id) is None
    assert res.id.version == 4


def test_create_with_lifetime_sets_expiry_and_name(store: ObjectStore, ms: ManifestStore) -> None:
    opts = CheckpointOptions(lifetime=timedelta(hours=1), name="nightly")
    res = create_checkpoint(DB, store, opts, now=at(T0 + 0.4))
    cp = ms.read_latest().manifest.checkpoint(res.id)
    assert cp is not None
    assert cp.create_time_s == int(T0)
    assert cp.expire_time_s == int(T0) + 3600 + 1  # rounded up: never shorter than asked
    assert cp.name == "nightly" and cp.writer_epoch is None


def test_create_from_source_copies_its_manifest_id(store: ObjectStore, ms: ManifestStore) -> None:
    src = create_checkpoint(DB, store, CheckpointOptions(lifetime=timedelta(minutes=5)), now=at(T0))
    bump(ms)
    bump(ms)
    res = create_checkpoint(
        DB, store, CheckpointOptions(source=src.id, name="copy"), now=at(T0 + 60)
    )
    assert res.manifest_id == src.manifest_id == 2
    latest = ms.read_latest()
    assert latest.id == 5
    cp = latest.manifest.checkpoint(res.id)
    assert cp is not None and cp.manifest_id == 2 and cp.expire_time_s is None and cp.name == "copy"


def test_create_from_missing_source_is_checkpoint_not_found(
    store: ObjectStore, ms: ManifestStore
) -> None:
    missing = uuid.uuid4()
    with pytest.raises(CheckpointNotFound) as info:
        create_checkpoint(DB, store, CheckpointOptions(source=missing))
    assert info.value.checkpoint_id == missing
    assert ms.latest_id() == 1  # nothing written


def test_create_from_expired_source_is_checkpoint_not_found(
    store: ObjectStore, ms: ManifestStore
) -> None:
    src = create_checkpoint(
        DB, store, CheckpointOptions(lifetime=timedelta(seconds=10)), now=at(T0)
    )
    # still alive exactly at its expiry second
    create_checkpoint(DB, store, CheckpointOptions(source=src.id), now=at(T0 + 10))
    with pytest.raises(CheckpointNotFound, match="expired") as info:
        create_checkpoint(DB, store, CheckpointOptions(source=src.id), now=at(T0 + 11))
    assert info.value.checkpoint_id == src.id
    assert ms.latest_id() == 3


def test_destroyed_database_refuses_checkpoints(store: ObjectStore, ms: ManifestStore) -> None:
    src = create_checkpoint(DB, store)
    ms.update(lambda m: dataclasses.replace(m, destroyed_at_s=int(T0)))
    with pytest.raises(DatabaseDestroyed):
        create_checkpoint(DB, store)
    with pytest.raises(DatabaseDestroyed):
        create_checkpoint(DB, store, CheckpointOptions(source=src.id))


def test_uninitialized_database_refuses_checkpoints_of_latest(store: ObjectStore) -> None:
    ms = ManifestStore(store, DB)
    ms.create_initial(Manifest(initialized=False))
    with pytest.raises(DatabaseNotInitialized):
        create_checkpoint(DB, store)
    assert ms.latest_id() == 1


def test_missing_database_and_bad_path(store: ObjectStore) -> None:
    with pytest.raises(DatabaseNotFound):
        create_checkpoint("nothing-here", store)
    with pytest.raises(DatabaseNotFound):
        list_checkpoints("nothing-here", store)
    for bad in ("../db", "/db", "a//b", ""):
        with pytest.raises(InvalidArgument):
            create_checkpoint(bad, store)
        with pytest.raises(InvalidArgument):
            delete_checkpoint(bad, store, uuid.uuid4())


# ---- refresh / delete -----------------------------------------------------------------------
def test_refresh_moves_expiry_and_none_clears_it(store: ObjectStore, ms: ManifestStore) -> None:
    res = create_checkpoint(DB, store, CheckpointOptions(lifetime=timedelta(minutes=1)), now=at(T0))
    cp = refresh_checkpoint(DB, store, res.id, timedelta(hours=2), now=at(T0 + 30))
    assert cp.expire_time_s == int(T0) + 30 + 7200
    stored = ms.read_latest().manifest.checkpoint(res.id)
    assert stored == cp and stored.manifest_id == res.manifest_id
    cp = refresh_checkpoint(DB, store, res.id, None, now=at(T0 + 60))
    assert cp.expire_time_s is None
    assert ms.read_latest().manifest.checkpoint(res.id) == cp


def test_refresh_of_expired_checkpoint_is_refused(store: ObjectStore, ms: ManifestStore) -> None:
    res = create_checkpoint(DB, store, CheckpointOptions(lifetime=timedelta(seconds=5)), now=at(T0))
    with pytest.raises(CheckpointNotFound, match="expired"):
        refresh_checkpoint(DB, store, res.id, timedelta(hours=1), now=at(T0 + 6))


def test_delete_removes_only_that_checkpoint(store: ObjectStore, ms: ManifestStore) -> None:
    a = create_checkpoint(DB, store)
    b = create_checkpoint(DB, store)
    delete_checkpoint(DB, store, a.id)
    ids = [c.id for c in ms.read_latest().manifest.checkpoints]
    assert ids == [b.id]


def test_delete_works_on_a_destroyed_database(store: ObjectStore, ms: ManifestStore) -> None:
    a = create_checkpoint(DB, store)
    ms.update(lambda m: dataclasses.replace(m, destroyed_at_s=int(T0)))
    delete_checkpoint(DB, store, a.id)
    assert ms.read_latest().manifest.checkpoints == ()


def test_unknown_id_is_checkpoint_not_found(store: ObjectStore, ms: ManifestStore) -> None:
    create_checkpoint(DB, store)
    unknown = uuid.uuid4()
    with pytest.raises(CheckpointNotFound):
        refresh_checkpoint(DB, store, unknown, timedelta(hours=1))
    with pytest.raises(CheckpointNotFound):
        refresh_checkpoint(DB, store, unknown)
    with pytest.raises(CheckpointNotFound):
        delete_checkpoint(DB, store, unknown)
    assert ms.latest_id() == 2


# ---- list -----------------------------------------------------------------------------------
def test_list_filters_by_name_and_includes_expired(store: ObjectStore, ms: ManifestStore) -> None:
    a = create_checkpoint(DB, store, CheckpointOptions(name="x"), now=at(T0))
    b = create_checkpoint(DB, store, CheckpointOptions(name="y"), now=at(T0))
    c = create_checkpoint(
        DB, store, CheckpointOptions(name="x", lifetime=timedelta(seconds=1)), now=at(T0)
    )
    assert [cp.id for cp in list_checkpoints(DB, store)] == [a.id, b.id, c.id]
    named = list_checkpoints(DB, store, "x")
    assert [cp.id for cp in named] == [a.id, c.id]
    assert named[1].is_expired(T0 + 5) and not named[0].is_expired(T0 + 5)
    assert [cp.id for cp in list_checkpoints(DB, store, "y")] == [b.id]
    assert list_checkpoints(DB, store, "z") == []


# ---- conflicts and the lower-level change ---------------------------------------------------
def test_change_is_reapplied_after_a_conflict_and_pins_the_new_id(
    store: ObjectStore, ms: ManifestStore
) -> None:
    stale = ms.read_latest()
    bump(ms)  # someone else commits 2
    cid = uuid.uuid4()
    stored = ms.update_at(checkpoint_change(CheckpointOptions(), int(T0), cid), base=stale)
    assert stored.id == 3
    cp = stored.manifest.checkpoint(cid)
    assert cp is not None and cp.manifest_id == 3
    assert stored.manifest.wal_id_last_seen == 1  # built on the winner, not the stale base


def test_concurrent_creates_all_survive(store: ObjectStore, ms: ManifestStore) -> None:
    n = 6
    results: list[CheckpointCreateResult | None] = [None] * n
    errors: list[BaseException] = []
    start = threading.Barrier(n)

    def worker(i: int) -> None:
        try:
            start.wait()
            results[i] = create_checkpoint(DB, store, CheckpointOptions(name=f"t{i}"))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    latest = ms.read_latest()
    assert latest.id == 1 + n
    by_id = {c.id: c for c in latest.manifest.checkpoints}
    manifest_ids = set()
    for i, res in enumerate(results):
        assert res is not None
        cp = by_id[res.id]
        assert cp.name == f"t{i}" and cp.manifest_id == res.manifest_id
        # each pins the version it was finally committed as: present there, absent just before
        assert ms.read(cp.manifest_id).manifest.checkpoint(cp.id) is not None
        assert ms.read(cp.manifest_id - 1).manifest.checkpoint(cp.id) is None
        manifest_ids.add(cp.manifest_id)
    assert manifest_ids == set(range(2, 2 + n))


def test_change_combines_with_other_edits_under_a_fence(
    store: ObjectStore, ms: ManifestStore
) -> None:
    writer = FencedManifest.init_writer(ms)  # commits 2
    cid = uuid.uuid4()
    change = checkpoint_change(CheckpointOptions(name="w"), int(T0), cid)
    stored = writer.update_at(lambda m, nid: dataclasses.replace(change(m, nid), last_l0_seq=9))
    assert stored.id == 3 and stored.manifest.last_l0_seq == 9
    cp = stored.manifest.checkpoint(cid)
    assert cp is not None and cp.manifest_id == 3 and cp.name == "w"


def test_change_is_idempotent_for_an_id_already_present() -> None:
    cid = uuid.uuid4()
    change = checkpoint_change(CheckpointOptions(), int(T0), cid)
    once = change(Manifest(), 2)
    assert change(once, 3) is once
    # even once destroyed: the earlier attempt did land, so the create succeeded
    destroyed = dataclasses.replace(once, destroyed_at_s=1)
    assert change(destroyed, 4) is destroyed


def test_change_from_source_ignores_initialized_as_the_seed_says() -> None:
    src = uuid.uuid4()
    base = checkpoint_change(CheckpointOptions(), int(T0), src)(Manifest(), 7)
    m = dataclasses.replace(base, initialized=False)
    out = checkpoint_change(CheckpointOptions(source=src), int(T0), uuid.uuid4())(m, 9)
    assert [c.manifest_id for c in out.checkpoints] == [7, 7]


def test_change_rejects_a_non_uuid_id() -> None:
    with pytest.raises(InvalidArgument):
        checkpoint_change(CheckpointOptions(), int(T0), "nope")  # type: ignore[arg-type]


def test_stored_manifest_unchanged_when_change_is_noop(
    store: ObjectStore, ms: ManifestStore
) -> None:
    cid = uuid.uuid4()
    change = checkpoint_change(CheckpointOptions(), int(T0), cid)
    first = ms.update_at(change)
    again = ms.update_at(change)
    assert isinstance(again, StoredManifest) and again.id == first.id == 2


# ---- the writer's checkpoint, a reader's pins, GC's expiry (all in slatedb_core.checkpoints) ----
def _cp(expire: int | None, *, epoch: int | None = None) -> Checkpoint:
    return Checkpoint(uuid.uuid4(), 1, int(T0), expire_time_s=expire, writer_epoch=epoch)


def test_writer_checkpoint_replaces_the_writer_s_and_keeps_the_others() -> None:
    user = _cp(None)
    m = dataclasses.replace(Manifest(), checkpoints=(user, _cp(None, epoch=3)))
    out = writer_checkpoint(m, 7, 4)
    assert out.checkpoints[0] is user and len(out.checkpoints) == 2
    (writer,) = [c for c in out.checkpoints if c.writer_epoch is not None]
    assert writer.writer_epoch == 4 and writer.manifest_id == 7 and writer.expire_time_s is None
    moved = writer_checkpoint_change(5)(out, 8)
    assert [(c.writer_epoch, c.manifest_id) for c in moved.checkpoints] == [(None, 1), (5, 8)]


def test_a_reader_pin_replaces_its_unread_pins_and_records_the_wal_it_saw() -> None:
    old, kept, other = _cp(None), _cp(None), _cp(None)
    m = dataclasses.replace(Manifest(), checkpoints=(old, kept, other), replay_after_wal_id=4)
    new_id = uuid.uuid4()
    change = pin_change(DB, new_id, int(T0), int(T0) + 60, {old.id}, 9)
    out = change(m, 6)
    assert out is not None and out.wal_id_last_seen == 9
    assert [c.id for c in out.checkpoints] == [kept.id, other.id, new_id]
    assert out.checkpoints[-1].manifest_id == 6
    assert change(out, 7) is None  # an earlier attempt landed: nothing more
    # a replay point past what the reader saw wins: the manifest's SSTs hold those WAL SSTs
    assert pin_change(DB, uuid.uuid4(), 0, None, set(), 2)(m, 6).wal_id_last_seen == 4  # type: ignore[union-attr]
    for dead in (
        dataclasses.replace(m, destroyed_at_s=1),
        dataclasses.replace(m, initialized=False),
    ):
        with pytest.raises((DatabaseDestroyed, DatabaseNotInitialized)):
            pin_change(DB, uuid.uuid4(), 0, None, set(), 2)(dead, 6)


def test_a_reader_extends_its_stale_pins_drops_its_retired_ones_and_learns_of_a_lost_pin() -> None:
    ours, stale, done, never = _cp(100), _cp(50), _cp(100), _cp(None)
    m = dataclasses.replace(Manifest(), checkpoints=(ours, stale, done, never))
    out = extend_pins_change(ours.id, {done.id}, {stale.id, never.id}, 200)(m, 2)
    assert [(c.id, c.expire_time_s) for c in out.checkpoints] == [
        (ours.id, 100),
        (stale.id, 200),
        (never.id, None),
    ]
    lost = dataclasses.replace(m, checkpoints=(stale,))
    with pytest.raises(CheckpointNotFound):
        extend_pins_change(ours.id, set(), {stale.id}, 200)(lost, 2)
    dropped = drop_pins_change({ours.id, done.id})(m, 2)
    assert dropped is not None and [c.id for c in dropped.checkpoints] == [stale.id, never.id]
    assert drop_pins_change({uuid.uuid4()})(m, 2) is None


def test_gc_expiry_removes_expired_checkpoints_except_on_a_destroyed_database() -> None:
    live, expired, forever = _cp(int(T0) + 10), _cp(int(T0) - 1), _cp(None)
    m = dataclasses.replace(Manifest(), checkpoints=(live, expired, forever))
    change = expire_change(T0)
    out = change(m)
    assert out is not None and change.removed == 1
    assert [c.id for c in out.checkpoints] == [live.id, forever.id]
    assert change(out) is None and change.removed == 0
    destroyed = dataclasses.replace(m, destroyed_at_s=1)
    assert change(destroyed) is None and change.removed == 0
