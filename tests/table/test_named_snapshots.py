"""Table snapshots taken under a name: found again by name, replaced without leaking checkpoints
(one after another, concurrently, after an ambiguous write), refreshed, released, and their
record's old versions collected."""

from __future__ import annotations

import json
import threading
import time
import types
import uuid
from datetime import timedelta

import pytest

import slatedb_core.table.named_snapshots as named_mod
from slatedb_core.checkpoints import create_checkpoint, list_checkpoints
from slatedb_core.errors import CheckpointNotFound, CorruptionError, InvalidArgument
from slatedb_core.layout import snapshot_record_path
from slatedb_core.meta.envelope import seal
from slatedb_core.options import CheckpointOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table, TableSnapshot
from slatedb_core.table.named_snapshots import SWEEP_MIN_AGE, TAKE_MAX_AGE
from slatedb_core.table.snapshot import (
    snapshot_checkpoint_name,
    snapshot_present,
    take_snapshot,
)
from slatedb_core.testing import FaultyStore
from tests.table.conftest import OPTS, fill

NAME = "end-of-day"


def named_checkpoints(store: ObjectStore, table: Table, db_paths: list[str]) -> set[uuid.UUID]:
    """Every checkpoint of the snapshot named NAME, on the given shard databases."""
    cp_name = snapshot_checkpoint_name(table.path, NAME)
    return {c.id for p in db_paths for c in list_checkpoints(p, store, cp_name)}


def test_a_named_snapshot_is_found_again_from_another_table_handle(mem: ObjectStore) -> None:
    with Table.create("t", mem, [b"m"], OPTS) as t:
        fill(t, {b"a": b"1", b"x": b"2"}, flush=True)
        snap = t.snapshot(timedelta(days=1), name=NAME)
        assert snap.name == NAME
        fill(t, {b"a": b"changed"}, flush=True)
        t.split(0, b"c")
    with Table.open("t", mem, OPTS) as other:
        found = other.named_snapshot(NAME)
        assert found == snap and other.snapshot_names() == [NAME]
        assert other.named_snapshot("no-such-name") is None
    assert TableSnapshot.from_json(snap.to_json()) == snap
    with Table.open("t", mem, OPTS, snapshot=found) as old:
        assert list(old.scan()) == [(b"a", b"1"), (b"x", b"2")]


def test_taking_a_name_again_releases_the_snapshot_it_replaces(mem: ObjectStore) -> None:
    with Table.create("t", mem, [b"m"], OPTS) as t:
        fill(t, {b"a": b"1", b"x": b"2"}, flush=True)
        first = t.snapshot(None, name=NAME)
        t.split(1, b"q")  # the first snapshot now pins a retired shard
        retired = [s.db_path for s in first.shards]
        second = t.snapshot(None, name=NAME)
        third = t.snapshot(None, name=NAME)
        live = [s.db_path for s in t.shards]
        assert named_checkpoints(mem, t, retired + live) == set(third.checkpoints)
        assert t.named_snapshot(NAME) == third
        assert not set(first.checkpoints) & set(second.checkpoints)
        # the unnamed snapshot of the same table is not touched by the name
        plain = t.snapshot()
        t.snapshot(None, name=NAME)
        assert all(
            any(c.id == cid for c in list_checkpoints(s.db_path, mem))
            for s, cid in zip(plain.shards, plain.checkpoints, strict=True)
        )


def test_concurrent_takers_of_one_name_leave_exactly_one_snapshot(mem: ObjectStore) -> None:
    with Table.create("t", mem, [b"g", b"p"], OPTS) as t:
        fill(t, {b"a": b"1", b"h": b"2", b"z": b"3"}, flush=True)
        errors: list[BaseException] = []
        start = threading.Barrier(6)

        def take() -> None:
            try:
                with Table.open("t", mem, OPTS) as mine:
                    start.wait()
                    for _ in range(3):
                        mine.snapshot(None, name=NAME)
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=take) for _ in range(6)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors
        final = t.named_snapshot(NAME)
        assert final is not None
        shards = [s.db_path for s in t.shards]
        assert named_checkpoints(mem, t, shards) == set(final.checkpoints)


