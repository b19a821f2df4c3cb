"""The README's samples still match the code (issue 40, item 3: samples had drifted: an
undefined ``table``, ``--json`` before the command, outputs the commands no longer print, split
points that did not fit the example's keys).

* every ``python`` block compiles, and every name it reads is defined in it, imported or a
  builtin; the engine block runs against a temporary directory;
* every ``slatedb ...`` command line in the README names commands and options that exist, each
  option at the level (group or command) that defines it;
* the quickstart's "what to run next" lines name files and commands that exist.
"""

from __future__ import annotations

import ast
import builtins
import re
import shlex
import subprocess
from pathlib import Path

import click
import pytest

from slatedb_core.cli.main import cli
from tests.docs.user_shell import REPO, VENV_BIN, user_env

README = (REPO / "README.md").read_text()


def blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", README, flags=re.S | re.M)


def _names(node: ast.AST) -> tuple[set[str], set[str]]:
    """(names loaded, names bound) anywhere inside ``node``."""
    loaded: set[str] = set()
    bound: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            (loaded if isinstance(sub.ctx, ast.Load) else bound).add(sub.id)
        elif isinstance(sub, ast.alias):
            bound.add((sub.asname or sub.name).split(".")[0])
        elif isinstance(sub, ast.FunctionDef | ast.ClassDef):
            bound.add(sub.name)
        elif isinstance(sub, ast.arg):
            bound.add(sub.arg)
    return loaded, bound


def undefined_names(source: str) -> set[str]:
    """Names a top-level statement reads that neither an earlier statement, the statement itself
    (a ``with``/``for`` target), an import nor the builtins defined: a sample using a variable
    before (or without) making it."""
    known: set[str] = set(dir(builtins))
    missing: set[str] = set()
    for stmt in ast.parse(source).body:
        loaded, bound = _names(stmt)
        missing |= loaded - known - bound
        known |= bound
    return missing


def test_readme_has_python_samples() -> None:
    assert len(blocks("python")) >= 2


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_python_sample_compiles_and_defines_what_it_uses(index: int) -> None:
    source = blocks("python")[index]
    compile(source, f"README.md python block {index}", "exec")
    assert undefined_names(source) == set()


def test_undefined_names_finds_a_variable_never_made_or_made_later() -> None:
    sample = "import x\nwith x.open() as db:\n    db.put_arrow(table, big)\ntable = x.t()\n"
    assert undefined_names(sample) == {"table", "big"}


def test_engine_sample_runs(tmp_path: Path) -> None:
    """The "Using the engine" block, run as written but on a temporary directory."""
    (source,) = [b for b in blocks("python") if "sc.Db.open(" in b]
    assert "file:///data/lake" in source
    script = tmp_path / "engine_sample.py"
    script.write_text(source.replace("file:///data/lake", (tmp_path / "lake").as_uri()))
    done = subprocess.run(
        [str(VENV_BIN / "python"), str(script)],
        env=user_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def cli_lines() -> list[str]:
    """Every ``slatedb ...`` command in the README's console and bash blocks (a ``$`` prompt,
    a ``.venv/bin/`` prefix and anything after a pipe or a comment dropped)."""
    lines = []
    for block in blocks("console") + blocks("bash"):
        for line in block.splitlines():
            line = line.removeprefix("$ ").strip()
            line = line.removeprefix(".venv/bin/")
            if line.startswith("slatedb "):
                lines.append(line.split(" | ")[0].split("  #")[0].strip())
    return lines


def check_cli_line(line: str) -> None:
    """Walk ``line`` down the click tree: each option must be one the command (or group) where
    it appears defines, each word after a group one of its commands. Raises AssertionError."""
    words = shlex.split(line)[1:]
    cmd: click.Command = cli
    ctx = click.Context(cli)
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("-"):
            name = word.split("=", 1)[0]
            params = {o: p for p in cmd.get_params(ctx) for o in (*p.opts, *p.secondary_opts)}
            assert name in params, f"{line!r}: {name} is not an option of {cmd.name!r}"
            param = params[name]
            takes_value = isinstance(param, click.Option) and not param.is_flag
            i += 2 if takes_value and "=" not in word else 1
        elif isinstance(cmd, click.Group):
            assert word in cmd.commands, f"{line!r}: {word!r} is not a command of {cmd.name!r}"
            cmd = cmd.commands[word]
            i += 1
        else:
            i += 1  # an argument (KEY)


def test_readme_has_cli_samples() -> None:
    assert len(cli_lines()) >= 10


@pytest.mark.parametrize("line", cli_lines())
def test_cli_sample_names_real_commands_and_options(line: str) -> None:
    check_cli_line(line)


def test_cli_check_refuses_json_before_the_command() -> None:
    with pytest.raises(AssertionError, match="--json is not an option of 'cli'"):
        check_cli_line("slatedb --path orders --json read-manifest")
    with pytest.raises(AssertionError, match="'shardz' is not a command"):
        check_cli_line("slatedb --path events table shardz")


def test_quickstart_next_steps_exist() -> None:
    quick = README[README.index("## Quickstart") : README.index("## Architecture")]
    examples = re.findall(r"\.venv/bin/python (examples/\w+\.py)", quick)
    assert sorted(examples) == sorted(
        f"examples/{p.name}" for p in (REPO / "examples").glob("*.py")
    )
    makefile = (REPO / "Makefile").read_text()
    for target in re.findall(r"^make (\w[\w-]*)", quick, flags=re.M):
        assert re.search(rf"^{target}:", makefile, flags=re.M), f"make {target}: no such target"
