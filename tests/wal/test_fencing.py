"""SlateDB RFC 0001's writer protocol: the four outcomes of a fencing write, step by step, with
SlateDB 0.17's fences (zero-byte WAL objects) and the epoch read from the manifest, not the SST."""

from __future__ import annotations

import pyarrow as pa
import pytest

from slatedb_core.errors import CorruptionError, Fenced, StoreError, WalEpochConflict
from slatedb_core.lsm.entries import batch_from_lists
from slatedb_core.sst import SstOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.testing import FaultyStore
from slatedb_core.wal import WalLog, WalWriter, fence_wal
from slatedb_core.wal.log import FENCE, encode_wal_sst
from slatedb_core.wal.writer import wal_boundary
from tests.wal.fence_steps import is_fence, set_writer_epoch

OPTS = SstOptions()


@pytest.fixture
def store(store_or_two_phase: ObjectStore) -> ObjectStore:
    """Also over two-phase CAS (SQLite, PostgreSQL, moto S3 without conditional writes)."""
    return store_or_two_phase


def put_wal(store: ObjectStore, wal: WalLog, wal_id: int, rows: int = 0) -> None:
    """Rows ``k0..`` in a WAL SST, or with ``rows`` 0 a fence."""
    data = FENCE
    if rows:
        data = encode_wal_sst(
            batch_from_lists(
                [f"k{i}".encode() for i in range(rows)],
                list(range(1, rows + 1)),
                [0] * rows,
                [b"v"] * rows,
            ),
            OPTS,
        )
    store.put_if_absent(wal.path(wal_id), data)


def test_fencing_into_a_free_slot_creates_a_zero_byte_object(store: ObjectStore) -> None:
    wal = WalLog(store, "db")
    set_writer_epoch(store, 2)
    put_wal(store, wal, 1, rows=3)
    assert fence_wal(wal, 2, 2) == 2
    assert is_fence(store, 2)
    fence = wal.read(2)
    assert fence.is_fence and not fence.holds_rows and fence.entries.num_rows == 0
    assert wal.read(1).holds_rows and not wal.read(1).is_fence


def test_slot_taken_by_an_older_writer_moves_the_fence_forward(store: ObjectStore) -> None:
    wal = WalLog(store, "db")
    set_writer_epoch(store, 2)
    for i in (1, 2, 3):
        put_wal(store, wal, i, rows=1)
    assert fence_wal(wal, 2, 2) == 4  # SlateDB RFC 0001 example: writer 2 retries at the next id
    assert wal.list_ids() == [1, 2, 3, 4]


def test_slot_taken_by_an_older_openers_fence_moves_the_fence_forward(store: ObjectStore) -> None:
    wal = WalLog(store, "db")
    set_writer_epoch(store, 2)
    put_wal(store, wal, 2)  # an older opener's fence: the manifest holds no newer epoch
    assert fence_wal(wal, 2, 2) == 3


def test_slot_taken_when_the_manifest_holds_a_newer_epoch_means_fenced(store: ObjectStore) -> None:
    """The newer writer bumped ``writer_epoch`` before creating its fence (SlateDB RFC 0001), so
    the slot's contents do not matter: its fence, or rows it wrote after it."""
    wal = WalLog(store, "db")
    put_wal(store, wal, 1)
    put_wal(store, wal, 2)
    put_wal(store, wal, 3, rows=1)
    set_writer_epoch(store, 3)
    for start in (2, 3):
        with pytest.raises(Fenced) as ei:
            fence_wal(wal, 2, start)
        assert (ei.value.our_epoch, ei.value.current_epoch) == (2, 3)
    assert wal.list_ids() == [1, 2, 3]


def test_writer_meeting_rows_after_its_fence_with_no_newer_epoch_is_an_illegal_state(
    store: ObjectStore,
) -> None:
    """Rows no newer writer wrote past our fence: another writer with our epoch, or an older one
    that was not fenced; either way not a slot to step over."""
    wal = WalLog(store, "db")
    set_writer_epoch(store, 2)
    put_wal(store, wal, 1, rows=1)
    writer = WalWriter(wal, epoch=2, next_id=1, options=OPTS)
    with pytest.raises(WalEpochConflict):
        writer.write(batch_from_lists([b"a"], [5], [0], [b"1"]))


def test_writer_steps_over_a_stale_openers_fence(store: ObjectStore) -> None:
    """An opener that bumped before us and fenced after our fence left a fence at our next id;
    nothing of it was acknowledged."""
    wal = WalLog(store, "db")
    set_writer_epoch(store, 2)
    put_wal(store, wal, 1)
    writer = WalWriter(wal, epoch=2, next_id=1, options=OPTS)
    assert writer.write(batch_from_lists([b"a"], [5], [0], [b"1"])) == 2
    assert writer.next_id == 3


def test_zombie_writer_stops_at_the_fence(store: ObjectStore) -> None:
    wal = WalLog(store, "db")
    set_writer_epoch(store, 1)
    zombie = WalWriter(wal, epoch=1, next_id=1, options=OPTS)
    assert zombie.write(batch_from_lists([b"a"], [1], [0], [b"1"])) == 1
    set_writer_epoch(store, 2)
    assert fence_wal(wal, 2, 2) == 2
    with pytest.raises(Fenced) as ei:
        zombie.write(batch_from_lists([b"b"], [2], [0], [b"2"]))
    assert (ei.value.our_epoch, ei.value.current_epoch) == (1, 2)
    assert wal.list_ids() == [1, 2]


