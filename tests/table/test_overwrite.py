"""Overwriting a sharded table (slatedb_core.table.overwrite, docs/overwrite.md): the contents
replaced in one step readers see as before or after, crashes resumed, conflicts refused with
the table unchanged, retries idempotent, old writers fenced, aborts leaving nothing behind."""

from __future__ import annotations

import dataclasses
import threading
import uuid
from datetime import timedelta

import pytest

from slatedb_core.errors import (
    CorruptionError,
    Fenced,
    InvalidArgument,
    ShardMapConflict,
    SlateDBError,
)
from slatedb_core.manifest.model import AppVersion
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.table import Table, rescale
from slatedb_core.table import overwrite as ow
from slatedb_core.table.ingest import (
    SKIPPED,
    WRITTEN,
    IngestPlan,
    table_app_versions,
)
from slatedb_core.table.overwrite import abort_overwrite, commit_overwrite, plan_overwrite
from slatedb_core.table.shardmap import (
    PendingOp,
    ShardMapStore,
    ValueEncoding,
    decode_shard_map,
    encode_shard_map,
    layout_problem,
)
from slatedb_core.testing import FaultyStore
from tests.table.conftest import OPTS
from tests.table.overwrite_steps import (
    NEW,
    OLD,
    SPLITS,
    batch,
    contents,
    gone,
    old_table,
    stage,
)


def assert_unchanged(store: ObjectStore, plan: IngestPlan, map_shards: list[int]) -> None:
    m = ShardMapStore(store, "t").read_latest()
    assert [s.shard_id for s in m.shards] == map_shards
    assert not m.pending and not any(s.sealed for s in m.shards)
    assert contents(store) == OLD
    for t in plan.shards:
        assert gone(store, t.db_path), t.db_path


# ---- contents ---------------------------------------------------------------------------------
def check_replaced(store: ObjectStore) -> None:
    with old_table(store, check=True) as t:
        before = [s.db_path for s in t.shards]
        stats = t.overwrite([batch(NEW)])
        assert [s.status for s in stats] == [WRITTEN] * 3
        assert sum(s.rows for s in stats) == len(NEW)
        assert dict(t.scan()) == NEW
        assert t.get(b"a1") is None and t.get(b"c2") == b"new-c2"
        m = t.shard_map
        assert m.split_points == tuple(SPLITS) and not m.pending
        assert set(m.retired) == set(before)
        assert all(gone(store, p) for p in before)  # soft-destroyed
        # the new shards are ordinary shards: writes, splits and another overwrite work
        with t.writer(0) as db:
            db.put(b"a1", b"after")
        t.refresh()
        t.split(2, b"t")
        assert dict(t.scan()) == {**NEW, b"a1": b"after"}
    assert contents(store) == {**NEW, b"a1": b"after"}
    # nothing staged is left
    assert not [o.path for o in store.list("t/_ingest/") if "/staged/" in o.path]


def test_overwrite_replaces_the_contents_local(local: ObjectStore) -> None:
    check_replaced(local)


@pytest.mark.s3
def test_overwrite_replaces_the_contents_s3(s3_url: str) -> None:
    check_replaced(open_store(s3_url))


def test_overwrite_with_deletes_and_an_empty_input(mem: ObjectStore) -> None:
    with old_table(mem, check=True) as t:
        t.overwrite([batch({b"b": b"1", b"c": None, b"q": b"2"})])
        assert dict(t.scan()) == {b"b": b"1", b"q": b"2"}
        stats = t.overwrite([])
        assert [s.rows for s in stats] == [0, 0, 0]
        assert list(t.scan()) == []


def test_overwrite_sets_or_clears_the_value_encoding(mem: ObjectStore) -> None:
    enc = ValueEncoding("json", '{"type":"struct","fields":[]}')
    with old_table(mem, check=True) as t:
        t.record_value_encoding(ValueEncoding("arrow", '{"type":"struct"}'))
        t.overwrite([batch(NEW)], value_encoding=enc)
        assert t.value_encoding == enc
        t.overwrite([batch(NEW)])  # plain values now
        assert t.value_encoding is None


