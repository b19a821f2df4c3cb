"""The crash harness itself: a killed process really stops, and a lost write is really noticed."""

from __future__ import annotations

import threading

import pytest

from slatedb_core.errors import DbClosed
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db
from tests.crash.enumerate import SIDES, points, record
from tests.crash.process import Process, run_process
from tests.crash.scenarios import OPTS, SCENARIOS, Model
from tests.crash.store import CrashPoint, CrashStore, ProcessKilled, path_kind


def test_crash_before_a_call_leaves_the_store_untouched_and_kills_every_later_call() -> None:
    inner = open_store("memory://")
    store = CrashStore(inner, {"db": ""}, CrashPoint("put", "wal", 0, "before"))
    store.arm()
    with pytest.raises(ProcessKilled):
        store.put("db/wal/00000000000000000001.sst", b"x")
    assert not inner.exists("db/wal/00000000000000000001.sst")
    with pytest.raises(ProcessKilled):
        store.get("db/manifest/00000000000000000001.manifest")
    assert store.died.is_set() and store.calls_after_death == 1


def test_crash_after_a_call_applies_it_and_hides_its_answer() -> None:
    inner = open_store("memory://")
    store = CrashStore(inner, {"db": ""}, CrashPoint("put", "wal", 1, "after"))
    store.arm()
    store.put("db/wal/00000000000000000001.sst", b"first")
    with pytest.raises(ProcessKilled):
        store.put("db/wal/00000000000000000002.sst", b"second")
    assert inner.get("db/wal/00000000000000000002.sst").data == b"second"
    assert store.crashed_at is not None and store.crashed_at.index == 1


def test_a_failed_request_still_counts_as_made_for_a_crash_after_it() -> None:
    store = CrashStore(open_store("memory://"), {"db": ""}, CrashPoint("get", "wal", 0, "after"))
    store.arm()
    with pytest.raises(ProcessKilled):  # not ObjectNotFound: the answer is never seen
        store.get("db/wal/00000000000000000001.sst")


def test_path_kinds_name_objects_without_their_ids() -> None:
    roots = {"db": "", "db/clone": "clone"}
    assert path_kind("db/manifest/00000000000000000007.manifest", roots) == "manifest"
    assert path_kind("db/manifest/_latest_version", roots) == "manifest-pointer"
    assert path_kind("db/gc/wal.boundary", roots) == "wal-boundary"
    assert path_kind("db/compacted/01M80R95Q471WGQ6ETQ0NGS66G.sst", roots) == "sst"
    assert path_kind("db/", roots) == "db"
    assert path_kind("db/clone/wal/00000000000000000001.sst", roots) == "clone.wal"
    assert path_kind("elsewhere/x", roots) == "other"


def test_a_killed_writer_stops_its_threads_and_fails_its_waiting_put() -> None:
    inner = open_store("memory://")
    store = CrashStore(inner, {"db": ""}, CrashPoint("put_if_absent", "wal", 0, "before"))
    opened: list[Db] = []

    def body(proc: Process) -> None:
        db = proc.open_db("db", OPTS)
        opened.append(db)
        proc.store.arm()
        db.put(b"k", b"v")  # the WAL flusher thread makes the fatal call

    outcome = run_process(store, body)
    assert outcome.died
    assert isinstance(outcome.error, DbClosed | ProcessKilled)
    names = {t.name for t in threading.enumerate()}
    assert not any(n.startswith("slatedb-") and n.endswith("-db") for n in names)
    with pytest.raises((DbClosed, ProcessKilled)):
        opened[0].put(b"k2", b"v2")
    with Db.open("db", inner, OPTS) as db:
        assert db.get(b"k") is None  # never acknowledged, never written


def test_the_model_rejects_a_lost_acknowledged_write_and_a_phantom() -> None:
    model = Model(acked={b"a": b"1", b"b": None}, maybe={b"c": b"3"})
    model.settle({b"a": b"1"}, "in-flight write lost: fine")
    model = Model(acked={b"a": b"1"}, maybe={b"c": b"3"})
    model.settle({b"a": b"1", b"c": b"3"}, "in-flight write landed: fine")
    with pytest.raises(AssertionError, match="b'a'"):
        Model(acked={b"a": b"1"}).settle({}, "lost")
    with pytest.raises(AssertionError, match="b'z'"):
        Model(acked={b"a": b"1"}).settle({b"a": b"1", b"z": b"?"}, "phantom")


def test_every_operation_has_crash_points_and_a_stable_enumeration() -> None:
    for name in SCENARIOS:
        calls = record(name)
        assert calls, name
        assert [c.index for c in calls] == list(range(len(calls)))
        assert len(points(name)) == len(SIDES) * len(calls)
