"""``slatedb clone``, ``project`` and ``union``."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slatedb_core.checkpoints import create_checkpoint
from slatedb_core.cli.clones import COMMANDS, parse_source, register
from slatedb_core.keys import KeyRange
from slatedb_core.lifecycle.union import UnionSource
from slatedb_core.options import DbOptions, DbReaderOptions, ReaderMode
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db
from tests.cli.cli_steps import group_with

OPTS = DbOptions(flush_interval=timedelta(milliseconds=5))


GROUP = group_with(register)


@pytest.fixture
def lake(tmp_path: Path) -> str:
    url = (tmp_path / "lake").as_uri()
    with Db.open("db", open_store(url), OPTS) as db:
        for i in range(100):
            db.put(b"k%03d" % i, b"v%d" % i, await_durable=False)
        db.put(b"\x00bin", b"binary")
        db.flush_memtable()
    return url


def run(lake: str, path: str, *args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(GROUP, ["--url", lake, "--path", path, *args])
    return r.exit_code, r.stdout, r.stderr


def run_json(lake: str, path: str, *args: str) -> Any:
    code, out, err = run(lake, path, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def content(store: ObjectStore, path: str) -> dict[bytes, bytes]:
    options = DbReaderOptions(mode=ReaderMode.FOLLOW_LATEST)
    with DbReader.open(path, store, options=options) as reader:
        return dict(reader.scan())


def test_commands_are_registered() -> None:
    assert {c.name for c in COMMANDS} == {"clone", "project", "union"}
    assert all(GROUP.commands[c.name or ""] is c for c in COMMANDS)


def test_clone_prints_its_summary(lake: str) -> None:
    d = run_json(lake, "copy", "clone", "--parent", "db")
    assert d["path"] == "copy" and d["initialized"] is True and d["key_range"] is None
    (ext,) = d["external_dbs"]
    assert ext["path"] == "db" and ext["sst_ids"] == 1
    uuid.UUID(ext["final_checkpoint_id"])
    code, out, _ = run(lake, "copy", "clone", "--parent", "db")  # re-run: same clone
    assert code == 0 and "copy" in out and ext["source_checkpoint_id"] in out
    assert content(open_store(lake), "copy") == content(open_store(lake), "db")


def test_clone_from_a_checkpoint_with_a_hex_range(lake: str) -> None:
    cp = create_checkpoint("db", open_store(lake))
    d = run_json(
        lake, "part", "clone", "--parent", "db", "--checkpoint", str(cp.id), "--from", "0x00"
    )
    assert d["external_dbs"][0]["source_checkpoint_id"] == str(cp.id)
    assert d["key_range"] == {"from": "0x00", "to": None}


def test_project_then_union_round_trip(lake: str) -> None:
    store = open_store(lake)
    a = run_json(lake, "a", "project", "--source", "db", "--to", "k050")
    assert a["key_range"] == {"from": None, "to": "k050"}
    run_json(lake, "b", "project", "--source", "db", "--from", "k050")
    u = run_json(lake, "u", "union", "--source", "a@..k050", "--source", "b@k050..")
    assert u["initialized"] is True and u["key_range"] is None
    assert content(store, "u") == content(store, "db")
    code, out, _ = run(lake, "u2", "union", "--source", "b", "--source", "a")
    assert code == 0 and "union of 2 source(s)" in out


def test_bad_input_exits_2(lake: str) -> None:
    for path, args in [
        ("x", ["project", "--source", "db"]),
        ("x", ["project", "--source", "db", "--from", "0xzz"]),
        ("x", ["project", "--source", "db", "--from", "b", "--to", "a"]),
        ("x", ["clone", "--parent", "db", "--checkpoint", "nope"]),
        ("x", ["clone", "--parent", "db", "--to", ""]),
        ("x", ["union", "--source", "a:not-a-uuid"]),
        ("x", ["union", "--source", "a@k1"]),
        ("x", ["union", "--source", ":x"]),
        ("x", ["union"]),
    ]:
        code, _, err = run(lake, path, *args)
        assert code == 2, (args, err)


def test_store_errors_exit_1(lake: str) -> None:
    code, _, err = run(lake, "x", "clone", "--parent", "missing")
    assert code == 1 and "DatabaseNotFound" in err
    code, _, err = run(lake, "x", "clone", "--parent", "db", "--checkpoint", str(uuid.uuid4()))
    assert code == 1 and "SourceCheckpointLost" in err and "retry without it" in err
    code, _, err = run(lake, "x", "union", "--source", "db", "--source", "db")
    assert code == 1 and "UnionError" in err and "overlap" in err
    code, _, err = run(lake, "db/inner", "clone", "--parent", "db")
    assert code == 1 and "InvalidArgument" in err


def test_source_spec_parsing() -> None:
    cp = uuid.uuid4()
    assert parse_source("s") == UnionSource("s")
    assert parse_source(f"s:{cp}") == UnionSource("s", cp)
    assert parse_source("s@a..b") == UnionSource("s", None, KeyRange(b"a", b"b"))
    assert parse_source(f"s:{cp}@..0x6d") == UnionSource("s", cp, KeyRange(None, b"m"))
    assert parse_source("s@..") == UnionSource("s", None, KeyRange())
    assert parse_source("s@a.b..c") == UnionSource("s", None, KeyRange(b"a.b", b"c"))
