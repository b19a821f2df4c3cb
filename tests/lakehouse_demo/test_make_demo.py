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
