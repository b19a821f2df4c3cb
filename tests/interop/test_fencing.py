"""Either engine opening as writer fences the other (SlateDB RFC 0001's writer epoch and the
fencing WAL SST; docs/format.md): the fenced writer's next durable write fails and never becomes
visible, and nothing the new writer's predecessor acknowledged is lost, however many times the
writer moves between the engines."""

from __future__ import annotations

import contextlib
from datetime import timedelta

import pytest
import slatedb.uniffi as sdb  # type: ignore[import-untyped]  # the wheel ships no py.typed

from slatedb_core.errors import Fenced
from slatedb_core.options import DbOptions, DbReaderOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db
from tests.interop.expect import Model, check_reads, rows, scanner
from tests.interop.oracle import Oracle, SlateWriter, settings

pytestmark = pytest.mark.slatedb

FAST = DbOptions(
    flush_interval=timedelta(milliseconds=10), manifest_poll_interval=timedelta(milliseconds=100)
)


def assert_slatedb_fenced(w: SlateWriter, key: bytes) -> None:
    with pytest.raises(sdb.Error.Closed) as e:
        w.put(key, b"must-not-land")
    assert e.value.reason == sdb.CloseReason.FENCED, e.value


def assert_ours_fenced(db: Db, key: bytes) -> None:
    with pytest.raises(Fenced):
        db.put(key, b"must-not-land")
    with contextlib.suppress(Fenced):
        db.close()


def slate_turn(w: SlateWriter, model: Model, turn: int) -> None:
    w.write(model.apply(rows(turn, 300, start=turn * 100)))
    w.flush_memtable()  # an L0 SST of SlateDB's holding the rows it replayed from our WAL too
    w.put(b"slate/%d" % turn, b"acknowledged")
    model.put(b"slate/%d" % turn, b"acknowledged")
    w.delete(b"k/%05d" % (turn * 100 + 1))
    model.delete(b"k/%05d" % (turn * 100 + 1))


def our_turn(db: Db, model: Model, turn: int) -> None:
    for key, value in model.apply(rows(turn, 300, start=turn * 100 + 50)):
        assert value is not None
        db.put(key, value, await_durable=False)
    if turn % 2 == 0:
        db.flush_memtable()
    db.put(b"ours/%d" % turn, b"acknowledged")
    model.put(b"ours/%d" % turn, b"acknowledged")
    db.delete(b"k/%05d" % (turn * 100 + 2))
    model.delete(b"k/%05d" % (turn * 100 + 2))


def test_our_writer_fences_slatedb(oracle: Oracle, store: ObjectStore) -> None:
    model = Model()
    w = oracle.open_db(s=settings(compactor=False))
    slate_turn(w, model, 0)
    with Db.open("db", store, FAST) as db:
        assert_slatedb_fenced(w, b"late/slatedb")
        check_reads(model, db.get, scanner(db), who="our Db after fencing SlateDB")


def test_slatedb_writer_fences_ours(oracle: Oracle, store: ObjectStore) -> None:
    model = Model()
    db = Db.open("db", store, FAST)
    our_turn(db, model, 0)
    w = oracle.open_db(s=settings(compactor=False))
    assert_ours_fenced(db, b"late/ours")
    check_reads(model, w.get, w.scan, who="SlateDB Db after fencing ours")


def test_writers_alternate_between_engines(oracle: Oracle, store: ObjectStore) -> None:
    """Three round trips SlateDB -> ours -> SlateDB ...; every writer checks everything its
    predecessors acknowledged, then both engines' readers check the end state."""
    model = Model()
    ours: Db | None = None
    for turn in range(3):
        w = oracle.open_db(s=settings(compactor=False))
        if ours is not None:
            assert_ours_fenced(ours, b"late/ours/%d" % turn)
        check_reads(model, w.get, w.scan, who=f"SlateDB Db, turn {turn}")
        slate_turn(w, model, 2 * turn)
        ours = db = Db.open("db", store, FAST)
        assert_slatedb_fenced(w, b"late/slatedb/%d" % turn)
        check_reads(model, db.get, scanner(db), who=f"our Db, turn {turn}")
        our_turn(db, model, 2 * turn + 1)
    assert ours is not None
    ours.close()
    with DbReader.open(
        "db", store, options=DbReaderOptions(manifest_poll_interval=timedelta(milliseconds=100))
    ) as reader:
        check_reads(model, reader.get, scanner(reader), who="our DbReader at the end")
    r = oracle.open_reader()
    check_reads(model, r.get, r.scan, who="SlateDB DbReader at the end")
