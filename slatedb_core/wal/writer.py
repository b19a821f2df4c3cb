"""Fencing the WAL and writing to it (seed 001, "Writers" and "Acknowledgements").

Create-if-absent on ``wal/{id}.sst`` is the fencing point: after a new writer has created its empty
fencing SST at id F, an older writer can never create any id >= F, because it writes ids in order
and finds F taken. An older writer that finds a slot taken reads the slot's epoch: newer means it
is fenced, and it must stop without acknowledging anything more.

That argument fails once GC has deleted F (seed 004's race, for the WAL): a zombie stalled before
writing F could then create it, and acknowledge writes no one will ever replay. So the WAL has a
boundary file like the sequenced namespaces (``gc/wal.boundary``): GC advances it before deleting
WAL SSTs, and every WAL write checks it after the create (a conditional GET, usually a bodiless
304). A live writer's next id is always above anything GC may delete, so a write at or behind
the boundary can only come from a zombie: it is reported as ``Fenced``.
"""

from __future__ import annotations

import logging

import pyarrow as pa

from slatedb_core.entries import empty_batch
from slatedb_core.errors import (
    Fenced,
    ObjectAlreadyExists,
    ObjectNotFound,
    ObjectVersionBehindBoundary,
    SlateDBError,
    StoreError,
)
from slatedb_core.meta.boundary import BoundaryObject
from slatedb_core.sst import SstOptions, encode_sst
from slatedb_core.store.objectstore import join
from slatedb_core.wal.log import EPOCH_KEY, WalLog

log = logging.getLogger(__name__)


class WalEpochConflict(SlateDBError):
    """Two writers hold the same epoch: impossible unless the manifest protocol was bypassed."""


class _Outcome:
    OURS = "ours"
    OLDER = "older"


def _create(wal: WalLog, wal_id: int, data: bytes, epoch: int, retries: int = 5) -> str:
    """Create ``wal/{wal_id}.sst``. Returns OURS, or OLDER when an older writer holds the slot.
    Raises Fenced when a newer writer holds it. Resolves ambiguous outcomes by reading back."""
    path = wal.path(wal_id)
    last: StoreError | None = None
    for _ in range(retries):
        try:
            wal.store.put_if_absent(path, data)
            return _Outcome.OURS
        except ObjectAlreadyExists:
            pass
        except StoreError as e:
            if not e.retryable:
                raise
            last = e
        try:
            existing = wal.store.get(path).data
        except ObjectNotFound:
            continue  # the failed create did not take effect: try again
        except StoreError as e:
            last = e
            continue
        if existing == data:
            return _Outcome.OURS  # an earlier attempt of ours landed
        other = wal.decode(wal_id, existing).writer_epoch
        if other > epoch:
            raise Fenced("writer", epoch, other)
        if other == epoch:
            raise WalEpochConflict(f"{path} was written by another writer with our epoch {epoch}")
        return _Outcome.OLDER
    assert last is not None
    raise last


def fence_wal(wal: WalLog, epoch: int, start_id: int, options: SstOptions) -> int:
    """Write the empty fencing SST at the first free id >= ``start_id``; returns its id."""
    data, _ = encode_sst(empty_batch(), options, metadata={EPOCH_KEY: epoch})
    wal_id = start_id
    while True:
        if _create(wal, wal_id, data, epoch) == _Outcome.OURS:
            return wal_id
        log.info("WAL slot %d held by an older writer; fencing at the next id", wal_id)
        wal_id += 1


class WalWriter:
    """Writes this writer's WAL SSTs in id order. Not thread-safe: the Db's flusher owns it."""

    def __init__(self, wal: WalLog, epoch: int, next_id: int, options: SstOptions) -> None:
        self.wal = wal
        self.epoch = epoch
        self.next_id = next_id
        self.options = options
        self.boundary = wal_boundary(wal)

    def write(self, batch: pa.RecordBatch) -> int:
        """Write one WAL SST; returns its id. Raises Fenced if a newer writer took the slot."""
        data, _ = encode_sst(batch, self.options, metadata={EPOCH_KEY: self.epoch})
        wal_id = self.next_id
        while _create(self.wal, wal_id, data, self.epoch) != _Outcome.OURS:
            # An older *writer* past our fence is impossible with one write in flight, but an
            # older *opener* is not: one that bumped its epoch before us and listed the WAL after
            # our fence leaves its empty fencing SST here before it finds out it is fenced.
            # Nothing of it was acknowledged, so step over it; anything else is a real conflict.
            if not self.wal.read(wal_id).is_fence:
                raise WalEpochConflict(
                    f"{self.wal.path(wal_id)} holds an older epoch after our fence"
                )
            log.info("WAL slot %d holds a stale opener's fencing SST; using the next id", wal_id)
            wal_id += 1
        try:
            self.boundary.check(wal_id, self.wal.path(wal_id))
        except ObjectVersionBehindBoundary as e:
            raise Fenced("writer", self.epoch, self.epoch + 1) from e
        self.next_id = wal_id + 1
        return wal_id


def wal_boundary(wal: WalLog) -> BoundaryObject:
    """``<db>/gc/wal.boundary``: WAL ids at or below it may have been deleted by GC."""
    return BoundaryObject(wal.store, join(wal.db_path, "gc", "wal.boundary"))