def test_bad_arguments(mem: ObjectStore) -> None:
    with old_table(mem, check=True) as t:
        plan = plan_overwrite("t", mem)
        with pytest.raises(InvalidArgument, match="staged"):
            commit_overwrite(mem, plan, "r", {3: []})
        with pytest.raises(InvalidArgument, match="staged"):
            commit_overwrite(mem, plan, "r", {0: ["x"]})  # type: ignore[list-item]
        with pytest.raises(InvalidArgument, match="run_id"):
            commit_overwrite(mem, plan, "", {})
        with pytest.raises(InvalidArgument, match="value_encoding"):
            commit_overwrite(mem, plan, "r", {}, value_encoding="json")  # type: ignore[arg-type]
        append = IngestPlan("t", "j", t.shard_map)
        with pytest.raises(InvalidArgument, match="not an overwrite plan"):
            commit_overwrite(mem, append, "r", {})
        abort_overwrite(mem, plan)
    assert contents(mem) == OLD


# ---- readers ----------------------------------------------------------------------------------
def test_readers_see_all_old_or_all_new_never_a_mix(mem: ObjectStore) -> None:
    with old_table(mem, check=True) as t:
        before = t.snapshot(lifetime=None)
        stop = threading.Event()
        seen: list[str] = []
        errors: list[BaseException] = []

        def read_snapshots() -> None:
            try:
                with Table.open("t", mem, OPTS) as r:
                    while not stop.is_set():
                        snap = r.snapshot(lifetime=timedelta(minutes=5))
                        with Table.open("t", mem, OPTS, snapshot=snap) as view:
                            got = dict(view.scan())
                            assert (
                                dict(zip(sorted(got), view.get_many(sorted(got)), strict=True))
                                == got
                            )
                        r.release_snapshot(snap)
                        assert got in (OLD, NEW), got
                        seen.append("old" if got == OLD else "new")
            except BaseException as e:  # reported by the main thread
                errors.append(e)

        reader = threading.Thread(target=read_snapshots)
        reader.start()
        try:
            for _ in range(3):
                t.overwrite([batch(OLD)])
                t.overwrite([batch(NEW)])
        finally:
            stop.set()
            reader.join(60)
        assert not errors, errors[0]
        assert seen, seen
        print("reads:", seen.count("old"), "old,", seen.count("new"), "new")
        assert dict(t.scan()) == NEW
        # the snapshot taken before every overwrite still reads the first contents (its
        # checkpoints keep the retired, soft-destroyed databases' SSTs)
        with Table.open("t", mem, OPTS, snapshot=before) as view:
            assert dict(view.scan()) == OLD
            assert view.get(b"a1") == b"old-a1"
        t.release_snapshot(before)
        after = t.snapshot(lifetime=None)
        with Table.open("t", mem, OPTS, snapshot=after) as view:
            assert dict(view.scan()) == NEW


def test_live_reads_see_all_old_or_all_new_never_a_mix(mem: ObjectStore) -> None:
    """Reads without a snapshot open every shard's reader on one map version before reading:
    a scan or get_many that found a shard destroyed mid-way used to re-read the map and read
    the rest from the overwrite's new shards (a mix of old and new)."""
    with old_table(mem, check=True) as t:
        stop = threading.Event()
        seen: list[str] = []
        mixes: list[object] = []

        def read_live() -> None:
            keys = sorted({*OLD, *NEW})
            while not stop.is_set():
                with Table.open("t", mem, OPTS) as r:
                    got = dict(r.scan())
                with Table.open("t", mem, OPTS) as r:
                    many = {k: v for k, v in zip(keys, r.get_many(keys), strict=True) if v}
                for view in (got, many):
                    if view not in (OLD, NEW):
                        mixes.append(view)
                    seen.append("old" if view == OLD else "new")

        reader = threading.Thread(target=read_live)
        reader.start()
        try:
            for _ in range(10):
                t.overwrite([batch(OLD)])
                t.overwrite([batch(NEW)])
        finally:
            stop.set()
            reader.join(60)
        assert seen
        assert not mixes, f"{len(mixes)} of {len(seen)} reads mixed old and new: {mixes[0]}"


