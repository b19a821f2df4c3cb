"""A writer's read that finds an SST collected under it (``WriterEngine.reload_after_missing``,
8ec0e51): what the reload may do and what the retry reads.

From review55 (session 55), attacking 8ec0e51. The reload picks up the latest manifest as the
manifest poller would, moving the writer checkpoint with a manifest commit. Found:

* a writer that had already failed (here a dead WAL flusher, ``BackgroundThreadDied``) still
  committed that manifest from a scan begun before the failure, though a failed writer commits
  nothing more (``WriterEngine.commit``'s docstring);
* the reload skipped the manifest read whenever the writer's state had moved on since the read
  took its own (an L0 flush meanwhile), so a get whose newer state still named collected SSTs
  raised SstMissing where reading the latest manifest answers it.

Held: a fenced writer's reload learns of the fencing (``Fenced``) and commits nothing.
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import pytest
from click.testing import CliRunner

from slatedb_core.checkpoints import list_checkpoints
from slatedb_core.cli.main import cli
from slatedb_core.compactor.compactor import run_compaction_once
from slatedb_core.errors import BackgroundThreadDied, Fenced
from slatedb_core.gc import run_gc_once
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions, DbOptions, GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultyStore
from slatedb_core.writer.db import Db
from tests.writer.thread_steps import start_recorded

T = TypeVar("T")

# the writer never polls and never flushes its WAL on its own: every step is the test's
QUIET = DbOptions(manifest_poll_interval=timedelta(hours=1), flush_interval=timedelta(hours=1))
HOUR_OLD = GarbageCollectorOptions(min_age=timedelta(hours=1))


def later() -> float:
    return time.time() + 2 * 3600


class BreakingStore(FaultyStore):
    """Raises RuntimeError (a store breaking its contract) for the armed operations and paths."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.armed: list[tuple[str, str]] = []

    def _run(self, op: str, path: str, call: Callable[[], T]) -> T:
        for o, glob in self.armed:
            if o == op and fnmatch.fnmatchcase(path, glob):
                raise RuntimeError(f"unexpected failure of {op} {path}")
        return super()._run(op, path, call)


def write_l0s(db: Db, n: int) -> None:
    for i in range(n):
        db.put(f"k{i}".encode(), f"v{i}".encode())
        db.flush_memtable()


def compact_and_collect(url: str) -> None:
    """Compact the L0s, delete the writer's checkpoint as an operator would (docs/operations.md,
    "A writer that did not close") and let GC collect the replaced SSTs."""
    store = open_store(url)
    assert run_compaction_once("db", store, CompactorOptions(l0_trigger=2)) is not None
    (cp,) = [c for c in list_checkpoints("db", store) if c.writer_epoch is not None]
    out = CliRunner().invoke(
        cli, ["--url", url, "--path", "db", "delete-checkpoint", "--id", str(cp.id)]
    )
    assert out.exit_code == 0, out.output
    run_gc_once("db", store, HOUR_OLD, now=later)


def test_a_failed_writers_scan_commits_no_manifest_when_an_sst_is_gone(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/lake"
    inner = open_store(url)
    store = BreakingStore(inner)
    db = Db.open("db", store, QUIET)
    write_l0s(db, 4)
    rows = db.scan()  # its state is taken now; the rows are read later
    store.armed += [("put", "db/wal/*"), ("put_if_absent", "db/wal/*")]
    with pytest.raises(BackgroundThreadDied):
        db.put(b"x", b"y")  # the WAL flusher dies: the writer has failed
    compact_and_collect(url)
    ms = ManifestStore(inner, "db")
    latest = ms.read_latest().id

    with pytest.raises(BackgroundThreadDied):
        list(rows)

    assert ms.read_latest().id == latest, "a failed writer committed a manifest"
    with pytest.raises(BackgroundThreadDied):
        db.close()


def test_a_get_whose_writer_moved_on_reads_the_latest_manifest(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/lake"
    inner = open_store(url)
    store = FaultyStore(inner)
    db = Db.open("db", store, QUIET)
    try:
        write_l0s(db, 4)
        pause = store.pause("first-sst-read", "get", "db/compacted/*")
        outcome_value: list[bytes | None] = []
        t, outcome = start_recorded(lambda: outcome_value.append(db.get(b"k0")))
        assert pause.wait_reached(10), "the get read no SST"
        # the writer's state moves on (its own L0 flush, committed on the manifest before the
        # compaction), then the compaction and GC collect every L0 SST both states name
        db.put(b"k9", b"v9")
        db.flush_memtable()
        compact_and_collect(url)
        pause.release()
        t.join(15)
        assert outcome == [None], outcome
        assert outcome_value == [b"v0"]
    finally:
        store.release_all()
        db.close()


def test_a_fenced_writers_get_of_a_collected_sst_raises_fenced_and_commits_nothing(
    tmp_path: Path,
) -> None:
    """Held: the newer writer's open replaced the old one's checkpoint, so GC collected the L0s
    the old writer still reads; the old writer's reload learns it is fenced, serves nothing and
    writes no manifest."""
    url = f"file://{tmp_path}/lake"
    store = open_store(url)
    old = Db.open("db", store, QUIET)
    write_l0s(old, 4)
    with Db.open("db", store, QUIET) as new:
        new.put(b"k0", b"newer")
        assert run_compaction_once("db", store, CompactorOptions(l0_trigger=2)) is not None
        new.flush_memtable()  # its commit moves its checkpoint past the compaction
        run_gc_once("db", store, HOUR_OLD, now=later)
        ms = ManifestStore(store, "db")
        latest = ms.read_latest().id
        with pytest.raises(Fenced):
            old.get(b"k1")
        with pytest.raises(Fenced):
            old.get_many([b"k1", b"k2"])
        assert ms.read_latest().id == latest
        assert new.get(b"k0") == b"newer" and new.get(b"k1") == b"v1"
    with pytest.raises(Fenced):
        old.close()
