"""The package's shape is checked like its behaviour (docs/architecture.md): the import contracts
in pyproject.toml (import-linter) hold, and ``tools/structure.py`` finds no import cycle, no private
name imported across modules, and at most 12 top-level modules;
module sizes are printed as a figure, not checked (docs/contributing.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_hold() -> None:
    lint_imports = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run(
        [str(lint_imports), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_structure_figures_are_zero() -> None:
    done = subprocess.run(
        [sys.executable, "tools/structure.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-4000:]
    assert "cycles 0" in done.stdout
    assert "private cross-module imports 0" in done.stdout
    assert "size: " in done.stdout  # the largest modules are listed as a figure
