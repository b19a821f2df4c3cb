"""``Db.ingest_ssts``: attaching SSTs encoded elsewhere (a staging prefix of the same store) as L0.

Every test encodes its SSTs with :func:`slatedb_core.sst.encode_sst`, puts them under ``staging/``
and checks what readers see, what the manifest says and which objects exist afterwards.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from ulid import ULID

import slatedb_core.sst.create as sst_create
from slatedb_core.checkpoints import create_checkpoint
from slatedb_core.errors import (
    CorruptionError,
    InjectedFault,
    InvalidArgument,
    ObjectAlreadyExists,
    ObjectNotFound,
)
from slatedb_core.gc import run_gc_once
from slatedb_core.keys import KeyRange
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.meta.compacted_boundary import compacted_boundary
from slatedb_core.options import CheckpointOptions, DbOptions, GarbageCollectorOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultyStore
from slatedb_core.writer.db import Db
from tests.writer.ingest_steps import sst_bytes, stage

FAST = DbOptions(
    flush_interval=timedelta(milliseconds=10), manifest_poll_interval=timedelta(milliseconds=200)
)
GC_NOW = GarbageCollectorOptions(min_age=timedelta(0))


LINKED = 1 << 40
"""A seq above every test writer's: sources staged at it are copied as they are."""


def compacted(store: ObjectStore, db: str = "db") -> list[str]:
    return [m.path for m in store.list(f"{db}/compacted")]


def test_ingested_ssts_are_readable_everywhere(store: ObjectStore) -> None:
    a = stage(store, "a", [(f"a{i:04}".encode(), f"va{i}".encode()) for i in range(500)])
    b = stage(store, "b", [(f"b{i:04}".encode(), f"vb{i}".encode()) for i in range(300)])
    with Db.open("db", store, FAST) as db:
        db.put(b"c", b"own")
        before = db.manifest.id
        stats = db.ingest_ssts([a, b])
        assert (stats.rows, stats.ssts) == (800, 2)
        assert stats.bytes_written == store.head(a).size + store.head(b).size
        assert stats.manifest_id == db.manifest.id > before
        assert db.get(b"a0007") == b"va7" and db.get(b"b0299") == b"vb299"
        assert db.get(b"c") == b"own"
        assert len(list(db.scan())) == 801
        assert [k for k, _ in db.scan(b"a0498", b"b0002")] == [
            b"a0498",
            b"a0499",
            b"b0000",
            b"b0001",
        ]
        # the ingested SSTs are L0 views of copies under compacted/; the sources stay
        m = db.manifest.manifest
        assert len(m.l0) >= 2 and len(compacted(store)) == len(m.ssts)
        assert {s.info.entry_count for s in m.ssts} >= {500, 300}
        assert store.exists(a) and store.exists(b)
        with DbReader.open("db", store) as reader:
            assert reader.get(b"a0123") == b"va123" and reader.get(b"b0000") == b"vb0"
            assert len(list(reader.scan())) == 801
    store.delete(a)
    store.delete(b)
    with Db.open("db", store, FAST) as db:
        assert db.get(b"a0499") == b"va499" and db.get(b"b0042") == b"vb42"
        assert db.get(b"c") == b"own"


def test_ingest_is_newer_than_earlier_writes_and_older_than_later_ones(
    store: ObjectStore,
) -> None:
    # Seqs inside the SSTs do not matter: the older source carries a higher seq than the newer.
    older = stage(store, "older", [(b"k1", b"older"), (b"k2", b"older"), (b"k3", b"older")], 900)
    newer = stage(store, "newer", [(b"k1", b"newer"), (b"k4", None)], 1)
    with Db.open("db", store, FAST) as db:
        db.put(b"k2", b"flushed")
        db.put(b"k4", b"flushed")
        db.flush_memtable()  # in L0 already
        db.put(b"k3", b"memtable")  # only in the memtable and the WAL
        db.put(b"k5", b"memtable")
        db.ingest_ssts([older, newer])
        db.put(b"k5", b"after")  # a write after the ingest is newer
        db.put(b"k2", b"after")

        def check(get: object) -> None:
            assert callable(get)
            assert get(b"k1") == b"newer"  # newer source wins over older source
            assert get(b"k2") == b"after"
            assert get(b"k3") == b"older"  # ingest wins over the memtable write before it
            assert get(b"k4") is None  # a tombstone in the newest source deletes the flushed value
            assert get(b"k5") == b"after"

        check(db.get)
        assert dict(db.scan()) == {
            b"k1": b"newer",
            b"k2": b"after",
            b"k3": b"older",
            b"k5": b"after",
        }
        with DbReader.open("db", store) as reader:
            check(reader.get)
    # recovery must not replay the pre-ingest WAL writes on top of the ingested SSTs
    with Db.open("db", store, FAST) as db:
        check(db.get)
    with DbReader.open("db", store) as reader:
        check(reader.get)