def test_a_taker_that_read_a_stale_record_releases_the_one_it_replaces(mem: ObjectStore) -> None:
    """Taker A reads the record, stalls; taker B replaces it meanwhile. A's write must replace
    (and release) B's snapshot, not the one A read: B's checkpoints would otherwise leak."""
    faulty = FaultyStore(mem)
    with Table.create("t", mem, [b"m"], OPTS) as b:
        fill(b, {b"a": b"1"}, flush=True)
        b.snapshot(None, name=NAME)
        # A reads version 1 of the record (B's first snapshot) and stalls; B commits version 2
        pause = faulty.pause("a-read", "get", snapshot_record_path("t", NAME, 1), when="after")
        with Table.open("t", faulty, OPTS) as a:
            th = threading.Thread(target=lambda: a.snapshot(None, name=NAME))
            th.start()
            assert pause.wait_reached()
            b.snapshot(None, name=NAME)
            pause.release()
            th.join()
        final = b.named_snapshot(NAME)
        assert final is not None
        assert named_checkpoints(mem, b, [s.db_path for s in b.shards]) == set(final.checkpoints)


def test_a_record_write_that_landed_but_reported_failure_is_settled(mem: ObjectStore) -> None:
    faulty = FaultyStore(mem)
    with Table.create("t", faulty, [b"m"], OPTS) as t:
        fill(t, {b"a": b"1"}, flush=True)
        first = t.snapshot(None, name=NAME)
        faulty.fail_next("put_if_absent", "t/snapshots/*", after_effect=True)
        second = t.snapshot(None, name=NAME)
        assert t.named_snapshot(NAME) == second
        shards = [s.db_path for s in t.shards]
        assert named_checkpoints(mem, t, shards) == set(second.checkpoints)
        assert not set(first.checkpoints) & set(second.checkpoints)


def test_a_landed_write_replaced_before_its_retry_does_not_leave_a_dead_record(
    mem: ObjectStore,
) -> None:
    """Taker A's create of record version 2 lands but reports failure; before A reads it back,
    taker B builds version 3 on it (releasing A's checkpoints). A settles its create as landed
    and superseded: the name must hold B's live snapshot and no other checkpoint."""
    faulty = FaultyStore(mem)
    with Table.create("t", mem, [b"m"], OPTS) as b:
        fill(b, {b"a": b"1", b"x": b"2"}, flush=True)
        b.snapshot(None, name=NAME)
        record = snapshot_record_path("t", NAME, 2)
        pause = faulty.pause("a-landed", "put_if_absent", record, when="after")
        faulty.fail_next("put_if_absent", record, after_effect=True)
        result: list[TableSnapshot] = []
        with Table.open("t", faulty, OPTS) as a:
            th = threading.Thread(target=lambda: result.append(a.snapshot(None, name=NAME)))
            th.start()
            assert pause.wait_reached()
            b.snapshot(None, name=NAME)  # replaces A's landed record, releases its checkpoints
            pause.release()
            th.join()
        final = b.named_snapshot(NAME)
        assert final is not None and len(result) == 1
        shards = [s.db_path for s in b.shards]
        assert named_checkpoints(mem, b, shards) == set(final.checkpoints)
        with Table.open("t", mem, OPTS, snapshot=final) as view:
            assert dict(view.scan()) == {b"a": b"1", b"x": b"2"}


def test_leftovers_of_a_taker_that_died_are_swept_once_old(mem: ObjectStore) -> None:
    with Table.create("t", mem, [b"m"], OPTS) as t:
        fill(t, {b"a": b"1"}, flush=True)
        shard = t.shards[0].db_path
        opts = CheckpointOptions(name=snapshot_checkpoint_name("t", NAME))
        long_ago = time.time() - SWEEP_MIN_AGE.total_seconds() - 60
        dead = create_checkpoint(shard, mem, opts, now=lambda: long_ago).id
        young = create_checkpoint(shard, mem, opts).id  # may be a taker still running
        snap = t.snapshot(None, name=NAME)
        left = named_checkpoints(mem, t, [s.db_path for s in t.shards])
        assert dead not in left and young in left and set(snap.checkpoints) <= left


