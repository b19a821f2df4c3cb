"""Stored strings reach the operator's terminal only escaped (issue 39, item 7).

A checkpoint name (SlateDB accepts any string, ESC included) or an external database's path in a
manifest is written by whoever can write the database's objects. Printed raw, an escape sequence
in it rewrites the operator's screen (``ESC[2J``), plants a hyperlink (OSC 8) or hides text (CR,
backspace, a bidi override); printed through Rich unescaped, ``[link=...]`` is Rich markup and
becomes an OSC 8 hyperlink on a terminal. Every human line the CLI prints goes through
:mod:`slatedb_core.cli.terminal`; ``--json`` stays valid JSON that gives the exact name back.
"""

from __future__ import annotations

import ast
import json
import logging
import uuid
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from slatedb_core.checkpoints import add_checkpoint, list_checkpoints
from slatedb_core.cli.main import cli
from slatedb_core.cli.output import handle_errors
from slatedb_core.errors import CorruptionError
from slatedb_core.manifest.model import ExternalDb, Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CheckpointOptions
from slatedb_core.store.url import open_store

EVIL = [
    "\x1b]8;;http://evil\x07click me\x1b]8;;\x07",  # OSC 8 hyperlink
    "\x1b[2J\x1b[H",  # clear the screen
    "ok\rFAKE",  # carriage return overwrites the line
    "abc\x08\x08\x08xyz",  # backspaces
    "\u202egnp.exe",  # right-to-left override
    "\x9b31mred",  # C1 CSI
    "[link=http://evil]rich link[/link]",  # Rich markup
    "[bold red]styled[/]",
    "two\nlines",
]


def _assert_clean(text: str, what: str) -> None:
    """No character a terminal acts on: every one printable, newline the only exception."""
    bad = sorted({repr(c) for c in text if c != "\n" and not c.isprintable()})
    assert not bad, f"{what}: raw control/format characters {bad} reach the terminal"


@pytest.fixture
def lake(tmp_path: Path) -> str:
    url = (tmp_path / "lake").as_uri()
    store = open_store(url)
    ext = tuple(ExternalDb(path=p, source_checkpoint_id=uuid.uuid4()) for p in EVIL)
    ManifestStore(store, "orders").create_initial(Manifest(external_dbs=ext))
    for name in EVIL:
        add_checkpoint("orders", store, CheckpointOptions(name=name))
    return url


