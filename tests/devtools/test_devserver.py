"""``stop_dagster_dev`` against a stand-in for dagster dev's shutdown race: the process group's
leader, on SIGTERM, starts a new process in a session of its own (as dagster dev's code-server
manager can restart a code server while shutting down) and exits."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]

from devtools.devserver import main, processes_with, stop_dagster_dev, write_dagster_home

LEADER = """
import os, signal, subprocess, sys, time
child = sys.argv[1]

def restart(*_):
    subprocess.Popen([sys.executable, "-c", child], start_new_session=True)
    time.sleep(0.3)  # the straggler is up before the leader is gone
    sys.exit(0)

signal.signal(signal.SIGTERM, restart)
print("ready", flush=True)
while True:
    time.sleep(0.1)
"""
POLITE_CHILD = "import time\nwhile True: time.sleep(0.1)"
DEAF_CHILD = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: time.sleep(0.1)"


def start_leader(marker: Path, child: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-c", LEADER, child],
        env={**os.environ, "DAGSTER_HOME": str(marker)},
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc


@pytest.mark.parametrize(
    ("child", "must_kill"), [(POLITE_CHILD, False), (DEAF_CHILD, True)], ids=["polite", "deaf"]
)
def test_a_process_started_during_shutdown_is_stopped_too(
    tmp_path: Path, child: str, must_kill: bool
) -> None:
    marker = tmp_path / "dagster_home"
    proc = start_leader(marker, child)
    started = time.monotonic()
    left = stop_dagster_dev(proc, str(marker), timeout_s=1.0)
    assert proc.returncode == 0
    assert bool(left) == must_kill, left  # only a process that ignores SIGTERM is reported
    deadline = time.monotonic() + 5
    while processes_with(str(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with(str(marker)) == []
    assert time.monotonic() - started < 10


def test_dagster_home_turns_the_welcome_dialog_off_and_keeps_other_settings(tmp_path: Path) -> None:
    fresh = write_dagster_home(tmp_path / "fresh")
    assert yaml.safe_load(fresh.read_text()) == {
        "telemetry": {"enabled": False},
        "nux": {"enabled": False},
    }
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(
        "telemetry: {enabled: true}\nnux: {enabled: true}\nrun_monitoring: {enabled: true}\n"
    )
    assert main([str(home)]) == 0
    assert yaml.safe_load((home / "dagster.yaml").read_text()) == {
        "telemetry": {"enabled": True},  # the operator's choice
        "nux": {"enabled": False},
        "run_monitoring": {"enabled": True},
    }
    (home / "dagster.yaml").write_text("- not a mapping\n")
    with pytest.raises(ValueError, match="mapping"):
        write_dagster_home(home)