def test_a_taker_whose_record_lands_late_takes_again(
    mem: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A taker whose record version lands TAKE_MAX_AGE after it began may hold checkpoints a
    sweep took for a dead taker's (one that read the record before it landed): it takes again,
    even though its checkpoints are all still there."""
    faulty = FaultyStore(mem)
    takes: list[object] = []
    real_take = take_snapshot

    def counting_take(*args: object, **kwargs: object) -> object:
        takes.append(args)
        return real_take(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(named_mod, "take_snapshot", counting_take)
    with Table.create("t", mem, [b"m"], OPTS) as t:
        fill(t, {b"a": b"1"}, flush=True)
        pause = faulty.pause("stall", "get", snapshot_record_path("t", NAME, 1), when="before")
        t.snapshot(None, name=NAME)
        takes.clear()
        result: list[TableSnapshot] = []
        with Table.open("t", faulty, OPTS) as a:
            th = threading.Thread(target=lambda: result.append(a.snapshot(None, name=NAME)))
            th.start()
            assert pause.wait_reached()
            late = time.time() + TAKE_MAX_AGE.total_seconds() + 60
            monkeypatch.setattr(named_mod, "time", types.SimpleNamespace(time=lambda: late))
            pause.release()
            th.join()
        assert len(takes) == 2 and len(result) == 1
        assert t.named_snapshot(NAME) == result[0]
        assert named_checkpoints(mem, t, [s.db_path for s in t.shards]) == set(
            result[0].checkpoints
        )


def test_deleting_a_name_deletes_it_and_its_checkpoints(mem: ObjectStore) -> None:
    with Table.create("t", mem, [b"m"], OPTS) as t:
        fill(t, {b"a": b"1"}, flush=True)
        snap = t.snapshot(None, name=NAME)
        other = t.snapshot(None, name="other")
        assert t.delete_snapshot(NAME) == snap
        assert t.named_snapshot(NAME) is None and t.snapshot_names() == ["other"]
        assert named_checkpoints(mem, t, [s.db_path for s in snap.shards]) == set()
        assert t.delete_snapshot(NAME) is None  # deleting again: nothing to do
        t.release_snapshot(other)  # a snapshot object taken under a name deletes the name too
        assert t.snapshot_names() == []
        again = t.snapshot(None, name=NAME)  # the name can be taken again after a release
        assert t.named_snapshot(NAME) == again


def test_refreshing_a_named_snapshot_extends_its_checkpoints(mem: ObjectStore) -> None:
    with Table.create("t", mem, [b"m"], OPTS) as t:
        fill(t, {b"a": b"1"}, flush=True)
        snap = t.snapshot(timedelta(minutes=5), name=NAME)
        t.refresh_snapshot(snap, timedelta(days=2))
        soon = time.time() + timedelta(days=1).total_seconds()
        for s, cid in zip(snap.shards, snap.checkpoints, strict=True):
            (cp,) = [c for c in list_checkpoints(s.db_path, mem) if c.id == cid]
            assert cp.expire_time_s is not None and cp.expire_time_s > soon
        t.refresh_snapshot(snap, None)
        assert all(
            c.expire_time_s is None
            for s in snap.shards
            for c in list_checkpoints(s.db_path, mem)
            if c.id in snap.checkpoints
        )
        with pytest.raises(InvalidArgument):
            t.refresh_snapshot(NAME)  # type: ignore[arg-type]  # a name is not a snapshot
        t.delete_snapshot(NAME)
        with pytest.raises(CheckpointNotFound):
            t.refresh_snapshot(snap)


@pytest.mark.parametrize("bad", ["", "../x", "a/b", ".hidden", "x" * 129, "é", 7, b"bytes"])
def test_bad_snapshot_names_are_invalid_arguments(mem: ObjectStore, bad: object) -> None:
    with Table.create("t", mem, [], OPTS) as t:
        with pytest.raises(InvalidArgument):
            t.snapshot(name=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument):
            t.named_snapshot(bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument):
            t.delete_snapshot(bad)  # type: ignore[arg-type]
        assert t.snapshot_names() == []


def test_a_damaged_record_is_a_corruption_error(mem: ObjectStore) -> None:
    with Table.create("t", mem, [], OPTS) as t:
        t.snapshot(name=NAME)
        path = snapshot_record_path("t", NAME, 1)
        good = mem.get(path).data
        # a sound envelope (the record's own magic) around a document that is not a record
        mem.put(path, seal(good[:4], 1, json.dumps({"snapshot": {"shards": 3}}).encode()))
        with pytest.raises(CorruptionError):
            t.named_snapshot(NAME)
        mem.put(path, good[:-1] + bytes([good[-1] ^ 1]))  # a flipped bit
        with pytest.raises(CorruptionError):
            t.named_snapshot(NAME)
        mem.put(path, b"\xff not a record")
        with pytest.raises(CorruptionError):
            t.named_snapshot(NAME)


def test_collecting_garbage_deletes_old_versions_of_a_record_but_never_the_latest(
    mem: ObjectStore,
) -> None:
    with Table.create("t", mem, [b"m"], OPTS) as t:
        fill(t, {b"a": b"1"}, flush=True)
        for _ in range(3):
            t.snapshot(None, name=NAME)
        last = t.snapshot(None, name=NAME)
        t.snapshot(None, name="gone")
        t.delete_snapshot("gone")  # a tombstone is a latest version too: it stays
        assert t.collect_garbage(min_age=timedelta(hours=1)).snapshot_records == 0  # too young
        stats = t.collect_garbage(min_age=timedelta(0))
        assert stats.snapshot_records == 3 + 1
        records = [m.path for m in mem.list("t/snapshots/") if m.path.endswith(".snapshot")]
        assert sorted(records) == [
            snapshot_record_path("t", "end-of-day", 4),
            snapshot_record_path("t", "gone", 2),
        ]
        assert t.named_snapshot(NAME) == last and t.snapshot_names() == [NAME]
        again = t.snapshot(None, name=NAME)  # the name carries on above the boundary
        assert t.named_snapshot(NAME) == again
        assert named_checkpoints(mem, t, [s.db_path for s in t.shards]) == set(again.checkpoints)
        t.snapshot(None, name="gone")
        assert t.snapshot_names() == [NAME, "gone"]


def test_table_gc_sweeps_checkpoints_dead_creators_left_under_every_name(
    mem: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A creator of a new name dies after taking its checkpoints (lifetime None), before the
    name's first record: only the shards know the name. Table GC deletes them once older than
    SWEEP_MIN_AGE, and leaves every checkpoint a name's latest record holds."""
    faulty = FaultyStore(mem)
    with Table.create("t", mem, [b"m"], OPTS) as t:
        fill(t, {b"a": b"1", b"z": b"2"}, flush=True)
        kept = t.snapshot(None, name=NAME)
        dead = faulty.pause("dies", "put_if_absent", "t/snapshots/*")
        with Table.open("t", faulty, OPTS) as a:
            th = threading.Thread(target=lambda: a.snapshot(None, name="fresh"), daemon=True)
            th.start()
            try:
                assert dead.wait_reached()  # its checkpoints are taken; it is dead from here on
                cp_name = snapshot_checkpoint_name("t", "fresh")
                paths = [s.db_path for s in t.shards]
                left = [c for p in paths for c in list_checkpoints(p, mem, cp_name)]
                assert len(left) == len(paths) and "fresh" not in t.snapshot_names()
                assert t.collect_garbage(min_age=timedelta(0)).snapshot_checkpoints == 0  # young
                later = types.SimpleNamespace(time=lambda: time.time() + 2 * SWEEP_MIN_AGE.seconds)
                monkeypatch.setattr(named_mod, "time", later)
                stats = t.collect_garbage(min_age=timedelta(0))
                monkeypatch.undo()
                swept = [c for p in paths for c in list_checkpoints(p, mem, cp_name)]
            finally:
                faulty.clear_rules()
                dead.release()
                th.join(10)
        assert stats.snapshot_checkpoints == len(paths) and swept == []
        assert t.named_snapshot(NAME) == kept and snapshot_present(mem, kept)
