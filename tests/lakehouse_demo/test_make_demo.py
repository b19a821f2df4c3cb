"""``make demo`` passes options through (issue 40, item 5): ``ROWS=...`` and ``ARGS=...`` reach
``python -m lakehouse_demo``, and the closing ``table shards`` listing runs only when the store is
the local one under ``DEMO_DIR``. Checked with ``make -n`` (prints the commands, runs none)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _demo_commands(*assignments: str) -> list[str]:
    out = subprocess.run(
        ["make", "-n", "--no-print-directory", "demo", *assignments],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line for line in out.splitlines() if "lakehouse_demo" in line or "slatedb " in line]


def test_rows_and_args_reach_the_cli() -> None:
    lines = _demo_commands("ROWS=200000", "ARGS=--reuse --gc-grace 1", "DEMO_DIR=/tmp/dx")
    demo = next(line for line in lines if "-m lakehouse_demo" in line)
    assert "--rows 200000" in demo and demo.rstrip().endswith("--reuse --gc-grace 1")
    assert "--dir /tmp/dx " in demo


def test_defaults_pass_nothing_extra() -> None:
    demo = next(line for line in _demo_commands() if "-m lakehouse_demo" in line)
    assert demo.split("-m lakehouse_demo", 1)[1].split() == ["--dir", "demo-data"]


def test_the_shard_listing_is_skipped_for_another_store() -> None:
    assert any("table shards" in line for line in _demo_commands())
    for args in ("ARGS=--s3", "ARGS=--store-url s3://bucket/x"):
        assert not any("table shards" in line for line in _demo_commands(args))


def test_make_ui_first_leaves_a_directory_make_demo_may_reset(tmp_path: Path) -> None:
    """Review of issue 40, item 5: ``make ui`` on a fresh clone creates ``DEMO_DIR`` (its Dagster
    home and sample store) without the demo's marker, so the ``make demo`` after it was refused.
    ``make ui`` now claims the directory first, as the demo does."""
    from lakehouse_demo.workdir import MARKER, prepare

    target = tmp_path / "demo-data"
    out = subprocess.run(
        ["make", "-n", "--no-print-directory", "ui", f"DEMO_DIR={target}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    first = next(i for i, line in enumerate(out) if str(target) in line)
    assert "-m lakehouse_demo.workdir" in out[first], out[first]
    subprocess.run(out[first], shell=True, cwd=REPO, check=True)
    (target / "dagster_home").mkdir()  # what the rest of make ui writes
    assert (target / MARKER).is_file()
    assert prepare(target, reset=True).startswith("reset:")
    assert not (target / "dagster_home").exists()