def test_key_outside_the_range_is_refused_before_anything_is_copied(store: ObjectStore) -> None:
    ManifestStore(store, "db").create_initial(
        Manifest(key_range=KeyRange(b"g", b"p").to_bytes_range())
    )
    good = stage(store, "good", [(b"h", b"1"), (b"i", b"2")])
    low = stage(store, "low", [(b"a", b"x"), (b"h", b"x")])
    high = stage(store, "high", [(b"h", b"x"), (b"p", b"x")])  # the end is exclusive
    with Db.open("db", store, FAST) as db:
        before = db.manifest.id
        for bad in ([good, low], [high], [low, good]):
            with pytest.raises(InvalidArgument, match="outside"):
                db.ingest_ssts(bad)
            assert db.manifest.id == before
            assert compacted(store) == []
        db.ingest_ssts([good])
        assert db.get(b"h") == b"1"


def test_corrupt_or_truncated_source_is_refused(store: ObjectStore) -> None:
    good = stage(store, "good", [(b"k", b"v")])
    blob = sst_bytes([(f"k{i:03}".encode(), b"v" * 50) for i in range(100)])
    store.put("staging/truncated.sst", blob[: len(blob) - 7])
    store.put("staging/garbage.sst", os.urandom(len(blob)))
    store.put("staging/tiny.sst", b"xy")
    with Db.open("db", store, FAST) as db:
        before = db.manifest.id
        for bad in ("staging/truncated.sst", "staging/garbage.sst", "staging/tiny.sst"):
            with pytest.raises(CorruptionError):
                db.ingest_ssts([good, bad])
            assert db.manifest.id == before
            assert compacted(store) == []
        assert db.get(b"k") is None


def test_missing_source_and_bad_arguments(store: ObjectStore) -> None:
    good = stage(store, "good", [(b"k", b"v")])
    with Db.open("db", store, FAST) as db:
        before = db.manifest.id
        with pytest.raises(ObjectNotFound):
            db.ingest_ssts([good, "staging/missing.sst"])
        for bad_path in ("", "/abs/x.sst", "staging/../x.sst", "staging//x.sst"):
            with pytest.raises(InvalidArgument):
                db.ingest_ssts([good, bad_path])
        with pytest.raises(InvalidArgument):
            db.ingest_ssts(good)  # a str is not a list of paths
        with pytest.raises(InvalidArgument):
            db.ingest_ssts([good, 7])  # type: ignore[list-item]
        assert db.manifest.id == before
        assert compacted(store) == []
        assert db.get(b"k") is None


def test_empty_inputs_are_no_ops(store: ObjectStore) -> None:
    empty = stage(store, "empty", [])
    with Db.open("db", store, FAST) as db:
        before = db.manifest.id
        for sources in ([], [empty]):
            stats = db.ingest_ssts(sources)
            assert (stats.rows, stats.ssts, stats.bytes_written) == (0, 0, 0)
            assert stats.manifest_id == before == db.manifest.id
        assert compacted(store) == []
        # an empty SST among others is skipped
        one = stage(store, "one", [(b"k", b"v")])
        stats = db.ingest_ssts([empty, one, empty])
        assert (stats.rows, stats.ssts) == (1, 1)
        assert len(compacted(store)) == 1


