from __future__ import annotations

import threading

import pytest

from slatedb_core.errors import (
    InvalidArgument,
    InvalidDeletion,
    ManifestVersionExists,
    ObjectVersionBehindBoundary,
    VersionExists,
)
from slatedb_core.meta.envelope import seal
from slatedb_core.meta.sequenced import SequencedStore
from slatedb_core.store.objectstore import ObjectStore


def payload(i: int) -> bytes:
    return seal(b"TEST", 1, f"v{i}".encode())


def fill(seq: SequencedStore, n: int) -> None:
    for i in range(1, n + 1):
        seq.create(i, payload(i))


def test_names_are_zero_padded_and_parse_back(store: ObjectStore) -> None:
    seq = SequencedStore(store, "db", "manifest", "manifest")
    assert seq.path(12) == "db/manifest/00000000000000000012.manifest"
    assert seq.parse(seq.path(12)) == 12
    assert seq.parse("db/manifest/_latest_version") is None
    assert seq.parse("db/manifest/12.manifest") is None


def test_empty_namespace_has_no_latest(store: ObjectStore) -> None:
    assert SequencedStore(store, "db", "manifest", "manifest").latest_id() is None


def test_create_then_latest_and_read(store: ObjectStore) -> None:
    seq = SequencedStore(store, "db", "manifest", "manifest")
    fill(seq, 3)
    assert seq.latest_id() == 3
    latest = seq.read_latest()
    assert latest is not None and latest[0] == 3 and latest[1] == seq.read(3)
    assert [e.id for e in seq.list()] == [1, 2, 3]
    assert [e.id for e in seq.list(start=2)] == [2, 3]
    assert [e.id for e in seq.list(end=3)] == [1, 2]


def test_id_zero_is_never_created(store: ObjectStore) -> None:
    with pytest.raises(InvalidArgument):
        SequencedStore(store, "db", "manifest", "manifest").create(0, payload(0))


def test_second_create_of_an_id_loses(store: ObjectStore) -> None:
    seq = SequencedStore(store, "db", "manifest", "manifest")
    first = payload(1)
    seq.create(1, first)
    with pytest.raises(VersionExists) as ei:
        seq.create(1, payload(99))
    assert ei.value.object_id == 1
    assert seq.read(1) == first


def test_create_that_finds_its_own_bytes_is_a_success(store: ObjectStore) -> None:
    """An earlier attempt landed but its response was lost: the retry must not report a conflict."""
    seq = SequencedStore(store, "db", "manifest", "manifest")
    data = payload(1)
    store.put_if_absent(seq.path(1), data)  # the "lost response" attempt
    seq.create(1, data)
    assert seq.latest_id() == 1


@pytest.mark.parametrize("versions", [10, 200])
def test_latest_lookup_costs_at_most_two_requests(store: ObjectStore, versions: int) -> None:
    seq = SequencedStore(store, "db", "manifest", "manifest")
    fill(seq, versions)
    store.counters.reset()
    assert seq.latest_id() == versions
    assert store.counters.total() <= 2


def test_latest_is_correct_without_a_pointer(store: ObjectStore) -> None:
    seq = SequencedStore(store, "db", "manifest", "manifest")
    fill(seq, 5)
    store.delete(seq.pointer_path)
    assert seq.latest_id() == 5


@pytest.mark.parametrize("garbage", [b"", b"nonsense", b"-3", b"1" * 30, b"\xff\xfe"])
def test_latest_is_correct_with_a_garbage_pointer(store: ObjectStore, garbage: bytes) -> None:
    seq = SequencedStore(store, "db", "manifest", "manifest")
    fill(seq, 5)
    store.put(seq.pointer_path, garbage)
    assert seq.latest_id() == 5


def test_latest_is_correct_with_a_pointer_ahead_of_reality(store: ObjectStore) -> None:
    seq = SequencedStore(store, "db", "manifest", "manifest")
    fill(seq, 5)
    store.put(seq.pointer_path, b"4000")
    assert seq.latest_id() == 5


