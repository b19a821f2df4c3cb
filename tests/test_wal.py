"""SlateDB RFC 0001's writer protocol: the four outcomes of a fencing write, step by step."""

from __future__ import annotations

import pyarrow as pa
import pytest

from slatedb_core.errors import CorruptionError, Fenced, WalEpochConflict
from slatedb_core.lsm.entries import batch_from_lists, empty_batch
from slatedb_core.sst import SstOptions, encode_sst
from slatedb_core.store.faults import FaultyStore
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.wal import WalLog, WalWriter, fence_wal
from slatedb_core.wal.log import EPOCH_KEY

OPTS = SstOptions()


@pytest.fixture
def store(store_or_two_phase: ObjectStore) -> ObjectStore:
    """Also over two-phase CAS (SQLite, PostgreSQL, moto S3 without conditional writes)."""
    return store_or_two_phase


def put_wal(store: ObjectStore, wal: WalLog, wal_id: int, epoch: int, rows: int = 0) -> None:
    batch = (batch_from_lists([f"k{i}".encode() for i in range(rows)], list(range(rows)),
                              [0] * rows, [b"v"] * rows) if rows else empty_batch())
    data, _ = encode_sst(batch, OPTS, metadata={EPOCH_KEY: epoch})
    store.put_if_absent(wal.path(wal_id), data)


def test_fencing_into_a_free_slot_succeeds(store: ObjectStore) -> None:
    wal = WalLog(store, "db")
    put_wal(store, wal, 1, epoch=1, rows=3)
    assert fence_wal(wal, 2, 2, OPTS) == 2
    fence = wal.read(2)
    assert fence.is_fence and fence.writer_epoch == 2


def test_slot_taken_by_an_older_writer_moves_the_fence_forward(store: ObjectStore) -> None:
    wal = WalLog(store, "db")
    for i in (1, 2, 3):
        put_wal(store, wal, i, epoch=1, rows=1)
    assert fence_wal(wal, 2, 2, OPTS) == 4  # SlateDB RFC 0001 example: writer 2 retries at the next id
    assert wal.list_ids() == [1, 2, 3, 4]


def test_slot_taken_by_a_newer_writer_means_fenced(store: ObjectStore) -> None:
    wal = WalLog(store, "db")
    put_wal(store, wal, 1, epoch=1)
    put_wal(store, wal, 2, epoch=3)
    with pytest.raises(Fenced) as ei:
        fence_wal(wal, 2, 2, OPTS)
    assert (ei.value.our_epoch, ei.value.current_epoch) == (2, 3)


def test_slot_taken_by_the_same_epoch_is_an_illegal_state(store: ObjectStore) -> None:
    wal = WalLog(store, "db")
    put_wal(store, wal, 1, epoch=2, rows=1)
    with pytest.raises(WalEpochConflict):
        fence_wal(wal, 2, 1, OPTS)


def test_zombie_writer_stops_at_the_fence(store: ObjectStore) -> None:
    wal = WalLog(store, "db")
    zombie = WalWriter(wal, epoch=1, next_id=1, options=OPTS)
    assert zombie.write(batch_from_lists([b"a"], [1], [0], [b"1"])) == 1
    assert fence_wal(wal, 2, 2, OPTS) == 2
    with pytest.raises(Fenced):
        zombie.write(batch_from_lists([b"b"], [2], [0], [b"2"]))
    assert wal.list_ids() == [1, 2]


def test_ambiguous_wal_create_is_recognised_as_ours(store: ObjectStore) -> None:
    faulty = FaultyStore(store)
    wal = WalLog(faulty, "db")
    faulty.fail_next("put_if_absent", "db/wal/*", after_effect=True)
    writer = WalWriter(wal, epoch=1, next_id=1, options=OPTS)
    assert writer.write(batch_from_lists([b"a"], [1], [0], [b"1"])) == 1
    assert writer.next_id == 2
    assert WalLog(store, "db").read(1).entries.column("key").to_pylist() == [b"a"]


def test_wal_sst_without_epoch_is_corruption(store: ObjectStore) -> None:
    wal = WalLog(store, "db")
    data, _ = encode_sst(empty_batch(), OPTS)
    store.put(wal.path(1), data)
    with pytest.raises(CorruptionError):
        wal.read(1)


def test_listing_ignores_foreign_names_and_starts_after(store: ObjectStore) -> None:
    wal = WalLog(store, "db")
    for i in (1, 2, 3):
        put_wal(store, wal, i, epoch=1)
    store.put("db/wal/notes.txt", b"x")
    assert wal.list_ids(after=1) == [2, 3]
    assert pa.types.is_binary(wal.read(2).entries.schema.field("key").type)


def test_zombie_cannot_write_into_a_collected_fence_slot(store: ObjectStore) -> None:
    """SlateDB RFC 0026's race for the WAL: GC deleted the fencing SST the zombie would have hit."""
    from slatedb_core.wal.writer import wal_boundary

    wal = WalLog(store, "db")
    zombie = WalWriter(wal, epoch=1, next_id=2, options=OPTS)  # stalled before writing id 2
    put_wal(store, wal, 1, epoch=1, rows=1)
    assert fence_wal(wal, 2, 2, OPTS) == 2
    put_wal(store, wal, 3, epoch=2, rows=1)
    # the new writer flushed past id 3; GC advances the WAL boundary, then deletes 1..3
    wal_boundary(wal).advance(3)
    for i in (1, 2, 3):
        store.delete(wal.path(i))
    with pytest.raises(Fenced):
        zombie.write(batch_from_lists([b"late"], [9], [0], [b"x"]))