# ---- crashes, retries, conflicts, aborts --------------------------------------------------------
def test_a_crash_after_the_seal_is_finished_by_resume(mem: ObjectStore) -> None:
    faulty = FaultyStore(mem)
    with old_table(mem, check=True) as t:
        plan = plan_overwrite("t", mem, txn=AppVersion("loader", 3))
        staged = stage(mem, plan, "run1", NEW)
        # step 4 fences the first source: its manifest update is the first write after the seal
        faulty.fail_next("put_if_absent", f"{t.shards[0].db_path}/manifest/*", times=50)
        with pytest.raises(SlateDBError):
            commit_overwrite(faulty, plan, "run1", staged)
        m = ShardMapStore(mem, "t").read_latest()
        (op,) = m.pending  # sealed, as read back from the store
        assert op.kind == "replace" and op.txn == AppVersion("loader", 3)
        assert all(s.sealed for s in m.shards)
        assert contents(mem) == OLD  # readers go on reading the old contents
        with pytest.raises(ShardMapConflict, match="sealed"):
            t.writer(1)
        with pytest.raises(ShardMapConflict, match="replace"):
            t.split(0, b"c")
        with pytest.raises(ShardMapConflict):
            plan_overwrite("t", mem)
        done = t.resume()
        assert [s.shard_id for s in done.shards] == [s.shard_id for s in plan.shards]
        assert dict(t.scan()) == NEW
        assert set(table_app_versions(mem, "t", "loader").values()) == {3}
        # the commit retried after the resume reports the overwrite, changing nothing
        again = commit_overwrite(mem, plan, "run1", staged)
        assert [s.status for s in again] == [WRITTEN] * 3
        assert contents(mem) == NEW


def test_a_commit_retried_after_failing_midway_is_idempotent(mem: ObjectStore) -> None:
    faulty = FaultyStore(mem)
    with old_table(mem, check=True) as t:
        plan = plan_overwrite("t", mem)
        staged = stage(mem, plan, "run1", NEW)
        # the last target's ingest fails: the first two are built, nothing is sealed
        faulty.fail_next("put_if_absent", f"{plan.shards[2].db_path}/manifest/*", times=50)
        with pytest.raises(SlateDBError):
            commit_overwrite(faulty, plan, "run1", staged)
        assert not ShardMapStore(mem, "t").read_latest().pending
        assert contents(mem) == OLD
        l0_before = ManifestStore(mem, plan.shards[0].db_path).read_latest().manifest.l0
        assert l0_before
        stats = commit_overwrite(mem, plan, "run1", staged)
        assert [s.status for s in stats] == [WRITTEN] * 3
        assert "earlier attempt" in stats[0].message and stats[2].message == ""
        # built once: the retry did not ingest the first target again
        l0_after = ManifestStore(mem, plan.shards[0].db_path).read_latest().manifest.l0
        assert l0_after == l0_before
        t.refresh()
        assert dict(t.scan()) == NEW
        # after a commit that only failed to retire the sources, a retry retires them
        plan2 = plan_overwrite("t", mem)
        staged2 = stage(mem, plan2, "run2", OLD)
        faulty.clear_rules()
        faulty.fail_next("put_if_absent", f"{plan.shards[1].db_path}/manifest/*", times=50)
        with pytest.raises(SlateDBError):
            commit_overwrite(faulty, plan2, "run2", staged2)
        m = ShardMapStore(mem, "t").read_latest()
        # the fence of the second source failed: still pending, or committed and not retired
        assert m.pending or plan.shards[1].db_path in m.retired
        commit_overwrite(mem, plan2, "run2", staged2)
        assert contents(mem) == OLD
        assert all(gone(mem, s.db_path) for s in plan.shards)


