"""The shared update loop and boundary-first collection of sequenced objects (meta/versioned.py),
on a minimal object: a counter whose versions hold one integer."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from slatedb_core.errors import (
    CommitRetriesExhausted,
    Fenced,
    ObjectNotFound,
    ObjectVersionBehindBoundary,
    VersionExists,
)
from slatedb_core.meta.envelope import open_sealed, seal
from slatedb_core.meta.sequenced import SequencedEntry, SequencedStore
from slatedb_core.meta.versioned import (
    RetryPolicy,
    Settle,
    VersionedStore,
    collect_old_versions,
)
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store

FAST = RetryPolicy(max_attempts=5, max_backoff_s=0.001)


@dataclass(frozen=True, slots=True)
class Num:
    id: int
    value: int


def decode(object_id: int, data: bytes) -> Num:
    opened = open_sealed(data, magic=b"CNTR", name="n", versions=frozenset({1}))
    return Num(object_id, int(opened.payload))


def counters(
    store: ObjectStore,
    *,
    retry: RetryPolicy = FAST,
    settle: Settle[Num] | None = None,
    build_on_winner: int = 0,
) -> VersionedStore[Num, int]:
    seq = SequencedStore(store, "db", "counter", "counter")

    def read_latest() -> Num:
        found = seq.read_latest()
        return Num(0, 0) if found is None else decode(*found)

    return VersionedStore(
        seq,
        what="counter update",
        read_latest=read_latest,
        decode=decode,
        encode=lambda oid, value, _base: (seal(b"CNTR", 1, b"%d" % value), Num(oid, value)),
        retry=retry,
        settle=settle,
        build_on_winner=build_on_winner,
    )


def latest(store: ObjectStore) -> Num:
    found = SequencedStore(store, "db", "counter", "counter").read_latest()
    assert found is not None
    return decode(*found)


# ---- the update loop --------------------------------------------------------------------------
def test_a_lost_race_is_retried_on_the_winners_version(mem: ObjectStore) -> None:
    ours, theirs = counters(mem), counters(mem)
    stale = ours.update(lambda b: b.value + 1)  # id 1 = 1
    theirs.update(lambda b: b.value + 10)  # id 2 = 11
    done = ours.update(lambda b: b.value + 100, base=stale)  # loses id 2, commits id 3
    assert done == Num(3, 111) == latest(mem)


def test_a_fence_refuses_before_anything_is_written(mem: ObjectStore) -> None:
    store = counters(mem)
    store.update(lambda b: 7)

    def fence(base: Num) -> None:
        if base.value > 5:
            raise Fenced("compactor", 1, base.value)

    with pytest.raises(Fenced):
        store.update(lambda b: b.value + 1, fence=fence)
    assert store.seq.latest_id() == 1


def test_a_change_returning_none_commits_nothing(mem: ObjectStore) -> None:
    store = counters(mem)
    first = store.update(lambda b: 1)
    assert store.update(lambda b: None) == first
    assert store.seq.latest_id() == 1


def test_every_attempt_lost_ends_in_commit_retries_exhausted(mem: ObjectStore) -> None:
    ours, rival = counters(mem), counters(mem)
    attempts = 0

    def change(base: Num) -> int:
        nonlocal attempts
        attempts += 1
        rival.commit(base.id + 1, -1, base)  # someone else takes the id each time
        return base.value + 1

    with pytest.raises(CommitRetriesExhausted) as ei:
        ours.update(change)
    assert attempts == ei.value.attempts == FAST.max_attempts
    assert all(e.id <= FAST.max_attempts for e in ours.seq.list())


def test_a_create_behind_the_boundary_is_void_deleted_and_retried_on_the_latest(
    mem: ObjectStore,
) -> None:
    stale_writer, other = counters(mem), counters(mem)
    stale = stale_writer.update(lambda b: 1)  # id 1
    for _ in range(3):
        other.update(lambda b: b.value + 1)  # ids 2, 3, 4
    other.seq.advance_boundary(3)
    other.seq.delete(2)
    other.seq.delete(3)
    done = stale_writer.update(lambda b: b.value + 100, base=stale)  # id 2 is dead: void
    assert done == Num(5, 104) == latest(mem)
    with pytest.raises(ObjectNotFound):
        other.seq.read(2)


def test_a_settle_hook_can_find_a_create_behind_the_boundary_committed(mem: ObjectStore) -> None:
    settled: list[tuple[Num, int]] = []

    def settle(ours: Num, err: ObjectVersionBehindBoundary) -> bool:
        settled.append((ours, err.boundary))
        return True

    store = counters(mem, settle=settle)
    store.update(lambda b: 1)
    store.update(lambda b: 2)
    store.update(lambda b: 3)
    store.seq.advance_boundary(2)
    store.seq.delete(2)
    assert store.commit(2, 20, None) == Num(2, 20)
    assert settled == [(Num(2, 20), 2)]
    store.seq.delete(2)
    with pytest.raises(ObjectVersionBehindBoundary):
        counters(mem).commit(2, 21, None)  # the default settlement: void, and deleted
    with pytest.raises(ObjectNotFound):
        store.seq.read(2)


def test_a_single_commit_of_a_taken_id_raises_version_exists(mem: ObjectStore) -> None:
    store = counters(mem)
    store.commit(1, 5, None)
    with pytest.raises(VersionExists):
        store.commit(1, 6, None)


def test_building_on_the_winners_bytes_saves_the_read_of_the_latest(mem: ObjectStore) -> None:
    for build_on_winner, lists in ((0, 1), (3, 0)):
        store = open_store(f"memory://versioned-{uuid.uuid4().hex}")
        ours, rival = counters(store, build_on_winner=build_on_winner), counters(store)
        stale = ours.update(lambda b: 1)
        rival.update(lambda b: 2)
        before = store.counters.snapshot().get("list", 0)
        assert ours.update(lambda b: b.value + 10, base=stale) == Num(3, 12)
        assert store.counters.snapshot().get("list", 0) - before == lists


def test_full_jitter_backoff_stays_within_its_slots() -> None:
    policy = RetryPolicy(max_attempts=10, max_backoff_s=0.2, min_backoff_s=0.001)
    for attempt in range(1, 12):
        cap = min(0.2, 0.004 * 2 ** min(attempt, 10))
        waits = [policy.backoff_s(attempt, 0.004) for _ in range(200)]
        assert all(0 <= w <= cap for w in waits)
        assert max(waits) > cap / 2  # jittered over the whole slot, not a fixed wait
    assert max(policy.backoff_s(1, 0.0) for _ in range(200)) <= 0.002  # slot >= min_backoff_s


# ---- boundary-first collection ----------------------------------------------------------------
NOW = datetime(2026, 1, 1, tzinfo=UTC).timestamp()


def entries(*ages_s: float) -> list[SequencedEntry]:
    return [
        SequencedEntry(i, f"db/counter/{i}", 1, datetime.fromtimestamp(NOW - age, UTC))
        for i, age in enumerate(ages_s, start=1)
    ]


def test_the_boundary_is_durable_before_any_delete_and_never_covers_the_latest(
    mem: ObjectStore,
) -> None:
    seq = SequencedStore(mem, "db", "counter", "counter")
    seen: list[tuple[list[int], int]] = []

    def delete(doomed: Sequence[SequencedEntry]) -> None:
        fresh = SequencedStore(mem, "db", "counter", "counter").boundary.read()
        seen.append(([e.id for e in doomed], fresh))

    listed = entries(50, 40, 30, 2, 1)  # ids 1..5; 4 and 5 are younger than 10 s
    assert (
        collect_old_versions(
            seq.boundary, listed, 5, min_age_s=10, now_s=NOW, delete=delete, keep={2}
        )
        == 3
    )
    assert seen == [([1, 3], 3)]
    old = entries(50, 40, 30)
    assert (
        collect_old_versions(seq.boundary, old, 3, min_age_s=0, now_s=NOW, delete=delete) == 3
    )  # the latest (3) is never a target, even when old enough
    assert seen[-1] == ([1, 2], 3)


def test_nothing_old_enough_moves_and_reads_nothing(mem: ObjectStore) -> None:
    seq = SequencedStore(mem, "db", "counter", "counter")
    before = mem.counters.snapshot()

    def delete(doomed: Sequence[SequencedEntry]) -> None:
        raise AssertionError(f"nothing may be deleted, got {doomed}")

    window = timedelta(minutes=1).total_seconds()
    assert (
        collect_old_versions(
            seq.boundary, entries(5, 4, 3), 3, min_age_s=window, now_s=NOW, delete=delete
        )
        is None
    )
    assert mem.counters.snapshot() == before
