"""SlateDB 0.17's fence, a zero-byte WAL object, between the two engines (SlateDB RFC 0001, "Writer
Protocol"; docs/manifest-and-fencing.md): each engine's opener bumps ``writer_epoch`` and then
creates a zero-byte ``wal/{id:020}.sst`` at the first free id; the other engine's next WAL create
finds the slot taken and stops (ours reads the manifest's newer epoch and raises ``Fenced``, SlateDB's
closes with reason FENCED). The fenced writer's late write lands nowhere, and the winner's
acknowledged writes stay readable."""

from __future__ import annotations

import contextlib
from datetime import timedelta

import pytest
import slatedb.uniffi as sdb  # type: ignore[import-untyped]  # the wheel ships no py.typed

from slatedb_core.errors import Fenced
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.wal import WalLog
from slatedb_core.writer.db import Db
from tests.interop.oracle import Oracle, settings

pytestmark = pytest.mark.slatedb

# our WAL flusher runs only for durable puts: every WAL object in these tests is accounted for
QUIET = DbOptions(flush_interval=timedelta(hours=1), manifest_poll_interval=timedelta(hours=1))


def wal_sizes(store: ObjectStore) -> dict[int, int]:
    wal = WalLog(store, "db")
    return {i: len(store.get(wal.path(i)).data) for i in wal.list_ids()}


def test_slatedb_opening_fences_our_writer_with_a_zero_byte_wal_object(
    oracle: Oracle, store: ObjectStore
) -> None:
    ours = Db.open("db", store, QUIET)
    before = wal_sizes(store)
    assert before == {1: 0}  # our own fence, SlateDB's kind
    w = oracle.open_db(s=settings(compactor=False))
    assert wal_sizes(store) == {1: 0, 2: 0}  # SlateDB's fence: the next id, zero bytes
    assert ManifestStore(store, "db").read_latest().manifest.writer_epoch == ours.writer_epoch + 1
    with pytest.raises(Fenced) as e:
        ours.put(b"late/ours", b"must-not-land")
    assert (e.value.our_epoch, e.value.current_epoch) == (ours.writer_epoch, ours.writer_epoch + 1)
    assert wal_sizes(store) == {1: 0, 2: 0}  # our late write landed nowhere
    with contextlib.suppress(Fenced):
        ours.close()
    w.put(b"slate", b"acknowledged")
    assert w.get(b"slate") == b"acknowledged" and w.get(b"late/ours") is None


def test_our_writer_opening_fences_slatedb_with_a_zero_byte_wal_object(
    oracle: Oracle, store: ObjectStore
) -> None:
    w = oracle.open_db(s=settings(compactor=False))
    assert wal_sizes(store) == {1: 0}  # SlateDB's fence
    with Db.open("db", store, QUIET) as ours:
        assert wal_sizes(store) == {1: 0, 2: 0}  # ours: the next id, zero bytes
        with pytest.raises(sdb.Error.Closed) as e:
            w.put(b"late/slatedb", b"must-not-land")
        assert e.value.reason == sdb.CloseReason.FENCED, e.value
        assert wal_sizes(store) == {1: 0, 2: 0}  # SlateDB's late write landed nowhere
        ours.put(b"ours", b"acknowledged")
        assert ours.get(b"ours") == b"acknowledged" and ours.get(b"late/slatedb") is None
        assert set(wal_sizes(store)) == {1, 2, 3}
