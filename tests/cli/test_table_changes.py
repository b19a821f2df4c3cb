"""``slatedb changes`` on a sharded table's root: the table's combined feed with table cursors
(``--since``, ``--json``, ``--tail``), resuming from a cursor line through a split printing
exactly the rest (issue 43, item 5 over item 2's table feed)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from slatedb_core.cli.main import cli
from slatedb_core.store.url import open_store
from slatedb_core.table import Table
from tests.table.conftest import OPTS, fill


def run(url: str, *args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, ["--url", url, "--path", "t", "changes", *args])
    return r.exit_code, r.stdout, r.stderr


def lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines()]


def kv(docs: list[dict[str, Any]]) -> list[tuple[bytes, bytes | None]]:
    return [
        (base64.b64decode(d["key"]), None if d["value"] is None else base64.b64decode(d["value"]))
        for d in docs
        if "key" in d
    ]


def test_table_changes_json_tail_and_resume_across_a_split(tmp_path: Path) -> None:
    url = (tmp_path / "lake").as_uri()
    store = open_store(url)
    with Table.create("t", store, [b"m"], OPTS) as table:
        fill(table, {b"a": b"1", b"n": b"1"})
    code, out, err = run(url, "--json", "--batch-rows", "1")
    assert code == 0, err
    docs = lines(out)
    assert sorted(kv(docs)) == [(b"a", b"1"), (b"n", b"1")]
    assert all(d["db"] for d in docs if "key" in d)
    last = [d["cursor"] for d in docs if "cursor" in d][-1]
    assert last.startswith("t1.")
    code, out, err = run(url, "--tail", "--json")
    assert code == 0, err
    tail = lines(out)[0]["cursor"]
    assert tail.startswith("t1.")
    with Table.open("t", store, OPTS) as table:
        fill(table, {b"a": b"2", b"g": b"1"})
        table.split(0, b"f")
        fill(table, {b"a": b"3", b"z": b"1"})
    want = [(b"a", b"2"), (b"g", b"1"), (b"a", b"3"), (b"z", b"1")]
    for since in (last, tail):
        code, out, err = run(url, "--json", "--since", since)
        assert code == 0, err
        got = kv(lines(out))
        assert sorted(got) == sorted(want)
        assert got.index((b"a", b"2")) < got.index((b"a", b"3"))
    # nothing new after the last cursor: one cursor line, no changes
    code, out, err = run(url, "--json", "--since", lines(out)[-1]["cursor"])
    assert code == 0, err
    assert kv(lines(out)) == [] and len(lines(out)) == 1
    # human output: the cursor on stderr; a database cursor is bad usage
    code, out, err = run(url, "--since", tail)
    assert code == 0 and "cursor: t1." in err and "\tput\t" in out
    code, _, err = run(url, "--since", "c1.1.0")
    assert code == 2, err
