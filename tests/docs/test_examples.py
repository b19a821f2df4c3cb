"""Every script in ``examples/`` runs to completion as a new user runs it: ``.venv/bin/python
examples/x.py`` from the repository, without the venv activated (issue 40, item 3; the README's
quickstart lists these commands). The Spark ones also check that Spark's Python workers find an
interpreter with the package when the shell's ``python3`` has none (issue 40, item 1)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.docs.user_shell import REPO, VENV_BIN, user_env

EXAMPLES = sorted(p.name for p in (REPO / "examples").glob("*.py"))


def run_example(name: str, tmp_path: Path, timeout: float) -> str:
    done = subprocess.run(
        [str(VENV_BIN / "python"), f"examples/{name}", "--dir", str(tmp_path / "work")],
        cwd=REPO,
        env=user_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{name} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    stem = name.removesuffix(".py")
    assert f"{stem}: done" in done.stdout, done.stdout
    return done.stdout


def test_every_example_is_tested() -> None:
    assert EXAMPLES == ["cli_table.py", "engine_api.py", "spark_batch.py", "spark_stream.py"]


def test_engine_api_example(tmp_path: Path) -> None:
    out = run_example("engine_api.py", tmp_path, timeout=60)
    assert "DbReader (latest): ['order-0002', 'order-0003', 'order-0004']" in out
    assert "['order-0002', 'order-0003']" in out.split("DbReader (checkpoint")[1]
    assert "Table: count -> 4" in out


@pytest.mark.slow
def test_cli_table_example(tmp_path: Path) -> None:
    out = run_example("cli_table.py", tmp_path, timeout=120)
    assert "300 keys in 3 shard(s)" in out
    assert "total from the JSON output: 300" in out


@pytest.mark.slow
@pytest.mark.spark
def test_spark_batch_example(tmp_path: Path) -> None:
    out = run_example("spark_batch.py", tmp_path, timeout=300)
    assert "rows in the table: 1000" in out
    assert "|order-0000|0     |shipped|" in out
    assert "|order-0000|0     |new   |" in out


@pytest.mark.slow
@pytest.mark.spark
def test_spark_stream_example(tmp_path: Path) -> None:
    out = run_example("spark_stream.py", tmp_path, timeout=300)
    assert "micro-batches [0, 1, 2] committed" in out
    assert "table 'events': 180 keys" in out
    assert "micro-batches [3] committed" in out
    assert "table 'events': 210 keys" in out