def test_a_split_after_planning_fails_the_overwrite_cleanly(mem: ObjectStore) -> None:
    with old_table(mem, check=True) as t:
        plan = plan_overwrite("t", mem)
        staged = stage(mem, plan, "run1", NEW)
        t.split(0, b"c")
        ids = [s.shard_id for s in ShardMapStore(mem, "t").read_latest().shards]
        with pytest.raises(ShardMapConflict, match="plan it again"):
            commit_overwrite(mem, plan, "run1", staged)
        assert_unchanged(mem, plan, ids)


def test_a_split_between_build_and_seal_fails_the_overwrite_cleanly(
    mem: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    with old_table(mem, check=True) as t:
        plan = plan_overwrite("t", mem)
        staged = stage(mem, plan, "run1", NEW)
        build = ow._build
        splits: list[int] = []

        def build_then_split(*args: object, **kwargs: object) -> object:
            out = build(*args, **kwargs)  # type: ignore[arg-type]
            if not splits:
                splits.append(1)
                with Table.open("t", mem, OPTS) as other:
                    other.split(2, b"t")
            return out

        monkeypatch.setattr(ow, "_build", build_then_split)
        with pytest.raises(ShardMapConflict):
            commit_overwrite(mem, plan, "run1", staged)
        ids = [s.shard_id for s in ShardMapStore(mem, "t").read_latest().shards]
        assert len(ids) == 4
        assert_unchanged(mem, plan, ids)
        t.refresh()
        with t.writer(0) as db:  # not sealed
            db.put(b"a9", b"x")


def test_two_overwrites_planned_together_apply_in_commit_order(mem: ObjectStore) -> None:
    with old_table(mem, check=True):
        first = plan_overwrite("t", mem)
        second = plan_overwrite("t", mem)
        s1, s2 = stage(mem, first, "r1", NEW), stage(mem, second, "r2", {b"x": b"2"})
        commit_overwrite(mem, second, "r2", s2)
        with pytest.raises(ShardMapConflict):  # its base was replaced by the later plan's
            commit_overwrite(mem, first, "r1", s1)
        assert contents(mem) == {b"x": b"2"}
        assert all(gone(mem, s.db_path) for s in first.shards)


def test_abort_leaves_the_table_unchanged_and_no_targets(mem: ObjectStore) -> None:
    faulty = FaultyStore(mem)
    with old_table(mem, check=True) as t:
        ids = [s.shard_id for s in t.shards]
        plan = plan_overwrite("t", mem)
        abort_overwrite(mem, plan)  # nothing built yet
        abort_overwrite(mem, plan)
        assert_unchanged(mem, plan, ids)
        # built, then the job fails before its commit finished
        staged = stage(mem, plan, "run1", NEW)
        faulty.fail_next("put_if_absent", f"{plan.shards[1].db_path}/manifest/*", times=50)
        with pytest.raises(SlateDBError):
            commit_overwrite(faulty, plan, "run1", staged)
        assert not gone(mem, plan.shards[0].db_path)
        abort_overwrite(mem, plan)
        assert_unchanged(mem, plan, ids)
        # sealed, then aborted: the shards are unsealed and take writes again
        plan2 = plan_overwrite("t", mem)
        staged2 = stage(mem, plan2, "run2", NEW)
        faulty.clear_rules()
        faulty.fail_next("put_if_absent", f"{t.shards[0].db_path}/manifest/*", times=50)
        with pytest.raises(SlateDBError):
            commit_overwrite(faulty, plan2, "run2", staged2)
        assert ShardMapStore(mem, "t").read_latest().pending
        abort_overwrite(mem, plan2)
        assert_unchanged(mem, plan2, ids)
        t.refresh()
        with t.writer(0) as db:
            db.put(b"a9", b"x")
        t.refresh()
        assert t.get(b"a9") == b"x"
        # an abort after the commit keeps the new contents
        plan3 = plan_overwrite("t", mem)
        commit_overwrite(mem, plan3, "run3", stage(mem, plan3, "run3", NEW))
        abort_overwrite(mem, plan3)
        assert contents(mem) == NEW


def test_table_overwrite_aborts_on_failure(mem: ObjectStore) -> None:
    faulty = FaultyStore(mem)
    with old_table(mem, check=True) as t:
        ids = [s.shard_id for s in t.shards]
        faulty.fail_next("put_if_absent", f"{t.shards[2].db_path}/manifest/*", times=50)
        with Table.open("t", faulty, OPTS) as tf, pytest.raises(SlateDBError):
            tf.overwrite([batch(NEW)])
        m = ShardMapStore(mem, "t").read_latest()
        assert [s.shard_id for s in m.shards] == ids and not m.pending
        assert contents(mem) == OLD
        t.refresh()
        with t.writer(2) as db:
            db.put(b"z9", b"x")


# ---- writers ----------------------------------------------------------------------------------
def test_a_writer_on_an_old_shard_is_fenced_and_its_later_write_refused(
    mem: ObjectStore,
) -> None:
    with old_table(mem, check=True) as t:
        old = t.shards[1]
        w = t.writer(1)
        try:
            w.put(b"h9", b"acked")  # acknowledged before the overwrite: replaced by it
            t.overwrite([batch(NEW)])
            with pytest.raises(Fenced):
                w.put(b"h10", b"refused")
        finally:
            try:
                w.close()
            except Fenced:
                pass
        assert dict(t.scan()) == NEW
        assert contents(mem) == NEW
        with pytest.raises(ShardMapConflict):  # the old shard is gone from the map
            t.writer(old)


def test_a_write_between_the_seal_and_the_swap_is_refused_not_lost(
    mem: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer opened before the seal tries to write after the fence (step 4), before the
    swap: it must raise, not be acknowledged into a database about to be retired."""
    with old_table(mem, check=True) as t:
        w = t.writer(2)
        w.put(b"q9", b"acked before")
        carry = rescale._carry_records
        outcomes: list[str] = []

        def write_then_carry(*args: object, **kwargs: object) -> bool:
            try:
                w.put(b"q10", b"between seal and swap")
                outcomes.append("acknowledged")
            except Fenced:
                outcomes.append("fenced")
            return carry(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(rescale, "_carry_records", write_then_carry)
        t.overwrite([batch(NEW)])
        assert outcomes == ["fenced"]
        try:
            w.close()
        except Fenced:
            pass
        assert dict(t.scan()) == NEW


# ---- exactly-once -----------------------------------------------------------------------------
def test_an_applied_txn_makes_the_overwrite_a_no_op(mem: ObjectStore) -> None:
    with old_table(mem, check=True) as t:
        with t.writer(0) as db:
            db.record_transactions([AppVersion("other", 9)])
        t.overwrite([batch(NEW)], txn=AppVersion("loader", 5))
        assert dict(t.scan()) == NEW
        # each new shard carries the records of the old shard of its range (issue 37, hole 1),
        # and every one the overwrite's
        assert table_app_versions(mem, "t", "other") == {0: 9, 1: None, 2: None}
        assert set(table_app_versions(mem, "t", "loader").values()) == {5}
        ids = [s.shard_id for s in t.shards]
        for v in (5, 4):
            stats = t.overwrite([batch(OLD)], txn=AppVersion("loader", v))
            assert [s.status for s in stats] == [SKIPPED] * 3
            assert "already applied" in stats[0].message
        assert [s.shard_id for s in t.refresh().shards] == ids
        assert dict(t.scan()) == NEW
        t.overwrite([batch(OLD)], txn=AppVersion("loader", 6))
        assert dict(t.scan()) == OLD


def test_a_txn_applied_after_the_early_check_cancels_the_sealed_overwrite(
    mem: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decision is taken again once the sources are fenced: a batch of the same app that
    commits to a source between the early check and the seal wins, and the overwrite (an
    older batch) is dropped with its targets."""
    with old_table(mem, check=True) as t:
        ids = [s.shard_id for s in t.shards]
        plan = plan_overwrite("t", mem, txn=AppVersion("loader", 5))
        staged = stage(mem, plan, "run1", NEW)
        build = ow._build
        done: list[int] = []

        def build_then_commit_a_later_batch(*args: object, **kwargs: object) -> object:
            out = build(*args, **kwargs)  # type: ignore[arg-type]
            if not done:
                done.append(1)
                with Table.open("t", mem, OPTS) as other, other.writer(1) as db:
                    db.put(b"h9", b"batch 6")
                    db.record_transactions([AppVersion("loader", 6)])
            return out

        monkeypatch.setattr(ow, "_build", build_then_commit_a_later_batch)
        stats = commit_overwrite(mem, plan, "run1", staged)
        assert [s.status for s in stats] == [SKIPPED] * 3
        m = ShardMapStore(mem, "t").read_latest()
        assert [s.shard_id for s in m.shards] == ids and not m.pending
        assert contents(mem) == {**OLD, b"h9": b"batch 6"}
        assert all(gone(mem, s.db_path) for s in plan.shards)


def test_plan_refuses_a_table_held_by_a_pending_rescale(mem: ObjectStore) -> None:
    faulty = FaultyStore(mem)
    with old_table(mem, check=True) as t:
        # a split whose run died after its seal
        faulty.fail_next("put_if_absent", f"{t.shards[0].db_path}/manifest/*", times=50)
        with Table.open("t", faulty, OPTS) as tf, pytest.raises(SlateDBError):
            tf.split(0, b"c")
        with pytest.raises(ShardMapConflict, match="split"):
            plan_overwrite("t", mem)
        t.resume()
        t.overwrite([batch(NEW)])
        assert dict(t.scan()) == NEW


# ---- the map codec ----------------------------------------------------------------------------
def test_a_pending_replace_round_trips_and_bad_ones_are_refused(mem: ObjectStore) -> None:
    with old_table(mem, check=True) as t:
        m = t.shard_map
        enc = ValueEncoding("arrow", '{"type":"struct"}')
        targets = tuple((10 + s.index, s.key_range) for s in m.shards)
        op = PendingOp(
            uuid.uuid4(),
            "replace",
            tuple(s.shard_id for s in m.shards),
            targets,
            1.5,
            AppVersion("app", 7),
            enc,
        )
        sealed = dataclasses.replace(m, next_shard_id=20, pending=(op,))
        data = encode_shard_map(sealed, "t")
        back = decode_shard_map(data, map_id=9, table_path="t", name="x")
        assert back.pending == (op,) and all(s.sealed for s in back.shards)
        plain = dataclasses.replace(op, txn=None, value_encoding=None)
        back = decode_shard_map(
            encode_shard_map(dataclasses.replace(sealed, pending=(plain,)), "t"),
            map_id=9,
            table_path="t",
            name="x",
        )
        assert back.pending == (plain,)
        bad = [
            dataclasses.replace(op, sources=op.sources[:2]),  # not every shard
            dataclasses.replace(op, kind="split"),  # a split with a txn
            dataclasses.replace(op, kind="swap", txn=None, value_encoding=None),
        ]
        for b in bad:
            assert layout_problem(dataclasses.replace(sealed, pending=(b,))) is not None, b
            with pytest.raises(CorruptionError):
                decode_shard_map(
                    encode_shard_map(dataclasses.replace(sealed, pending=(b,)), "t"),
                    map_id=9,
                    table_path="t",
                    name="x",
                )