def test_a_taken_slot_without_any_manifest_means_fenced(store: ObjectStore) -> None:
    """A hard destroy deletes the manifests before the WAL: a writer meeting a taken slot then
    finds no manifest to ask, and stops."""
    wal = WalLog(store, "db")
    put_wal(store, wal, 1)
    writer = WalWriter(wal, epoch=1, next_id=1, options=OPTS)
    with pytest.raises(Fenced):
        writer.write(batch_from_lists([b"a"], [1], [0], [b"1"]))


def test_ambiguous_wal_create_is_recognised_as_ours(store: ObjectStore) -> None:
    faulty = FaultyStore(store)
    wal = WalLog(faulty, "db")
    faulty.fail_next("put_if_absent", "db/wal/*", after_effect=True)
    writer = WalWriter(wal, epoch=1, next_id=1, options=OPTS)
    assert writer.write(batch_from_lists([b"a"], [1], [0], [b"1"])) == 1
    assert writer.next_id == 2
    assert WalLog(store, "db").read(1).entries.column("key").to_pylist() == [b"a"]


def test_a_write_retried_after_its_landed_create_failed_later_is_recognised_as_ours(
    store: ObjectStore,
) -> None:
    """The create landed, then the boundary check after it failed: the writer's retry of the same
    batch must send the same bytes (a fresh encode has a new clock tick) and find them its own,
    not another writer's rows (seen under the HTTP-fault workload)."""
    faulty = FaultyStore(store)
    wal = WalLog(faulty, "db")
    writer = WalWriter(wal, epoch=1, next_id=1, options=OPTS)
    faulty.fail_next("get", "db/gc/wal.boundary", times=20)
    batch = batch_from_lists([b"a"], [1], [0], [b"1"])
    with pytest.raises(StoreError):
        writer.write(batch)
    faulty.clear_rules()
    writer._last_tick += 5  # the retry's encode would stamp a later tick
    assert writer.write(batch) == 1
    assert writer.next_id == 2


def test_ambiguous_fence_create_is_recognised_as_ours(store: ObjectStore) -> None:
    """A fence has no bytes to tell it from another's: after an attempt of ours that may have
    landed, a fence in the slot counts as ours (it fences older writers all the same)."""
    set_writer_epoch(store, 1)
    faulty = FaultyStore(store)
    faulty.fail_next("put_if_absent", "db/wal/*", after_effect=True)
    assert fence_wal(WalLog(faulty, "db"), 1, 1, count=2) == 2
    assert WalLog(store, "db").list_ids() == [1, 2]


def test_a_zero_byte_wal_object_holds_no_rows_and_garbage_is_corruption(
    store: ObjectStore,
) -> None:
    wal = WalLog(store, "db")
    store.put(wal.path(1), b"")
    assert wal.read(1).is_fence and wal.read(1).entries.num_rows == 0
    store.put(wal.path(2), b"not an SST")
    with pytest.raises(CorruptionError):
        wal.read(2)


def test_listing_ignores_foreign_names_and_starts_after(store: ObjectStore) -> None:
    wal = WalLog(store, "db")
    for i in (1, 2, 3):
        put_wal(store, wal, i, rows=1)
    store.put("db/wal/notes.txt", b"x")
    assert wal.list_ids(after=1) == [2, 3]
    assert pa.types.is_binary(wal.read(2).entries.schema.field("key").type)


def test_zombie_cannot_write_into_a_collected_fence_slot(store: ObjectStore) -> None:
    """SlateDB RFC 0026's race for the WAL: GC deleted the fencing SST the zombie would have hit."""
    wal = WalLog(store, "db")
    zombie = WalWriter(wal, epoch=1, next_id=2, options=OPTS)  # stalled before writing id 2
    put_wal(store, wal, 1, rows=1)
    set_writer_epoch(store, 2)
    assert fence_wal(wal, 2, 2) == 2
    put_wal(store, wal, 3, rows=1)
    # the new writer flushed past id 3; GC advances the WAL boundary, then deletes 1..3
    wal_boundary(wal).advance(3)
    for i in (1, 2, 3):
        store.delete(wal.path(i))
    with pytest.raises(Fenced):
        zombie.write(batch_from_lists([b"late"], [9], [0], [b"x"]))


def test_every_wal_row_carries_the_writers_clock_tick(store: ObjectStore) -> None:
    """SlateDB 0.17 needs a create_ts on WAL rows it replays (tests/interop/test_wal_fences.py);
    ticks never go back within a writer."""
    wal = WalLog(store, "db")
    writer = WalWriter(wal, epoch=1, next_id=1, options=OPTS)
    before = writer.tick()
    writer.write(batch_from_lists([b"a", b"b"], [1, 2], [0, 1], [b"1", b""]))
    writer._last_tick += 60_000  # a tick given earlier, ahead of the wall clock
    ahead = writer._last_tick
    writer.write(batch_from_lists([b"c"], [3], [0], [b"3"]))
    first = wal.decode(1, store.get(wal.path(1)).data, timestamps=True).entries
    second = wal.decode(2, store.get(wal.path(2)).data, timestamps=True).entries
    stamps = first.column("create_ts").to_pylist()
    assert len(set(stamps)) == 1 and stamps[0] >= before
    assert second.column("create_ts").to_pylist() == [ahead]
    assert first.column("expire_ts").to_pylist() == [None, None]
