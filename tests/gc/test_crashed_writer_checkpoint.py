"""Releasing the checkpoint a writer left behind (docs/operations.md, "A writer that did not
close").

From session 54's known gap (RELIABILITY.md): a crashed writer's checkpoint (SlateDB RFC 0004, no
expiry) pins its last manifest until another writer opens. The operator's way out, deleting it
with ``delete-checkpoint``, is checked here end to end through the CLI, and so is what the page
says of deleting the checkpoint of a writer that is still running."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from slatedb_core.checkpoints import list_checkpoints
from slatedb_core.cli.main import cli
from slatedb_core.compactor.compactor import run_compaction_once
from slatedb_core.errors import SstMissing
from slatedb_core.gc import run_gc_once
from slatedb_core.layout import compacted_dir
from slatedb_core.options import CompactorOptions, DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db
from tests.gc import names
from tests.gc.writer_close_steps import HOUR_OLD, QUIET, later, live_ssts, write_l0s


def delete_writer_checkpoint(url: str) -> None:
    store = open_store(url)
    (cp,) = [c for c in list_checkpoints("db", store) if c.writer_epoch is not None]
    listed = CliRunner().invoke(cli, ["--url", url, "--path", "db", "list-checkpoints"])
    assert listed.exit_code == 0 and "writer_epoch" in listed.output, listed.output
    out = CliRunner().invoke(
        cli, ["--url", url, "--path", "db", "delete-checkpoint", "--id", str(cp.id)]
    )
    assert out.exit_code == 0, out.output


def test_a_crashed_writers_checkpoint_pins_until_deleted_then_gc_collects(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/lake"
    store = open_store(url)
    db = Db.open("db", store, QUIET)
    write_l0s(db, 4)
    db._simulate_crash()
    assert run_compaction_once("db", store, CompactorOptions(l0_trigger=2)) is not None

    run_gc_once("db", store, HOUR_OLD, now=later)
    assert len(names(store, compacted_dir("db"))) == 5  # the crashed writer's L0s stay pinned

    delete_writer_checkpoint(url)
    run_gc_once("db", store, HOUR_OLD, now=later)
    assert names(store, compacted_dir("db")) == live_ssts(store)
    with Db.open("db", store, QUIET) as again:
        assert [again.get(f"k{i}".encode()) for i in range(4)] == [
            f"v{i}".encode() for i in range(4)
        ]


def collected_under_a_running_writer(url: str) -> Db:
    """A writer that read 4 L0 SSTs, which a compaction replaced and GC then collected once
    an operator deleted the writer's checkpoint; it polls too rarely to have seen any of it."""
    store = open_store(url)
    db = Db.open("db", store, DbOptions(manifest_poll_interval=timedelta(hours=1)))
    write_l0s(db, 4)
    assert run_compaction_once("db", store, CompactorOptions(l0_trigger=2)) is not None
    delete_writer_checkpoint(url)
    run_gc_once("db", store, HOUR_OLD, now=later)
    return db


def test_a_writers_get_after_gc_collected_its_ssts_reloads_the_manifest(tmp_path: Path) -> None:
    """Before, the writer's get raised the store's ObjectNotFound (kind INVALID, "check the
    path you asked for"), where a DbReader reloads its manifest (reader.py, ``_recover``)."""
    url = f"file://{tmp_path}/lake"
    db = collected_under_a_running_writer(url)
    try:
        assert db.get(b"k0") == b"v0"
        db.put(b"after", b"the delete")
    finally:
        db.close()
    with Db.open("db", open_store(url), QUIET) as again:
        assert again.get(b"k0") == b"v0" and again.get(b"after") == b"the delete"


def test_a_writers_get_many_after_gc_collected_its_ssts_reloads_the_manifest(
    tmp_path: Path,
) -> None:
    db = collected_under_a_running_writer(f"file://{tmp_path}/lake")
    try:
        db.put(b"k1", b"new")
        assert db.get_many([b"k3", b"k0", b"k1", b"absent"]) == [b"v3", b"v0", b"new", None]
    finally:
        db.close()


def test_a_writers_scan_after_gc_collected_its_ssts_raises_then_reads_again(
    tmp_path: Path,
) -> None:
    db = collected_under_a_running_writer(f"file://{tmp_path}/lake")
    try:
        with pytest.raises(SstMissing, match="start the scan again"):
            list(db.scan())
        assert [k for k, _ in db.scan()] == [b"k0", b"k1", b"k2", b"k3"]
        assert db.scan_arrow().read_all().num_rows == 4
    finally:
        db.close()


def test_a_writers_read_of_an_sst_its_latest_manifest_names_is_sst_missing(
    tmp_path: Path,
) -> None:
    """Damage, not GC: the SST is gone while the latest manifest still names it."""
    url = f"file://{tmp_path}/lake"
    store = open_store(url)
    with Db.open("db", store, QUIET) as db:
        write_l0s(db, 1)
        (sst,) = names(store, compacted_dir("db"))
        store.delete(sst)
        with pytest.raises(SstMissing, match="still named"):
            db.get(b"k0")
        with pytest.raises(SstMissing, match="still named"):
            db.get_many([b"k0"])
        with pytest.raises(SstMissing, match="still named"):
            list(db.scan())
