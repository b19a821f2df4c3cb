"""Attacks on GC's sweep of staged local-disk files (dbb176f): a live create whose staged file
is swept must fail loudly and leave nothing; a sweep follows no link, stays inside its database
(not a sibling whose name extends it, not above it); a separate WAL store's leftovers go too; a
writer killed in the middle of streaming an L0 SST loses no acknowledged write and duplicates
no row once reopened. Adversarial review (review51, session 51)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from slatedb_core import Db, DbOptions, GarbageCollectorOptions
from slatedb_core.errors import SlateDBError
from slatedb_core.gc.collector import Collector
from slatedb_core.gc.staged import STAGED_MIN_AGE_S
from slatedb_core.store.local_fs import LocalFiles
from slatedb_core.store.objects import ObjectVersion
from slatedb_core.store.url import open_store
from slatedb_core.writer import l0_flush

if TYPE_CHECKING:
    from typing_extensions import Buffer

LATER = STAGED_MIN_AGE_S + 120
NOW0 = GarbageCollectorOptions(min_age=timedelta(0))


def _staged(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*#*") if p.is_file() or p.is_symlink())


def test_a_live_create_whose_staged_file_is_swept_fails_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    """A writer frozen past the sweep's age (here: a GC whose clock is ahead) loses its staged
    file in the middle of the create; the create must raise, and no object may appear."""
    store = open_store(tmp_path.as_uri())
    with Db.open("db", store, DbOptions()) as db:
        db.put(b"k", b"v")
    path = "db/compacted/01ARZ3NDEKTSV4RRFFQ69G5FAV.sst"
    swept: list[int] = []

    def chunks() -> Iterator[bytes]:
        yield b"a" * 100_000
        later = time.time() + LATER
        swept.append(Collector("db", store, NOW0).run(now=lambda: later).staged.deleted)
        yield b"b" * 100_000

    with pytest.raises(SlateDBError):
        store.create_streamed(path, chunks())
    assert swept == [1]
    assert not store.exists(path)
    assert _staged(tmp_path) == []


def test_a_sweep_never_leaves_its_database_folder(tmp_path: Path) -> None:
    """Old staged files beside the database's folder, in a sibling whose name extends it, and
    at the store's root stay; a directory link inside the folder is not followed."""
    root = tmp_path / "store"
    root.mkdir()
    store = open_store(root.as_uri())
    with Db.open("db", store, DbOptions()) as db:
        db.put(b"k", b"v")
    planted = [
        root / "db.sst#1",
        root / "db2" / "compacted" / "x.sst#2",
        root / "dbx#3",
        root / "top#4",
    ]
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "deep").mkdir(parents=True)
    planted.append(elsewhere / "deep" / "y.sst#5")
    for p in planted:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"not garbage of db")
        os.utime(p, (0, 0))
    (root / "db" / "linked").symlink_to(elsewhere, target_is_directory=True)
    later = time.time() + LATER
    stats = Collector("db", store, NOW0).run(now=lambda: later)
    assert stats.staged.deleted == 0
    assert all(p.read_bytes() == b"not garbage of db" for p in planted)


def test_a_separate_wal_store_s_leftovers_are_swept(tmp_path: Path) -> None:
    main, wal = tmp_path / "main", tmp_path / "wal"
    main.mkdir()
    wal.mkdir()
    store = open_store(main.as_uri())
    with Db.open("db", store, DbOptions(wal_url=wal.as_uri())) as db:
        db.put(b"k", b"v")
    leftover = wal / "db" / "wal" / "00000000000000000099.sst#12345"
    leftover.write_bytes(b"w" * 1000)
    os.utime(leftover, (0, 0))
    young = wal / "db" / "wal" / "00000000000000000098.sst#6789"
    young.write_bytes(b"w" * 10)
    now = time.time()
    os.utime(young, (now, now))
    stats = Collector("db", store, NOW0, wal_url=wal.as_uri()).run()
    assert stats.staged.deleted == 1 and stats.staged.bytes_freed == 1000
    assert not leftover.exists() and young.exists()
    with Db.open("db", store, DbOptions(wal_url=wal.as_uri())) as db:
        assert db.get(b"k") == b"v"


