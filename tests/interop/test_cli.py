"""Our CLI, unchanged, on a database SlateDB 0.17 writes (and keeps writing): it reads the
manifests, checkpoints and rows as SlateDB's Admin and readers see them, and what it changes
(checkpoints, GC, compaction, a clone) SlateDB then reads (docs/format.md)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slatedb_core.cli.main import cli
from tests.interop.expect import Model, check_reads
from tests.interop.oracle import Oracle, settings
from tests.interop.rounds_steps import slate_rounds, slate_tail

pytestmark = pytest.mark.slatedb


def run_json(root: Path, *args: str, path: str = "db", code: int = 0) -> Any:
    r = CliRunner().invoke(cli, ["--url", str(root), "--path", path, *args, "--json"])
    assert r.exit_code == code, (args, r.stdout, r.stderr, r.exception)
    return json.loads(r.stdout)


def cli_scan(root: Path, path: str = "db") -> list[tuple[bytes, bytes]]:
    return [
        (bytes.fromhex(row["key"]), bytes.fromhex(row["value"]))
        for row in run_json(root, "scan", "--format", "hex", path=path)
    ]


def cli_get(root: Path, key: bytes, path: str = "db") -> bytes | None:
    r = CliRunner().invoke(
        cli,
        ["--url", str(root), "--path", path, "get", "--format", "hex", "0x" + key.hex(), "--json"],
    )
    # exit 1 with JSON null: not found; anything else is an error (its message on stderr)
    assert r.exit_code in (0, 1) and r.stdout.strip(), (key, r.stdout, r.stderr, r.exception)
    found = json.loads(r.stdout)
    return None if found is None else bytes.fromhex(found["value"])


def test_cli_reads_a_live_slatedb_database(oracle: Oracle, root: Path) -> None:
    """read-manifest, list-manifests, list-checkpoints, scan and get while SlateDB writes."""
    model = Model()
    w = oracle.open_db(s=settings(compactor=True))
    slate_rounds(w, model, 4)
    admin = oracle.admin()
    admin.wait_until(lambda m: bool(m.compacted))
    slate_rounds(w, model, 1, first=4)
    cid = admin.create_checkpoint(name="slatedb-made")
    slate_tail(w, model)
    latest = admin.latest()
    m = run_json(root, "read-manifest")
    assert m["id"] == latest.id and m["writer_epoch"] == latest.writer_epoch
    assert m["compactor_epoch"] == latest.compactor_epoch
    assert m["replay_after_wal_id"] == latest.replay_after_wal_id
    assert len(m["l0"]) == len(latest.l0) and len(m["compacted"]) == len(latest.compacted)
    ids = [row["id"] for row in run_json(root, "list-manifests")]
    assert ids[-1] == latest.id and ids == sorted(ids)
    first = run_json(root, "read-manifest", "--id", str(ids[0]))
    assert first["id"] == ids[0]
    listed = {uuid.UUID(c["id"]): c for c in run_json(root, "list-checkpoints")}
    assert listed.keys() == {uuid.UUID(c.id) for c in admin.checkpoints()}
    assert listed[cid]["name"] == "slatedb-made"
    named = run_json(root, "list-checkpoints", "--name", "slatedb-made")
    assert [c["id"] for c in named] == [str(cid)]
    check_reads(model, lambda k: cli_get(root, k), lambda: cli_scan(root), who="our CLI", every=29)


def test_cli_changes_a_slatedb_database_and_slatedb_reads_them(oracle: Oracle, root: Path) -> None:
    """create-checkpoint, delete-checkpoint, gc --min-age 0s and clone while SlateDB's writer
    runs; compact once it has shut down (its own compactor off); SlateDB sees every change."""
    model = Model()
    w = oracle.open_db(s=settings(compactor=False))
    slate_rounds(w, model, 4)
    made = run_json(root, "create-checkpoint", "--name", "cli-made", "--lifetime", "1h")
    admin = oracle.admin()
    slate_view = {c.id: c for c in admin.checkpoints()}
    assert made["id"] in slate_view and slate_view[made["id"]].name == "cli-made"
    slate_tail(w, model)
    theirs = admin.create_checkpoint(name="to-delete")
    run_json(root, "delete-checkpoint", "--id", str(theirs))
    assert str(theirs) not in {c.id for c in admin.checkpoints()}
    gc = run_json(root, "gc", "--min-age", "0s")
    assert gc["manifest"]["deleted"] >= 1 and gc["manifest_boundary"] >= 1
    clone = run_json(root, "clone", "--parent", "db", path="clone")
    assert clone is not None
    check_reads(model, w.get, w.scan, who="SlateDB's running Db after our gc")
    w.shutdown()
    stats = run_json(root, "compact")
    assert stats["compacted"] is True and stats["output_ssts"] >= 1
    latest = admin.latest()
    assert latest.compacted and not latest.l0
    r = oracle.open_reader()
    check_reads(model, r.get, r.scan, who="SlateDB DbReader after our compact")
    r.shutdown()
    c = oracle.open_reader("clone")
    check_reads(model, c.get, c.scan, who="SlateDB DbReader of our CLI's clone")
    c.shutdown()
    r = oracle.open_reader(checkpoint=uuid.UUID(made["id"]))
    assert r.scan(), "SlateDB reads nothing at our CLI's checkpoint"
