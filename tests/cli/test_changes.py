"""``slatedb changes --since CURSOR --json``: a database's changes for operators and scripts, one
JSON object per line with keys and values in base64 (or hex) and a cursor line after each
batch; resuming from the last cursor line prints exactly the rest (issue 43, item 5)."""

from __future__ import annotations

import base64
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slatedb_core.cli.main import cli
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db

QUIET = DbOptions(flush_interval=timedelta(hours=1))


@pytest.fixture
def lake(tmp_path: Path) -> str:
    url = (tmp_path / "lake").as_uri()
    with Db.open("orders", open_store(url), QUIET) as db:
        db.put(b"apple", b"red", ttl=timedelta(hours=1))
        db.put(b"\xffbin", b"\x00\n\x01")
        db.delete(b"apple")
    return url


def run(url: str, *args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, ["--url", url, "--path", "orders", "changes", *args])
    return r.exit_code, r.stdout, r.stderr


def lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines()]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_json_lines_with_cursors_and_resume(lake: str) -> None:
    code, out, err = run(lake, "--json", "--batch-rows", "2")
    assert code == 0, err
    docs = lines(out)
    changes = [d for d in docs if "key" in d]
    cursors = [d["cursor"] for d in docs if "cursor" in d]
    assert [(d["key"], d["value"], d["op"]) for d in changes] == [
        (b64(b"apple"), b64(b"red"), "put"),
        (b64(b"\xffbin"), b64(b"\x00\n\x01"), "put"),
        (b64(b"apple"), None, "delete"),
    ]
    first = changes[0]
    assert isinstance(first["expire_ts"], int) and isinstance(first["create_ts"], int)
    assert first["expire_ts"] - first["create_ts"] == 3_600_000
    assert first["snapshot"] is False and isinstance(first["seq"], int)
    assert len(cursors) >= 2 and "cursor" in docs[-1]

    code, out, _ = run(lake, "--json", "--since", str(cursors[0]))
    rest = [d for d in lines(out) if "key" in d]
    assert rest == changes[2:]
    code, out, _ = run(lake, "--json", "--since", str(cursors[-1]))
    assert code == 0 and lines(out) == [{"cursor": cursors[-1]}]  # nothing new, same cursor


def test_hex_and_human_output(lake: str) -> None:
    code, out, _ = run(lake, "--json", "--encoding", "hex")
    assert code == 0
    assert lines(out)[1]["key"] == b"\xffbin".hex()
    code, out, err = run(lake)
    assert code == 0
    rows = [line.split("\t") for line in out.splitlines()]
    assert [r[1:3] for r in rows] == [["put", "apple"], ["put", "\\xffbin"], ["delete", "apple"]]
    assert rows[1][3] == "\\x00\\n\\x01"  # escaped: one line per change
    assert err.startswith("cursor: c1.")


@pytest.mark.parametrize("bad", ["nope", "c1.0.0", "c1.1.1.x.2."])
def test_a_bad_cursor_is_a_usage_error(lake: str, bad: str) -> None:
    code, out, err = run(lake, "--json", "--since", bad)
    assert code == 2 and out == ""
    assert "--since" in err


def test_a_consumer_is_registered_and_released(lake: str) -> None:
    code, _, _ = run(lake, "--json", "--consumer", "etl")
    assert code == 0
    names = {
        c.name for c in ManifestStore(open_store(lake), "orders").read_latest().manifest.checkpoints
    }
    assert "changes-consumer:etl" in names
    code, out, _ = run(lake, "--consumers", "--json")
    assert code == 0
    (listed,) = json.loads(out)
    assert listed["consumer"] == "etl" and listed["wal_behind"] == 0 and not listed["expired"]
    code, out, _ = run(lake, "--consumers")
    assert code == 0 and out.startswith("etl\tlive\twal_behind=0\t")
    code, _, _ = run(lake, "--consumer", "etl", "--release")
    assert code == 0
    names = {
        c.name for c in ManifestStore(open_store(lake), "orders").read_latest().manifest.checkpoints
    }
    assert "changes-consumer:etl" not in names
    assert run(lake, "--release")[0] == 2
    assert run(lake, "--consumers", "--json")[1].strip() == "[]"


def test_tail_starts_a_script_from_now(lake: str) -> None:
    code, out, _ = run(lake, "--tail", "--json")
    assert code == 0
    (doc,) = lines(out)
    with Db.open("orders", open_store(lake), QUIET) as db:
        db.put(b"later", b"x")
    code, out, _ = run(lake, "--json", "--since", str(doc["cursor"]))
    assert [d["key"] for d in lines(out) if "key" in d] == [b64(b"later")]