def run(lake: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """The CLI's exit code, stdout and stderr; wide (COLUMNS) so Rich does not fold names."""
    env = {"COLUMNS": "400", **(env or {})}
    r = CliRunner().invoke(cli, ["--url", lake, "--path", "orders", *args], env=env)
    return r.exit_code, r.stdout, r.stderr


@pytest.mark.parametrize(
    "args",
    [["read-manifest"], ["list-checkpoints"]],
    ids=["read-manifest", "list-checkpoints"],
)
def test_stored_names_print_escaped(lake: str, args: list[str]) -> None:
    code, out, err = run(lake, *args)
    assert code == 0, err
    _assert_clean(out, " ".join(args))
    _assert_clean(err, " ".join(args))
    # Rich markup in a name is shown as text, never interpreted (it would be an OSC 8 link)
    assert "[link=http://evil]rich link[/link]" in out
    assert "[bold red]styled[/]" in out
    assert "\\x1b[2J" in out  # the sequence is visible, as an escape
    assert "\\u202egnp.exe" in out


@pytest.mark.parametrize("args", [["read-manifest"], ["list-checkpoints"]])
def test_terminal_output_has_no_injected_sequences(lake: str, args: list[str]) -> None:
    """On a terminal (Rich styles its output there) no hyperlink, screen clear or cursor move
    comes from a stored name: only Rich's own colour codes (SGR, ``ESC[...m``)."""
    code, out, err = run(lake, *args, env={"FORCE_COLOR": "1", "TERM": "xterm-256color"})
    assert code == 0, err
    assert "\x1b[" in out, "Rich did not style: the test would not see markup injection"
    assert "\x1b]" not in out, "an OSC sequence (hyperlink) reached the terminal"
    assert "\x1b[2J" not in out and "\x1b[H" not in out
    assert "\r" not in out and "\x08" not in out and "\u202e" not in out and "\x9b" not in out


@pytest.mark.parametrize("name", EVIL)
def test_create_and_refresh_checkpoint_show_the_name_escaped(tmp_path: Path, name: str) -> None:
    """The name comes back in create/refresh's table: escaped; ``--json`` gives it back exact
    (SlateDB accepts any name, so we accept it too, docs: checkpoints)."""
    url = (tmp_path / "lake").as_uri()
    ManifestStore(open_store(url), "orders").create_initial(Manifest())
    code, out, err = run(url, "create-checkpoint", "--name", name)
    assert code == 0, err
    _assert_clean(out + err, "create-checkpoint")
    code, out, err = run(url, "create-checkpoint", "--name", name, "--json")
    assert code == 0, err
    _assert_clean(out, "create-checkpoint --json")
    made = json.loads(out)
    assert made["name"] == name
    code, out, err = run(url, "refresh-checkpoint", "--id", made["id"], "--lifetime", "1h")
    assert code == 0, err
    _assert_clean(out + err, "refresh-checkpoint")
    assert {c.name for c in list_checkpoints("orders", open_store(url))} == {name}


@pytest.mark.parametrize("args", [["read-manifest"], ["list-checkpoints"]])
def test_json_output_is_valid_and_exact(lake: str, args: list[str]) -> None:
    code, out, err = run(lake, *args, "--json")
    assert code == 0, err
    _assert_clean(out, "--json")
    doc = json.loads(out)
    if args == ["list-checkpoints"]:
        assert sorted(c["name"] for c in doc) == sorted(EVIL)
    else:
        assert sorted(c["name"] for c in doc["checkpoints"]) == sorted(EVIL)
        assert sorted(e["path"] for e in doc["external_dbs"]) == sorted(EVIL)


def test_error_messages_print_escaped(lake: str) -> None:
    """An error naming a stored string (here a union source whose path holds ESC) goes through
    the same escaping as any other line."""
    for name in EVIL:
        code, out, err = run(lake, "union", "--source", name.replace(":", "").replace("@", ""))
        assert code != 0
        _assert_clean(out + err, f"union --source {name!r}")


@pytest.mark.parametrize("name", EVIL)
def test_handle_errors_escapes_a_stored_name_in_the_message(name: str) -> None:
    """``handle_errors`` prints a SlateDB error's message, which quotes stored names (e.g. the
    compactor's ``CorruptionError`` "manifest of <db_path>"): escaped like any other line."""

    @click.command()
    @handle_errors
    def failing() -> None:
        raise CorruptionError(f"manifest of {name}", "view of unknown SST 01ABC")

    r = CliRunner().invoke(failing, [])
    assert r.exit_code == 1
    assert r.stderr.startswith("error: CorruptionError: ")
    _assert_clean(r.stderr.rstrip("\n"), "error message")
    assert "\n" not in r.stderr.rstrip("\n"), "an error is one line"


def test_every_cli_module_prints_through_the_terminal_sink() -> None:
    """By construction: only slatedb_core/cli/terminal.py may write to the terminal; every other
    CLI module prints through its echo/console/echo_json."""
    root = Path(__file__).resolve().parents[2] / "slatedb_core" / "cli"
    offenders: list[str] = []
    for f in sorted(root.glob("*.py")):
        if f.name == "terminal.py":
            continue
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                fn = node.func
                name = (
                    fn.id
                    if isinstance(fn, ast.Name)
                    else f"{ast.unparse(fn.value)}.{fn.attr}"
                    if isinstance(fn, ast.Attribute)
                    else ""
                )
                if name in {"print", "click.echo", "click.secho", "Console", "sys.stdout.write"}:
                    offenders.append(f"{f.name}:{node.lineno} {name}(...)")
            if isinstance(node, ast.ImportFrom) and node.module in {"rich.console", "rich"}:
                offenders.append(f"{f.name}:{node.lineno} imports {node.module}")
    assert not offenders, "CLI output bypassing slatedb_core.cli.terminal:\n" + "\n".join(offenders)


@pytest.mark.parametrize("name", EVIL)
def test_library_warnings_during_a_command_print_escaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The library logs warnings quoting paths and errors (``table %r: re-reading the shard map:
    %s``); with no logging configured (the CLI's case) Python's last-resort handler printed them
    raw on stderr. The ``slatedb`` group routes them through the terminal sink."""
    monkeypatch.setattr(logging.root, "handlers", [])  # as in the CLI: pytest's capture off

    @click.command("warn")
    def warn() -> None:
        logging.getLogger("slatedb_core.table.reads").warning(
            "table %r: re-reading the shard map: %s", "t", f"no shard database {name}"
        )

    group = click.Group(
        name="slatedb",
        params=list(cli.params),
        callback=cli.callback,
        commands={"warn": warn},
    )
    url = (tmp_path / "lake").as_uri()
    r = CliRunner().invoke(group, ["--url", url, "--path", "orders", "warn"])
    assert r.exit_code == 0, r.output
    assert "re-reading the shard map: no shard database" in r.stderr
    _assert_clean(r.stderr.rstrip("\n"), "library warning")
    assert "\n" not in r.stderr.rstrip("\n").split("re-reading")[1], "a warning is one line"
