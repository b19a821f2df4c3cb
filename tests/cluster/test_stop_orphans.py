"""``cluster stop --orphans`` finds what a killed ``make cluster`` / ``make cluster-test`` left in
any folder (issue 40, item 7): every process of ours carrying ``LAKEHOUSE_CLUSTER_DIR`` whose
cluster has no live supervisor (no live owner, not a recorded live service nor one of its
children, no ``cluster start`` running for that folder) is stopped, SIGTERM then SIGKILL.

Real processes: small Python sleepers carrying the marker, for several folders; nothing is
mocked. ``--under`` keeps the scan inside this test's folder (other clusters on the machine
are not this test's to stop)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakehouse_demo.cluster.processes import MARKER, OWNER, alive, owner_token, spawn, start_time
from lakehouse_demo.cluster.settings import INFRA, REPO, ClusterSettings, Ports, save_state

SLEEPER = "import time\nwhile True: time.sleep(1)"
STUBBORN = (
    "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: time.sleep(1)"
)


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        p.kill()
        p.wait()


def _sleeper(
    procs: list[subprocess.Popen[bytes]],
    dir: Path,
    *,
    owner: str | None = None,
    script: str = SLEEPER,
) -> subprocess.Popen[bytes]:
    env = {"PATH": os.environ["PATH"], MARKER: str(dir)}
    if owner is not None:
        env[OWNER] = owner
    p = subprocess.Popen([sys.executable, "-c", script], env=env, start_new_session=True)
    procs.append(p)
    return p


def _running(p: subprocess.Popen[bytes]) -> bool:
    return start_time(p.pid) is not None  # a zombie (killed, not yet reaped) is not running


def test_stop_orphans_of_every_folder(tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    a, b = tmp_path / "cluster-a", tmp_path / "gone" / "cluster-b"
    a.mkdir()
    orphan_a = _sleeper(procs, a)
    stubborn_a = _sleeper(procs, a, script=STUBBORN)
    orphan_b = _sleeper(procs, b)  # its folder was deleted
    dead_owner = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_token = owner_token(dead_owner.pid)
    dead_owner.wait()
    orphan_c = _sleeper(procs, tmp_path / "cluster-c", owner=dead_token)  # its pytest was killed

    live_owner = _sleeper(procs, tmp_path / "cluster-d", owner=owner_token(os.getpid()))
    # a cluster make cluster started and left running, by design: a recorded live service
    e = tmp_path / "cluster-e"
    e.mkdir()
    record = spawn(
        [sys.executable, "-c", SLEEPER],
        log=e / "svc.log",
        env={**os.environ, MARKER: str(e)},
        cwd=e,
    )
    save_state(
        ClusterSettings(dir=e, ports=Ports(), config=INFRA / "slatedb.yaml"), {"svc": record}
    )
    time.sleep(0.3)  # the sleepers' environments are in place once they run
    try:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "lakehouse_demo.cluster",
                "stop",
                "--orphans",
                "--grace",
                "1",
                "--dir",
                str(tmp_path / "none"),
                "--under",
                str(tmp_path),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        for p in (orphan_a, stubborn_a, orphan_b, orphan_c):
            deadline = time.monotonic() + 10
            while _running(p) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not _running(p), f"pid {p.pid} still running:\n{out.stdout}"
            assert f"pid {p.pid}" in out.stdout, out.stdout
        assert str(a) in out.stdout and str(b) in out.stdout
        assert _running(live_owner), out.stdout
        assert alive(record), out.stdout
        assert (
            f"pid {live_owner.pid}" not in out.stdout and f"pid {record['pid']}" not in out.stdout
        )
    finally:
        pid = record["pid"]
        assert isinstance(pid, int)
        if alive(record):
            os.kill(pid, 9)