def test_on_a_local_filesystem_the_copy_is_a_hard_link(tmp_path: Path) -> None:
    store = open_store(tmp_path.as_uri())
    src = stage(store, "s", [(b"k", b"v")], seq=LINKED)
    with Db.open("db", store, FAST) as db:
        db.ingest_ssts([src], seqs=[LINKED])
        (copy,) = compacted(store)
        assert db.get(b"k") == b"v"
    assert os.stat(tmp_path / src).st_ino == os.stat(tmp_path / copy).st_ino
    assert store.counters.snapshot()["copy"] == 1


def test_copies_survive_gc_after_the_staging_objects_are_deleted(store: ObjectStore) -> None:
    srcs = [
        stage(store, f"s{i}", [(f"k{i}{j:03}".encode(), b"v") for j in range(50)]) for i in range(3)
    ]
    with Db.open("db", store, FAST) as db:
        db.ingest_ssts(srcs)
    for s in srcs:
        store.delete(s)
    run_gc_once("db", store, GC_NOW)
    run_gc_once("db", store, GC_NOW)
    with Db.open("db", store, FAST) as db:
        assert all(db.get(f"k{i}049".encode()) == b"v" for i in range(3))
        assert len(list(db.scan())) == 150
    with DbReader.open("db", store) as reader:
        assert len(list(reader.scan())) == 150


