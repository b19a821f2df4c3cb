"""What a cluster command starts, it stops on every way out (issue 40, item 7).

``make cluster-test`` stopped by a timeout's SIGTERM (or Ctrl-C) left SeaweedFS, PostgreSQL, the
Spark master and workers and the Dagster processes running an hour later. These tests start real
services (SeaweedFS and PostgreSQL only: the cheap ones) through the launcher in a subprocess and
end that subprocess the hard ways: SIGTERM mid-start (the launcher must stop what it started), and
SIGKILL while PostgreSQL is still starting (``cluster stop --dir`` must still find it, though
``state.json`` never recorded it). Leftovers are found here independently of the launcher: any
process whose command line names the cluster's folder.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakehouse_demo.cluster.services import find_pg_bin
from lakehouse_demo.cluster.settings import REPO

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(find_pg_bin() is None, reason="PostgreSQL server binaries not installed"),
]

CLUSTER = [sys.executable, "-m", "lakehouse_demo.cluster"]


def _mentions(dir: Path) -> list[tuple[int, str]]:
    """Live processes (not zombies) whose command line names ``dir`` (weed's ``-dir=``, the
    postmaster's ``-D``, Spark's class path): what a cluster in ``dir`` is running."""
    needle = str(dir).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if needle in cmdline and stat[stat.rindex(")") + 2] not in "ZX":
            found.append((int(entry.name), cmdline.replace(b"\0", b" ").decode(errors="replace")))
    return found


def _wait_gone(dir: Path, timeout_s: float) -> list[tuple[int, str]]:
    deadline = time.monotonic() + timeout_s
    left = _mentions(dir)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = _mentions(dir)
    return left


def _wait_for(what: str, cond: object, timeout_s: float) -> None:
    assert callable(cond)
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def cluster_dir() -> Iterator[Path]:
    # PostgreSQL runs as its own user when we are root: a folder it can reach (not pytest's 0700)
    parent = Path(tempfile.mkdtemp(prefix="signal-cluster-"))
    parent.chmod(0o755)
    dir = parent / "cluster"
    try:
        yield dir
    finally:
        # whatever the test's outcome, nothing may outlive it
        subprocess.run([*CLUSTER, "stop", "--dir", str(dir)], cwd=REPO, timeout=120)
        for pid, _ in _mentions(dir):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(parent, ignore_errors=True)


def _launcher(dir: Path, log: Path) -> subprocess.Popen[bytes]:
    """``cluster start`` of SeaweedFS and PostgreSQL only, as its own process group (as a
    timeout(1) would run it)."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [*CLUSTER, "start", "--dir", str(dir), "--ports", "auto", "--only", "s3,postgres"],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def test_sigterm_during_start_stops_what_it_started(cluster_dir: Path, tmp_path: Path) -> None:
    log = tmp_path / "start.log"
    proc = _launcher(cluster_dir, log)
    try:
        # SeaweedFS is up and recorded; PostgreSQL is being set up (initdb/pg_ctl running)
        _wait_for(
            "PostgreSQL's set-up",
            lambda: (cluster_dir / "postgres" / "data").exists() or proc.poll() is not None,
            120,
        )
        assert proc.poll() is None, log.read_text()
        assert _mentions(cluster_dir), "nothing was started"
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    left = _wait_gone(cluster_dir, 20)
    assert not left, f"left running after SIGTERM: {left}\n{log.read_text()}"
    assert rc == 128 + signal.SIGTERM, log.read_text()
    out = log.read_text()
    assert "Traceback" not in out and "SIGTERM" in out, out


def test_sigterm_after_start_leaves_the_cluster_running(cluster_dir: Path, tmp_path: Path) -> None:
    """The other side: a start that finished is not undone by anything (``make cluster`` returns
    with the services up); ``cluster stop`` stops them, leaving nothing."""
    log = tmp_path / "start.log"
    proc = _launcher(cluster_dir, log)
    assert proc.wait(timeout=180) == 0, log.read_text()
    assert _mentions(cluster_dir)
    res = subprocess.run(
        [*CLUSTER, "stop", "--dir", str(cluster_dir)], cwd=REPO, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    assert not _wait_gone(cluster_dir, 20)


def test_stop_finds_what_a_killed_start_left(cluster_dir: Path, tmp_path: Path) -> None:
    """SIGKILL (no handler runs) while PostgreSQL starts: ``state.json`` names SeaweedFS only,
    the postmaster runs unrecorded; ``cluster stop --dir`` stops both."""
    log = tmp_path / "start.log"
    proc = _launcher(cluster_dir, log)
    data = f"postgres -D {cluster_dir}/postgres/data"

    def postmaster() -> bool:  # pg_ctl's server (initdb's bootstrap backend has no -D)
        return any(data in cmd for _, cmd in _mentions(cluster_dir))

    try:
        _wait_for("the postmaster", lambda: postmaster() or proc.poll() is not None, 120)
        assert proc.poll() is None, log.read_text()
        os.kill(proc.pid, signal.SIGKILL)  # the launcher alone (the OOM killer, kill -9)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(1)
    assert postmaster(), "the postmaster died with the launcher"
    res = subprocess.run(
        [*CLUSTER, "stop", "--dir", str(cluster_dir)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    left = _wait_gone(cluster_dir, 20)
    assert not left, f"left running after cluster stop: {left}\n{res.stdout}"


def test_sigterm_to_pytest_runs_the_fixtures_teardown(tmp_path: Path) -> None:
    """A timeout's SIGTERM to ``pytest tests/cluster``: the module fixture's teardown (where the
    cluster fixtures run ``cluster stop``) still runs (tests/cluster/conftest.py)."""
    torn = tmp_path / "torn-down"
    started = tmp_path / "started"
    (tmp_path / "test_held.py").write_text(
        "import pathlib, time, pytest\n"
        "@pytest.fixture(scope='module')\n"
        "def held():\n"
        "    try:\n"
        "        yield\n"
        "    finally:\n"
        f"        pathlib.Path({str(torn)!r}).write_text('yes')\n"
        "def test_hold(held):\n"
        f"    pathlib.Path({str(started)!r}).write_text('yes')\n"
        "    time.sleep(120)\n"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.cluster.conftest",
            str(tmp_path / "test_held.py"),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_for("the test to start", lambda: started.exists() or proc.poll() is not None, 60)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert torn.exists(), out.decode(errors="replace")
