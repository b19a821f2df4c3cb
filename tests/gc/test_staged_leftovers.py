"""A local-disk create killed between staging its file and linking it leaves ``<name>#<digits>``
beside its object, which no listing shows: GC removes it once it is older than an hour (and the
pass's compacted ``min_age``), never a younger one, never through a link, and the database it
sits in is untouched. Noticed in session 50 (a compactor killed mid stream leaked its output)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from slatedb_core import Db, DbOptions, GarbageCollectorOptions
from slatedb_core.gc.collector import Collector
from slatedb_core.gc.staged import STAGED_MIN_AGE_S
from slatedb_core.store.url import open_store

_CRASH = """
import os, sys
from slatedb_core.store.url import open_store
store = open_store(sys.argv[1])
def chunks():
    yield b"x" * 1_000_000
    os._exit(3)  # killed mid-create: the staged file is written, never linked
store.create_streamed(sys.argv[2], chunks())
"""


def _crash_mid_create(url: str, path: str) -> None:
    done = subprocess.run([sys.executable, "-c", _CRASH, url, path], check=False)
    assert done.returncode == 3


def _staged(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*#*") if p.is_file() or p.is_symlink())


def test_a_crashed_streamed_create_is_swept_once_old(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    url = root.as_uri()
    store = open_store(url)
    with Db.open("db", store, DbOptions()) as db:
        db.put(b"k", b"v")
        db.flush_memtable()
    _crash_mid_create(url, "db/compacted/01ARZ3NDEKTSV4RRFFQ69G5FAV.sst")
    _crash_mid_create(url, "db/wal/00000000000000000099.sst")
    (leftover, wal_leftover) = _staged(root)
    assert leftover.stat().st_size == 1_000_000
    assert not any("#" in m.path for m in store.list("db"))  # no listing shows it

    opts = GarbageCollectorOptions(min_age=timedelta(0))
    young = Collector("db", store, opts).run()
    assert young.staged.deleted == 0 and _staged(root) == [leftover, wal_leftover]

    later = time.time() + STAGED_MIN_AGE_S + 60
    swept = Collector("db", store, opts).run(now=lambda: later)
    assert swept.staged.deleted == 2 and swept.staged.bytes_freed == 2_000_000
    assert _staged(root) == []
    assert "staged -2" in swept.summary()
    with Db.open("db", store, DbOptions()) as db:
        assert db.get(b"k") == b"v"


def test_the_pass_min_age_holds_a_staged_file_longer(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    store = open_store(root.as_uri())
    with Db.open("db", store, DbOptions()) as db:
        db.put(b"k", b"v")
    _crash_mid_create(root.as_uri(), "db/compacted/01ARZ3NDEKTSV4RRFFQ69G5FAV.sst")
    two_hours = time.time() + 2 * 3600
    patient = GarbageCollectorOptions(min_age=timedelta(hours=3))
    assert Collector("db", store, patient).run(now=lambda: two_hours).staged.deleted == 0
    eager = GarbageCollectorOptions(min_age=timedelta(hours=1))
    assert Collector("db", store, eager).run(now=lambda: two_hours).staged.deleted == 1


def test_a_link_named_like_a_staged_file_is_neither_followed_nor_removed(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    outside = tmp_path / "outside.sst#7"
    outside.write_bytes(b"not the store's")
    os.utime(outside, (0, 0))
    store = open_store(root.as_uri())
    with Db.open("db", store, DbOptions()) as db:
        db.put(b"k", b"v")
        db.flush_memtable()
    planted = root / "db" / "compacted" / "planted.sst#7"
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.symlink_to(outside)
    os.utime(planted, (0, 0), follow_symlinks=False)
    later = time.time() + STAGED_MIN_AGE_S + 60
    opts = GarbageCollectorOptions(min_age=timedelta(0))
    stats = Collector("db", store, opts).run(now=lambda: later)
    assert stats.staged.deleted == 0
    assert planted.is_symlink() and outside.read_bytes() == b"not the store's"


def test_a_staged_file_of_another_database_is_not_this_pass_s(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    store = open_store(root.as_uri())
    for path in ("db", "db2"):
        with Db.open(path, store, DbOptions()) as db:
            db.put(b"k", b"v")
    _crash_mid_create(root.as_uri(), "db2/compacted/01ARZ3NDEKTSV4RRFFQ69G5FAV.sst")
    later = time.time() + STAGED_MIN_AGE_S + 60
    opts = GarbageCollectorOptions(min_age=timedelta(0))
    assert Collector("db", store, opts).run(now=lambda: later).staged.deleted == 0
    assert len(_staged(root)) == 1
    assert Collector("db2", store, opts).run(now=lambda: later).staged.deleted == 1


def test_stores_that_stage_nothing_sweep_with_no_request() -> None:
    store = open_store("memory://staged-none")
    with Db.open("db", store, DbOptions()) as db:
        db.put(b"k", b"v")
    before = store.counters.snapshot()
    assert store.sweep_staged("db", older_than_s=0, now_s=time.time()) == (0, 0)
    assert store.counters.snapshot() == before


def test_a_pass_that_only_swept_staged_files_logs_at_info(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """review51: a pass whose only work was the sweep logged its summary at DEBUG."""
    root = tmp_path / "store"
    root.mkdir()
    store = open_store(root.as_uri())
    with Db.open("db", store, DbOptions()) as db:
        db.put(b"k", b"v")
    later = time.time() + STAGED_MIN_AGE_S + 60
    Collector("db", store, GarbageCollectorOptions()).run(now=lambda: later)  # all else, first
    _crash_mid_create(root.as_uri(), "db/compacted/01ARZ3NDEKTSV4RRFFQ69G5FAV.sst")
    with caplog.at_level(logging.INFO, logger="slatedb_core.gc.collector"):
        stats = Collector("db", store, GarbageCollectorOptions()).run(now=lambda: later)
    assert stats.staged.deleted == 1 and stats.deleted == 0
    assert any("staged -1" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)
