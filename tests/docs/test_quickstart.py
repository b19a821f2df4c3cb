"""The README's quickstart as a new user runs it, on a small dataset: ``make demo ROWS=...`` from
the repository with the venv not activated, then the quickstart's ``slatedb ... table count`` on
the demo's table (issue 40, item 3; ~45 s on 2 cores, so in the slow suite)."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.docs.user_shell import REPO, user_env

README = (REPO / "README.md").read_text()


@pytest.mark.slow
@pytest.mark.spark
def test_make_demo_small_then_the_quickstart_count(tmp_path: Path) -> None:
    demo_dir = tmp_path / "demo-data"
    done = subprocess.run(
        ["make", "demo", "ROWS=20000", f"DEMO_DIR={demo_dir}"],
        cwd=REPO,
        env=user_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "7 Delta export" in done.stdout
    (count_line,) = re.findall(r"^(\.venv/bin/slatedb .*table count)", README, flags=re.M)
    argv = shlex.split(count_line.replace("demo-data", str(demo_dir)))
    counted = subprocess.run(
        argv, cwd=REPO, env=user_env(), capture_output=True, text=True, timeout=120, check=False
    )
    assert counted.returncode == 0, counted.stderr
    assert re.search(r"^\d[\d,]* keys in \d+ shard\(s\)", counted.stdout, flags=re.M), (
        counted.stdout
    )
