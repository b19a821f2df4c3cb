"""The cluster launcher's own rules, without starting the services: it signals only processes it
started (pid *and* start time), keeps credentials in a 0600 file and reuses them, validates its
options, and the run launcher's health check tells a live run worker from a dead or replaced one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lakehouse_demo.cluster.__main__ import main as cluster_main
from lakehouse_demo.cluster.processes import alive, spawn, start_time, stop
from lakehouse_demo.cluster.settings import (
    ClusterSettings,
    Ports,
    client_env,
    load_secrets,
    read_env_file,
    write_env_file,
)
from orchestration.run_launcher import worker_health
from slatedb_core.errors import InvalidArgument


def _sleeper(tmp_path: Path) -> dict[str, object]:
    return spawn(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        log=tmp_path / "s.log",
        env=os.environ,
        cwd=tmp_path,
    )


def test_stop_signals_only_the_process_it_started(tmp_path: Path) -> None:
    record = _sleeper(tmp_path)
    pid = record["pid"]
    assert isinstance(pid, int) and alive(record)
    # the same pid with another start time is another process (a reused pid): left alone
    impostor = {**record, "start_time": float(record["start_time"]) + 1}  # type: ignore[arg-type]
    assert not alive(impostor) and stop(impostor) is False
    assert alive(record)
    assert stop(record) is True
    assert not alive(record) and stop(record) is False


def test_stop_takes_the_whole_process_group(tmp_path: Path) -> None:
    script = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print(p.pid, flush=True); time.sleep(60)"
    )
    log = tmp_path / "g.log"
    record = spawn([sys.executable, "-c", script], log=log, env=os.environ, cwd=tmp_path)
    deadline = time.monotonic() + 30
    while not log.read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.1)
    child = int(log.read_text().split()[0])
    assert start_time(child) is not None
    stop(record)
    deadline = time.monotonic() + 10
    while start_time(child) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert start_time(child) is None, "the service's child outlived the stop"


def test_credentials_file_is_private_and_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "DAGSTER_POSTGRES_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    s = ClusterSettings(dir=tmp_path)
    first = load_secrets(s)
    assert len(first["AWS_SECRET_ACCESS_KEY"]) >= 24
    assert first != load_secrets(s)  # nothing kept yet: each call would generate
    write_env_file(s, client_env(s, first))
    assert s.env_file.stat().st_mode & 0o777 == 0o600
    assert load_secrets(s) == first  # the file wins from now on
    env = read_env_file(s.env_file)
    assert env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:8333"
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "from-the-environment")
    assert (
        load_secrets(ClusterSettings(dir=tmp_path / "other"))["AWS_SECRET_ACCESS_KEY"]
        == "from-the-environment"
    )


def test_bad_options_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(InvalidArgument, match="workers"):
        ClusterSettings(dir=tmp_path, workers=0)
    with pytest.raises(InvalidArgument, match="worker_memory"):
        ClusterSettings(dir=tmp_path, worker_memory="lots")
    with pytest.raises(InvalidArgument, match="port s3"):
        Ports(s3=70000)
    with pytest.raises(InvalidArgument, match="does not exist"):
        ClusterSettings(dir=tmp_path, config=tmp_path / "missing.yaml")
    assert cluster_main(["start", "--dir", str(tmp_path), "--workers", "0"]) == 1
    assert "workers must be" in capsys.readouterr().err
    assert not (tmp_path / "state.json").exists()
    with pytest.raises(SystemExit):
        cluster_main(["launch"])


def test_status_and_stop_of_an_empty_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cluster_main(["stop", "--dir", str(tmp_path)]) == 0
    assert "nothing started" in capsys.readouterr().out
    assert cluster_main(["status", "--dir", str(tmp_path)]) == 1
    assert "DOWN" in capsys.readouterr().out


def test_free_ports_are_distinct_and_the_worker_uis_consecutive() -> None:
    p = Ports.free(3)
    ports = [p.s3, p.postgres, p.dagster, p.spark_master, p.spark_master_ui]
    assert len(set(ports)) == 5
    assert not set(ports) & set(range(p.spark_worker_ui, p.spark_worker_ui + 3))


def test_run_worker_health_from_proc(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        now = time.time()
        assert worker_health(None, now).status.value == "RUNNING"  # no pid reported yet
        assert worker_health(proc.pid, now).status.value == "RUNNING"
        # a run that started long before this process: the pid was reused by a newer process
        replaced = worker_health(proc.pid, now - 3600)
        assert replaced.status.value == "FAILED" and "newer process" in (replaced.msg or "")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        gone = worker_health(proc.pid, now)
        assert gone.status.value == "FAILED" and "gone" in (gone.msg or "")
    finally:
        if proc.poll() is None:
            proc.kill()