def test_a_copy_behind_the_gc_boundary_is_rehomed_from_its_source(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy whose ULID time is at or behind the compacted GC boundary may have been judged
    garbage by a GC pass: the post-commit check writes the source's bytes under a newer id."""
    src = stage(store, "s", [(b"k", b"v")])
    with Db.open("db", store, FAST) as db:
        compacted_boundary(store, "db").advance(int(time.time() * 1000))
        hour_ago = time.time() - 3600
        monkeypatch.setattr(sst_create, "ULID", lambda: ULID.from_timestamp(hour_ago))
        db.ingest_ssts([src])
        monkeypatch.undo()
        (sst,) = db.manifest.manifest.ssts
        assert sst.id.milliseconds > int(hour_ago * 1000) + 1000  # re-homed under a newer id
        assert db.get(b"k") == b"v"
    store.delete(src)
    run_gc_once("db", store, GC_NOW)  # deletes the stale copy, keeps the re-homed one
    assert len(compacted(store)) == 1
    with Db.open("db", store, FAST) as db:
        assert db.get(b"k") == b"v"


def test_a_failed_copy_commits_nothing_and_a_retry_succeeds(store: ObjectStore) -> None:
    fs = FaultyStore(store)
    src = stage(store, "s", [(b"k", b"v")], seq=LINKED)
    with Db.open("db", fs, FAST) as db:
        before = db.manifest.id
        fs.fail_next("copy", "db/compacted/*")
        with pytest.raises(InjectedFault):
            db.ingest_ssts([src], seqs=[LINKED])
        assert db.manifest.id == before and db.get(b"k") is None
        fs.fail_next("copy", "db/compacted/*", after_effect=True)  # landed, answer lost
        with pytest.raises(InjectedFault):
            db.ingest_ssts([src], seqs=[LINKED])
        assert db.manifest.id == before and db.get(b"k") is None
        assert len(compacted(store)) == 1  # an unreferenced copy: garbage for GC
        db.ingest_ssts([src], seqs=[LINKED])
        assert db.get(b"k") == b"v"
    run_gc_once("db", store, GC_NOW)
    assert len(compacted(store)) == 1
    with Db.open("db", store, FAST) as db:
        assert db.get(b"k") == b"v"


def test_an_ambiguous_copy_is_recognised_by_its_bytes(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy retried after its first attempt landed answers "already exists" (a fresh ULID can
    only collide with itself): accepted when the bytes are the source's, refused otherwise."""
    src = stage(store, "s", [(b"k", b"v")], seq=LINKED)
    copy = store.copy_if_absent

    def landed_then_conflict(s: str, d: str) -> None:
        copy(s, d)
        raise ObjectAlreadyExists(d)

    def someone_else_s(s: str, d: str) -> None:
        store.put(d, b"other bytes")
        raise ObjectAlreadyExists(d)

    with Db.open("db", store, FAST) as db:
        monkeypatch.setattr(store, "copy_if_absent", someone_else_s)
        with pytest.raises(ObjectAlreadyExists):
            db.ingest_ssts([src], seqs=[LINKED])
        assert db.get(b"k") is None
        monkeypatch.setattr(store, "copy_if_absent", landed_then_conflict)
        stats = db.ingest_ssts([src], seqs=[LINKED])
        assert stats.ssts == 1 and db.get(b"k") == b"v"


# ---- a checkpoint committed with the SSTs (what a table ingest's exactly-once commit reads) ----
def ingest_checkpoints(m: Manifest, name: str) -> list[int]:
    """The manifest ids pinned by the checkpoints named ``name`` in ``m``."""
    return [c.manifest_id for c in m.checkpoints if c.name == name]


def test_a_checkpoint_lands_in_the_same_manifest_update_as_the_ssts(store: ObjectStore) -> None:
    src = stage(store, "s", [(b"k", b"v")])
    empty = stage(store, "empty", [])
    with Db.open("db", store, FAST) as db:
        before = db.manifest.id
        # nothing to ingest: nothing committed, the checkpoint included
        db.ingest_ssts([empty], checkpoint=CheckpointOptions(name="ingest"))
        assert db.manifest.id == before and ingest_checkpoints(db.manifest.manifest, "ingest") == []
        with pytest.raises(InvalidArgument):  # it pins the ingest's manifest, not a source's
            db.ingest_ssts([src], checkpoint=CheckpointOptions(name="x", source=uuid.uuid4()))
        stats = db.ingest_ssts(
            [src], checkpoint=CheckpointOptions(name="ingest", lifetime=timedelta(days=7))
        )
        assert stats.manifest_id == before + 1 == db.manifest.id
    ms = ManifestStore(store, "db")
    committed = ms.read(stats.manifest_id).manifest
    assert ingest_checkpoints(committed, "ingest") == [stats.manifest_id]
    (cp,) = [c for c in committed.checkpoints if c.name == "ingest"]
    assert cp.expire_time_s is not None and cp.expire_time_s >= time.time() + 6.9 * 86400
    assert [s.info.entry_count for s in committed.ssts] == [1]
    # the manifest before holds neither
    parent = ms.read(before).manifest
    assert parent.ssts == () and ingest_checkpoints(parent, "ingest") == []


def test_an_ingest_checkpoint_follows_its_commit_through_a_lost_race_and_a_lost_answer(
    tmp_path: Path,
) -> None:
    """The change is re-applied on the newer manifest after a lost race (the checkpoint pins the
    id finally committed) and an attempt whose answer was lost is found, not repeated."""
    local = open_store(tmp_path.as_uri())
    fs = FaultyStore(local)
    src = stage(local, "s", [(b"k", b"v")])
    with Db.open("db", fs, FAST) as db:
        before = db.manifest.id
        pause = fs.pause("commit", "put_if_absent", f"db/manifest/{before + 1:020d}.manifest")
        out: list[int] = []
        th = threading.Thread(
            target=lambda: out.append(
                db.ingest_ssts([src], checkpoint=CheckpointOptions(name="ingest")).manifest_id
            )
        )
        th.start()
        assert pause.wait_reached()
        create_checkpoint("db", local, CheckpointOptions(name="other"))  # takes id before + 1
        pause.release()
        th.join()
        assert out == [before + 2]
        m = db.manifest.manifest
        assert ingest_checkpoints(m, "ingest") == [before + 2]
        assert ingest_checkpoints(m, "other") == [before + 1]
        # the answer of the next commit is lost after it landed: settled, not committed twice
        fs.fail_next("put_if_absent", "db/manifest/*.manifest", after_effect=True)
        stats = db.ingest_ssts([src], checkpoint=CheckpointOptions(name="again"))
        assert [e for e in fs.events if e[0] == "fail_after"] == [
            ("fail_after", "put_if_absent", f"db/manifest/{stats.manifest_id:020d}.manifest")
        ]
        m = db.manifest.manifest
        assert ingest_checkpoints(m, "again") == [stats.manifest_id]
        assert len(m.l0) == 2 and len(m.ssts) == 2