def test_latest_is_correct_with_a_stale_pointer(store: ObjectStore) -> None:
    seq = SequencedStore(store, "db", "manifest", "manifest", pointer_stride=1000)
    fill(seq, 40)
    assert store.get(seq.pointer_path).data == b"1"
    assert seq.latest_id() == 40


def test_latest_is_correct_when_the_pointed_object_was_collected(store: ObjectStore) -> None:
    seq = SequencedStore(store, "db", "manifest", "manifest", pointer_stride=4)
    fill(seq, 6)  # pointer says 4
    seq.advance_boundary(5)
    for i in range(1, 6):
        seq.delete(i)
    assert seq.latest_id() == 6


def test_create_behind_the_boundary_is_rejected_not_committed(store: ObjectStore) -> None:
    seq = SequencedStore(store, "db", "manifest", "manifest")
    fill(seq, 4)
    seq.advance_boundary(3)
    seq.delete(2)
    with pytest.raises(ObjectVersionBehindBoundary) as ei:
        seq.create(2, payload(2))  # create-if-absent "succeeds": the id was collected
    assert ei.value.boundary == 3


def test_delete_ahead_of_the_boundary_is_refused(store: ObjectStore) -> None:
    seq = SequencedStore(store, "db", "manifest", "manifest")
    fill(seq, 4)
    with pytest.raises(InvalidDeletion):
        seq.delete(1)
    seq.advance_boundary(2)
    seq.delete(1)
    with pytest.raises(InvalidDeletion):
        seq.delete(3)
    assert [e.id for e in seq.list()] == [2, 3, 4]


def test_boundary_never_covers_the_latest(store: ObjectStore) -> None:
    seq = SequencedStore(store, "db", "manifest", "manifest")
    fill(seq, 3)
    with pytest.raises(InvalidDeletion):
        seq.advance_boundary(3)
    with pytest.raises(InvalidDeletion):
        seq.delete(3)


def test_racing_creates_have_exactly_one_winner_per_id(store: ObjectStore) -> None:
    seq = SequencedStore(store, "db", "manifest", "manifest")
    winners: list[int] = []
    lock = threading.Lock()
    datas = [payload(100 + t) for t in range(8)]

    def run(t: int) -> None:
        s = SequencedStore(store, "db", "manifest", "manifest")
        try:
            s.create(1, datas[t])
            with lock:
                winners.append(t)
        except VersionExists:
            pass

    threads = [threading.Thread(target=run, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(winners) == 1
    assert seq.read(1) == datas[winners[0]]


def test_db_path_must_be_relative_and_clean(store: ObjectStore) -> None:
    for bad in ["/abs", "../up", "a/../b", "a//b", ""]:
        with pytest.raises(InvalidArgument):
            SequencedStore(store, bad, "manifest", "manifest")


def test_compactions_namespace_has_its_own_ids_and_boundary(store: ObjectStore) -> None:
    manifests = SequencedStore(store, "db", "manifest", "manifest")
    compactions = SequencedStore(store, "db", "compactions", "compactions")
    fill(manifests, 3)
    fill(compactions, 5)
    assert compactions.path(5) == "db/compactions/00000000000000000005.compactions"
    assert (manifests.latest_id(), compactions.latest_id()) == (3, 5)
    compactions.advance_boundary(4)
    assert store.get("db/gc/compactions.boundary").data == b"4"
    assert manifests.boundary.read() == 0
    manifests.create(4, payload(4))  # unaffected by the compactions boundary
    compactions.delete(4)
    with pytest.raises(ObjectVersionBehindBoundary):
        compactions.create(4, payload(4))


def test_a_lost_race_raises_the_generic_error_unless_the_store_asks_for_its_own(
    store: ObjectStore,
) -> None:
    compactions = SequencedStore(store, "db", "compactions", "compactions")
    compactions.create(1, payload(1))
    with pytest.raises(VersionExists) as generic:
        compactions.create(1, payload(2))
    assert type(generic.value) is VersionExists  # not a manifest conflict
    manifests = SequencedStore(store, "db", "manifest", "manifest", conflict=ManifestVersionExists)
    first = payload(1)
    manifests.create(1, first)
    with pytest.raises(ManifestVersionExists) as own:
        manifests.create(1, payload(2))
    assert own.value.existing == first
