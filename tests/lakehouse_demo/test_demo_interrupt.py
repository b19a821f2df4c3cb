"""The demo on a pipe and under Ctrl-C (issue 40, item 5): when stdout is not a terminal it prints
one line per step (no progress redraws), and SIGINT ends it with exit code 130 and one line on
stderr naming the log, after stopping what it started (Spark's JVM and its Python workers);
it used to end with ~280 lines of chained tracebacks."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("dagster")
pytest.importorskip("pyspark")

from devtools.devserver import processes_with

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
TINY = ["--rows", "100", "--new-orders", "10"]
"""The smallest run the CLI allows (--rows must be at least 100)."""


def _lines(stream: object, into: queue.Queue[str | None]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.put(line)
    into.put(None)


def test_sigint_after_the_first_step_ends_in_one_line(tmp_path: Path) -> None:
    marker = f"demo-interrupt-{uuid.uuid4().hex}"
    data = tmp_path / "demo"
    proc = subprocess.Popen(
        [sys.executable, "-m", "lakehouse_demo", "--dir", str(data), *TINY],
        cwd=REPO,
        env={**os.environ, "LAKEHOUSE_DEMO_TEST_MARKER": marker},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stdout, out), daemon=True).start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 120
        while not any(line.startswith("0 dataset") for line in seen):
            line = out.get(timeout=max(0.1, deadline - time.monotonic()))
            assert line is not None, f"the demo ended before its first step: {seen}"
            seen.append(line)
        time.sleep(2)  # into step 1: Spark's JVM is starting or running
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = data / "logs" / "demo.log"
    assert proc.returncode == 130, err
    assert len(err.strip().splitlines()) <= 3, err
    assert str(log.resolve()) in err
    assert "Traceback" not in err
    assert log.is_file()
    deadline = time.monotonic() + 30
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert processes_with(marker) == [], "the demo left processes running"
    # stdout on a pipe: one line per step, no redraws (no carriage returns, no cursor codes)
    assert all("\r" not in line and "\x1b" not in line for line in seen)
