"""``slatedb compact`` and ``slatedb gc`` against real databases on the local filesystem."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from slatedb_core.cli.main import cli
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db


def _run(root: Path, path: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--url", str(root), "--path", path, *args])
    return result.exit_code, result.output


def _db_with_l0s(root: Path, path: str, n_l0: int) -> dict[bytes, bytes]:
    store = open_store(str(root))
    model: dict[bytes, bytes] = {}
    with Db.open(path, store, DbOptions()) as db:
        for i in range(n_l0):
            for j in range(50):
                key = f"k{j:04d}".encode()
                model[key] = f"v{i}-{j}".encode()
                db.put(key, model[key], await_durable=False)
            db.flush_memtable()
    return model


def test_compact_merges_l0_and_keeps_data(tmp_path: Path) -> None:
    model = _db_with_l0s(tmp_path, "orders", 6)
    before = ManifestStore(open_store(str(tmp_path)), "orders").read_latest().manifest
    assert len(before.l0) >= 6

    code, out = _run(tmp_path, "orders", "compact", "--json")
    assert code == 0, out
    stats = json.loads(out)
    assert stats["compacted"] is True
    assert stats["input_ssts"] >= 6 and stats["output_ssts"] >= 1

    after = ManifestStore(open_store(str(tmp_path)), "orders").read_latest().manifest
    assert len(after.l0) == 0 and after.compacted
    with Db.open("orders", open_store(str(tmp_path))) as db:
        assert dict(db.scan()) == model

    code, out = _run(tmp_path, "orders", "compact")
    assert code == 0 and "nothing to compact" in out


def test_gc_deletes_old_objects_and_reports_boundaries(tmp_path: Path) -> None:
    model = _db_with_l0s(tmp_path, "orders", 4)
    assert _run(tmp_path, "orders", "compact")[0] == 0
    # The writer's checkpoint pins the manifest it last saw (with the L0s); a writer that opens
    # after the compaction moves it on, and the replaced L0 SSTs become collectable.
    with Db.open("orders", open_store(str(tmp_path))):
        pass
    code, out = _run(tmp_path, "orders", "gc", "--min-age", "0s", "--json")
    assert code == 0, out
    stats = json.loads(out)
    assert stats["compacted"]["deleted"] >= 4  # the L0 SSTs the compaction replaced
    assert stats["manifest"]["deleted"] >= 1
    assert stats["manifest_boundary"] >= 1
    with Db.open("orders", open_store(str(tmp_path))) as db:
        assert dict(db.scan()) == model

    code, out = _run(tmp_path, "orders", "gc", "--min-age", "0s")
    assert code == 0 and "boundaries: manifest" in out


def test_gc_deletes_soft_destroyed_database_after_grace(tmp_path: Path) -> None:
    _db_with_l0s(tmp_path, "scratch", 1)
    destroy("scratch", open_store(str(tmp_path)), soft=True)
    code, out = _run(tmp_path, "scratch", "gc", "--min-age", "0s")
    assert code == 0 and "soft-destroyed; waiting" in out
    code, out = _run(tmp_path, "scratch", "gc", "--min-age", "0s", "--db-delete-grace", "0s")
    assert code == 0 and "soft-destroyed database deleted" in out, out
    assert not any((tmp_path / "scratch").rglob("*.sst"))


def test_bad_arguments_are_usage_errors(tmp_path: Path) -> None:
    code, out = _run(tmp_path, "orders", "gc", "--min-age", "yesterday")
    assert code == 2 and "yesterday" in out
    code, out = _run(tmp_path, "orders", "gc", "--min-age", "-5m")
    assert code == 2
    code, out = _run(tmp_path, "nothing-here", "gc", "--min-age", "0s")
    # like `compact`, a missing database is DatabaseNotFound, exit 1 (RELIABILITY.md, review finding 18)
    assert code == 1 and "error: DatabaseNotFound: " in out
    assert not (tmp_path / "nothing-here").exists()
