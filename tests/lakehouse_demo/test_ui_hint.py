"""The summary's ``make ui`` hint opens the run's own Dagster instance for any ``--dir`` (issue 40,
item 5): it said ``make ui`` whatever the directory, and ``make ui`` opens ``demo-data``'s. The
hint is checked against what ``make -n`` would run (prints the commands, runs none)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from lakehouse_demo.summary import ui_hint

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _dagster_home_of(command: str) -> Path:
    """DAGSTER_HOME of the ``dagster dev`` line ``command`` (a make invocation) would run."""
    argv = shlex.split(command)
    assert argv[:2] == ["make", "ui"], command
    out = subprocess.run(
        ["make", "-n", "--no-print-directory", *argv[1:]],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.replace("\\\n", " ")  # join the recipe's continued lines
    dev = next(line for line in out.splitlines() if "dagster dev" in line)
    m = re.search(r"DAGSTER_HOME=(\S+)", dev)
    assert m is not None, dev
    return Path(os.path.normpath(m.group(1)))


@pytest.mark.parametrize("where", ["default", "inside", "outside"])
def test_the_hint_opens_this_runs_instance(where: str, tmp_path: Path) -> None:
    data = {
        "default": REPO / "demo-data",
        "inside": REPO / "some" / "other-demo",
        "outside": tmp_path / "elsewhere",
    }[where]
    hint = ui_hint(data)
    assert _dagster_home_of(hint) == data / "dagster_home"
    if where == "default":
        assert hint == "make ui"
