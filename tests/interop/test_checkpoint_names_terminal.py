"""Checkpoint names holding terminal escapes cross both engines intact and reach the operator's
terminal only escaped (issue 39, item 7). SlateDB 0.17 accepts any string as a checkpoint name
(``CheckpointOptions.name: Option<String>``), so we accept the same and escape on output: a name
SlateDB wrote is listed by our CLI escaped (``--json``: exact), and one our CLI wrote is listed
by SlateDB's Admin exactly. Local filesystem and S3."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from slatedb_core.cli.main import cli
from slatedb_core.store.objectstore import ObjectStore
from tests.interop.oracle import Oracle, settings

pytestmark = pytest.mark.slatedb

NAMES = [
    "\x1b]8;;http://evil\x07click\x1b]8;;\x07",
    "\x1b[2J",
    "ok\rFAKE\x08",
    "\u202egnp.exe",
    "[link=http://evil]x[/link]",
]


def _run(url: str, *args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, ["--url", url, "--path", "db", *args], env={"COLUMNS": "400"})
    return r.exit_code, r.stdout, r.stderr


def _clean(text: str) -> bool:
    return all(c == "\n" or c.isprintable() for c in text)


def test_names_cross_both_engines_and_print_escaped(
    both_stores: tuple[Oracle, ObjectStore, str],
) -> None:
    oracle, _, url = both_stores
    w = oracle.open_db(s=settings(compactor=False))
    w.put(b"k", b"v")
    w.flush_memtable()
    admin = oracle.admin()
    theirs = {admin.create_checkpoint(name=n): n for n in NAMES}
    code, out, err = _run(url, "list-checkpoints")
    assert code == 0, err
    assert _clean(out) and _clean(err), "a raw escape reached the terminal"
    assert "[link=http://evil]x[/link]" in out and "\\x1b[2J" in out
    code, out, err = _run(url, "list-checkpoints", "--json")
    assert code == 0, err
    listed = {c["id"]: c["name"] for c in json.loads(out)}
    assert {str(i): n for i, n in theirs.items()}.items() <= listed.items()
    ours = {}
    for n in NAMES:
        code, out, err = _run(url, "create-checkpoint", "--name", n, "--json")
        assert code == 0, err
        ours[json.loads(out)["id"]] = n
    slate = {c.id: c.name for c in admin.checkpoints()}
    assert ours.items() <= slate.items(), "SlateDB lists our names differently"
    w.shutdown()