_KILL_MID_FLUSH = """
import os, sys
from slatedb_core import Db, DbOptions
from slatedb_core.store import local_fs
from slatedb_core.store.url import open_store

real = local_fs.LocalFiles.create_streamed
def dying(self, path, chunks):
    if "/compacted/" not in path:
        return real(self, path, chunks)
    def parts():
        for i, c in enumerate(chunks):
            if i == 2 and sys.argv[2] == "mid":
                os._exit(9)  # killed in the middle of streaming the L0 SST
            yield c
    done = real(self, path, parts())
    os._exit(9)  # killed once the L0 SST is linked, before the manifest names it
local_fs.LocalFiles.create_streamed = dying
from slatedb_core.writer import l0_flush
l0_flush.L0_SLICE_BYTES = 1
store = open_store(sys.argv[1])
db = Db.open("db", store, DbOptions())
for i in range(6000):
    db.put(b"k%05d" % i, b"v%d" % i, await_durable=False)
db.flush()
print("acked", flush=True)
db.flush_memtable()
print("flushed", flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("at", ["mid", "linked"])
def test_a_writer_killed_mid_l0_stream_loses_nothing_acknowledged(tmp_path: Path, at: str) -> None:
    store_dir = tmp_path / "s"
    store_dir.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", _KILL_MID_FLUSH, store_dir.as_uri(), at],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 9, done.stderr
    assert done.stdout.split() == ["acked"]
    orphans = list((store_dir / "db" / "compacted").glob("*.sst"))
    assert len(_staged(store_dir)) == (1 if at == "mid" else 0)  # half-written, never linked
    assert len(orphans) == (0 if at == "mid" else 1)  # linked, named by no manifest
    store = open_store(store_dir.as_uri())
    with Db.open("db", store, DbOptions()) as db:
        rows = list(db.scan())
        assert rows == [(b"k%05d" % i, b"v%d" % i) for i in range(6000)]
        db.flush_memtable()
        assert list(db.scan()) == rows
    later = time.time() + LATER
    swept = Collector("db", store, NOW0).run(now=lambda: later)
    assert swept.staged.deleted == (1 if at == "mid" else 0)
    assert not any(p.exists() for p in orphans)  # an orphan L0 SST is collected too
    with Db.open("db", store, DbOptions()) as db:
        assert list(db.scan()) == rows


def test_an_l0_flush_whose_staged_sst_is_swept_reports_it_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GC whose clock is an hour ahead sweeps the L0 SST a flush is streaming: the flush
    raises (or retries to a new SST), the manifest names no missing SST, every acknowledged row
    reads once, before and after a reopen."""
    store = open_store(tmp_path.as_uri())
    real = LocalFiles.create_streamed
    swept: list[int] = []

    def sweeping(self: LocalFiles, path: str, chunks: Iterable[Buffer]) -> ObjectVersion:
        if "/compacted/" not in path or swept:
            return real(self, path, chunks)

        later = time.time() + LATER

        def parts() -> Iterator[Buffer]:
            for i, c in enumerate(chunks):
                if i == 1:
                    swept.append(Collector("db", store, NOW0).run(now=lambda: later).staged.deleted)
                yield c

        return real(self, path, parts())

    monkeypatch.setattr(LocalFiles, "create_streamed", sweeping)
    monkeypatch.setattr(l0_flush, "L0_SLICE_BYTES", 1)
    rows = [(b"k%05d" % i, b"v%d" % i) for i in range(5000)]
    with Db.open("db", store, DbOptions()) as db:
        for k, v in rows:
            db.put(k, v, await_durable=False)
        db.flush()
        try:
            db.flush_memtable()
        except SlateDBError:
            pass
        assert swept == [1]
        db.flush_memtable()
        assert list(db.scan()) == rows
        for sst in db.manifest.manifest.ssts:
            assert store.exists(f"db/compacted/{sst.id}.sst")
    with Db.open("db", store, DbOptions()) as db:
        assert list(db.scan()) == rows
