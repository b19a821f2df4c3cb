"""A closed or fenced writer refuses every write, an empty one too (issue 41/42 adversarial
review): ``bulk_ingest`` of no rows and ``record_transactions`` of no records returned normally
on a closed writer, and ``bulk_ingest`` reported a manifest id as committed by a writer already
fenced, where ``put_arrow`` of no rows, ``ingest_ssts`` of no sources and every other write
raise (docs/manifest-and-fencing.md: once a writer knows it is fenced, every later write and
read raises ``Fenced``)."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pytest

from slatedb_core.errors import DbClosed, Fenced
from slatedb_core.options import CheckpointScope, DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.batch import WriteBatch
from slatedb_core.writer.db import Db

EMPTY = pa.table({"key": pa.array([], pa.binary()), "value": pa.array([], pa.binary())})
QUIET = DbOptions(
    flush_interval=timedelta(seconds=30), manifest_poll_interval=timedelta(seconds=30)
)


def test_empty_writes_of_a_closed_writer_raise_db_closed(store: ObjectStore) -> None:
    db = Db.open("db", store, QUIET)
    db.close()
    with pytest.raises(DbClosed):
        db.put_arrow(EMPTY)  # as it was
    with pytest.raises(DbClosed):
        db.ingest_ssts([])  # as it was
    with pytest.raises(DbClosed):
        db.bulk_ingest(EMPTY)
    with pytest.raises(DbClosed):
        db.record_transactions([])


def test_an_empty_bulk_ingest_of_a_fenced_writer_raises_fenced(store: ObjectStore) -> None:
    old = Db.open("db", store, QUIET)
    Db.open("db", store, QUIET).close()
    with pytest.raises(Fenced):
        old.create_checkpoint(CheckpointScope.DURABLE)  # it learns of the fencing
    with pytest.raises(Fenced):
        old.bulk_ingest(EMPTY)
    with pytest.raises(Fenced):
        old.record_transactions([])
    with pytest.raises(Fenced):
        old.close()


def test_an_empty_write_batch_of_a_closed_writer_raises_db_closed(store: ObjectStore) -> None:
    """SlateDB 0.17's ``write`` checks that the database is open before it looks at the batch."""
    db = Db.open("db", store, QUIET)
    db.write(WriteBatch())  # an open writer takes it, as before
    db.close()
    with pytest.raises(DbClosed):
        db.write(WriteBatch())
