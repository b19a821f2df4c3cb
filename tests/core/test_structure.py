"""The package's shape is checked like its behaviour (docs/architecture.md): the import contracts
in pyproject.toml (import-linter) hold, and ``tools/structure.py`` finds no import cycle, no private
name imported across modules, and at most 12 top-level modules;
module sizes are printed as a figure, not checked (docs/contributing.md). No test module imports
from another ``test_*`` module: a helper two test files share lives in a ``*_steps.py`` module or
the folder's ``conftest.py`` (docs/contributing.md, "Tests")."""

from __future__ import annotations

import ast
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


def _test_module_imports(path: Path) -> list[str]:
    """The ``test_*`` modules of this repository's tests that ``path`` imports, by dotted name
    (a relative import keeps its leading dots); a library's ``test_utils`` is not one of them."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            if node.level == 0 and not module.startswith("tests."):
                continue
            names = [module] + [f"{module.rstrip('.')}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.startswith("tests.")]
        found += [n for n in names if n.rsplit(".", 1)[-1].startswith("test_")]
    return found


def test_no_test_module_imports_another() -> None:
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / "tests").rglob("test_*.py"))
        for name in _test_module_imports(path)
    ]
    assert offenders == [], "\n".join(offenders)
