"""A checkpoint of the latest state names the last WAL SST with rows, not the fences a managed
reader named after it: a fully flushed database stays a union source whether the checkpoint is
the clone's ephemeral one or an admin one (74173c5 fixed the ephemeral one in the clone module's
own WAL computation; moving clones onto the shared ``checkpoints.covered_wal``, the admin one
showed the same refusal)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from slatedb_core import admin
from slatedb_core.lifecycle.union import UnionSource, create_union
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.wal.log import WalLog
from slatedb_core.writer.db import Db

WRITER = DbOptions(flush_interval=timedelta(milliseconds=5))


def flushed_with_a_named_fence(store: ObjectStore) -> None:
    """A flushed database whose latest manifest's wal_id_last_seen names a trailing fence."""
    with Db.open("db", store, WRITER) as db:
        db.put(b"a", b"1")
        db.flush_memtable()
    Db.open("db", store, WRITER).close()  # a fence after the flushed WAL
    with DbReader.open("db", store):  # a managed reader names the run's end: the fence
        pass
    m = ManifestStore(store, "db").read_latest().manifest
    wal = WalLog(store, "db")
    tail = [i for i in wal.list_ids(after=m.replay_after_wal_id)]
    assert tail and m.wal_id_last_seen == tail[-1] > m.replay_after_wal_id
    assert all(not store.get(wal.path(i)).data for i in tail)


@pytest.mark.parametrize("source", ["ephemeral", "admin"])
def test_a_flushed_source_whose_fence_a_reader_named_stays_a_union_source(
    mem: ObjectStore, source: str
) -> None:
    flushed_with_a_named_fence(mem)
    cp = None if source == "ephemeral" else admin.create_checkpoint("db", mem).id
    create_union("u", [UnionSource("db", cp)], mem)
    with DbReader.open("u", mem) as reader:
        assert dict(reader.scan()) == {b"a": b"1"}
