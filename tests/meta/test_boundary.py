from __future__ import annotations

import threading

import pytest

from slatedb_core.errors import BoundaryMissing, CorruptionError, ObjectVersionBehindBoundary
from slatedb_core.meta.boundary import BoundaryObject
from slatedb_core.store.objectstore import ObjectStore

PATH = "db/gc/manifest.boundary"


def test_missing_boundary_reads_as_zero(store: ObjectStore) -> None:
    assert BoundaryObject(store, PATH).read() == 0


def test_advance_creates_then_moves_forward_only(store: ObjectStore) -> None:
    b = BoundaryObject(store, PATH)
    assert b.advance(5) == 5
    assert store.get(PATH).data == b"5"
    assert b.advance(3) == 5  # already past: nothing written
    assert store.get(PATH).data == b"5"
    assert b.advance(9) == 9
    assert BoundaryObject(store, PATH).read() == 9


def test_check_rejects_ids_at_or_behind_boundary(store: ObjectStore) -> None:
    b = BoundaryObject(store, PATH)
    b.advance(7)
    with pytest.raises(ObjectVersionBehindBoundary) as ei:
        b.check(7, "db/manifest/x")
    assert ei.value.boundary == 7 and ei.value.object_id == 7
    assert b.check(8, "db/manifest/y") == 7


def test_check_sees_an_advance_made_by_another_process(store: ObjectStore) -> None:
    ours, gc = BoundaryObject(store, PATH), BoundaryObject(store, PATH)
    assert ours.check(3, "p") == 0
    gc.advance(4)
    with pytest.raises(ObjectVersionBehindBoundary):
        ours.check(3, "p")


def test_cached_check_uses_a_conditional_get(store: ObjectStore) -> None:
    b = BoundaryObject(store, PATH)
    b.advance(2)
    b.read()
    before = store.counters.snapshot()
    for _ in range(5):
        b.check(10, "p")
    after = store.counters.snapshot()
    assert after["get"] - before["get"] == 5
    assert sum(after.values()) - sum(before.values()) == 5


@pytest.mark.parametrize(
    "content", [b"", b"abc", b"-1", b"1.5", b" 12x", b"99999999999999999999999"]
)
def test_bad_boundary_content_is_corruption(store: ObjectStore, content: bytes) -> None:
    store.put(PATH, content)
    with pytest.raises(CorruptionError) as ei:
        BoundaryObject(store, PATH).read()
    assert PATH in str(ei.value)


def test_boundary_that_disappears_after_being_seen_is_a_hard_error(store: ObjectStore) -> None:
    b = BoundaryObject(store, PATH)
    b.advance(3)
    assert b.read() == 3
    store.delete(PATH)
    with pytest.raises(BoundaryMissing):
        b.read()
    with pytest.raises(BoundaryMissing):
        b.check(10, "p")


def test_boundary_moving_backwards_is_corruption(store: ObjectStore) -> None:
    b = BoundaryObject(store, PATH)
    b.advance(8)
    b.read()
    store.put(PATH, b"4")
    with pytest.raises(CorruptionError):
        b.read()


def test_concurrent_advances_end_at_the_maximum(store: ObjectStore) -> None:
    targets = list(range(1, 17))
    errors: list[BaseException] = []

    def run(t: int) -> None:
        try:
            got = BoundaryObject(store, PATH).advance(t)
            assert got >= t
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(t,)) for t in targets]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert BoundaryObject(store, PATH).read() == max(targets)
