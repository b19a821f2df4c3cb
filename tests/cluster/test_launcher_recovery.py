"""Review of ``make cluster``'s launcher: a restart that finds a service running but busy, a first
start that failed half-way, credentials that are not shell-safe. No full cluster: PostgreSQL alone
(a few seconds), fake services otherwise."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import lakehouse_demo.cluster.__main__ as cluster_cli
from lakehouse_demo.cluster.processes import alive, spawn, stop, wait_until
from lakehouse_demo.cluster.services import (
    Service,
    _postgres_ready,
    _start_postgres,
    pg_bin,
)
from lakehouse_demo.cluster.settings import (
    ClusterSettings,
    Ports,
    client_env,
    load_secrets,
    load_state,
    read_env_file,
    write_env_file,
)
from slatedb_core.errors import SlateDBError
from slatedb_core.testing.ports import free_port


# ---- a service that is running but momentarily not ready is not started a second time ---------
def test_restart_does_not_start_a_second_copy_of_a_busy_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``make cluster`` again (e.g. to restart a killed worker) while the Dagster daemon is alive
    but its heartbeat is late (a busy machine): the launcher must wait for it, not start a
    second daemon (two schedulers, two sensors) and forget the first (cluster-stop then leaves it
    running)."""
    started: list[dict[str, object]] = []
    answers = iter([True, False, False, True])  # start 1: ready; start 2: late twice, then ready

    def start_fake(s: ClusterSettings, env: object) -> dict[str, object]:
        record = spawn(
            [sys.executable, "-c", "import time; time.sleep(120)"],
            log=s.logs / "fake.log",
            env=os.environ,
            cwd=s.dir,
        )
        started.append(record)
        return record

    def ready(s: ClusterSettings, env: object) -> bool:
        return next(answers, True)

    fake = Service("fake-daemon", start_fake, ready, lambda s: "fake", timeout_s=30)
    monkeypatch.setattr(cluster_cli, "services", lambda s: [fake])
    s = ClusterSettings(dir=tmp_path / "c", ports=Ports.free(1), workers=1)
    try:
        assert cluster_cli.start(s) == 0
        assert len(started) == 1
        assert cluster_cli.start(s) == 0
        assert len(started) == 1, "a second copy of a running service was started"
        _, state = load_state(s.dir)
        assert state["fake-daemon"]["pid"] == started[0]["pid"]
    finally:
        for record in started:
            stop(record, timeout_s=5)


# ---- a first start that failed half-way does not brick the folder ------------------------------
@pytest.fixture
def pg_dir() -> Iterator[Path]:
    try:
        pg_bin()
    except SlateDBError:
        pytest.skip("no PostgreSQL server binaries")
    # PostgreSQL runs as its own user when we are root: a folder it can reach (not pytest's 0700)
    d = Path(tempfile.mkdtemp(prefix="review-pg-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_postgres_first_start_that_failed_can_be_retried(
    pg_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first start's initdb succeeds, then the server cannot start (its port is taken). The
    user frees the port and runs ``make cluster`` again: the ``dagster`` role and database must
    exist then (before: initdb was skipped because PG_VERSION existed, the role was never
    created, and PostgreSQL stayed "not ready" on every later start, for ever)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "DAGSTER_POSTGRES_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    s = ClusterSettings(dir=pg_dir, ports=Ports(postgres=free_port()))
    s.logs.mkdir()
    env = client_env(s, load_secrets(s))
    blocker = socket.socket()
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    blocker.bind(("127.0.0.1", s.ports.postgres))
    blocker.listen()
    try:
        with pytest.raises(SlateDBError):
            _start_postgres(s, env)
    finally:
        blocker.close()
    record = _start_postgres(s, env)
    try:
        assert alive(record)
        wait_until(
            "postgres",
            lambda: _postgres_ready(s, env),
            record=record,
            timeout_s=60,
            log=s.logs / "postgres.log",
        )
    finally:
        stop(record)


# ---- credentials that are not shell-safe -------------------------------------------------------
@pytest.mark.parametrize("password", ["it's-secret", "a'; touch PWNED; echo '", "$(id)`id`\\n"])
def test_env_file_survives_any_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, password: str
) -> None:
    """A password taken from the environment is written so that both ``source cluster.env``
    and the launcher's own reader give it back unchanged (before: a quote ended the shell
    string, so sourcing the file ran the rest as a command, and the reader cut it)."""
    monkeypatch.setenv("DAGSTER_POSTGRES_PASSWORD", password)
    s = ClusterSettings(dir=tmp_path)
    write_env_file(s, client_env(s, load_secrets(s)))
    assert read_env_file(s.env_file)["DAGSTER_POSTGRES_PASSWORD"] == password
    res = subprocess.run(
        ["bash", "-c", f'source "{s.env_file}" && printf %s "$DAGSTER_POSTGRES_PASSWORD"'],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"]},
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout == password
    assert not (tmp_path / "PWNED").exists(), "sourcing cluster.env ran a command"
    assert load_secrets(s)["DAGSTER_POSTGRES_PASSWORD"] == password


# ---- run monitoring: a wall clock step does not fail a healthy run -----------------------------
def test_run_worker_health_survives_a_clock_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """/proc/stat's btime follows every step of the wall clock, so after the clock jumps
    forward (NTP after a paused VM) a live worker's start, as a Unix time, moves past its run's
    start: before, the next health check failed a healthy run. The worker is still told apart
    from a process that took its pid, and from its own death."""
    from dagster import DagsterEventType, DagsterInstance, DagsterRun
    from dagster._core.events import DagsterEvent, EngineEventData

    import orchestration.run_launcher as rl

    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        with DagsterInstance.ephemeral() as instance:
            run = instance.add_run(DagsterRun(job_name="compact", run_id="review-run"))
            instance.report_engine_event(
                f"Started process for run (pid: {worker.pid}).",
                run,
                EngineEventData.in_process(worker.pid),
            )
            instance.handle_run_event(
                run.run_id,
                DagsterEvent(event_type_value=DagsterEventType.RUN_START.value, job_name="compact"),
            )
            launcher = rl.LocalRunLauncher()
            launcher.register_instance(instance)
            assert launcher.check_run_worker_health(run).status.value == "RUNNING"
            booted = rl._boot_time()
            monkeypatch.setattr(rl, "_boot_time", lambda: booted + 3600)  # an hour forward
            assert launcher.check_run_worker_health(run).status.value == "RUNNING"
            # the pid taken by a newer process: a different start in ticks
            real_stat = rl._stat
            monkeypatch.setattr(
                rl, "_stat", lambda pid: (lambda f: f and (f[0], f[1] + 500))(real_stat(pid))
            )
            assert launcher.check_run_worker_health(run).status.value == "FAILED"
            monkeypatch.setattr(rl, "_stat", real_stat)
            worker.kill()
            worker.wait()
            assert launcher.check_run_worker_health(run).status.value == "FAILED"
    finally:
        if worker.poll() is None:
            worker.kill()


# ---- loopback is not a boundary between the machine's users: only the S3 keys open the store ---
def test_the_store_cannot_be_read_or_changed_without_the_keys(tmp_path: Path) -> None:
    """Issue 39, item 8 (was a strict xfail): SeaweedFS's filer HTTP port (127.0.0.1, named in
    weed's world-readable command line) served, overwrote and deleted every object without the
    S3 keys. Now the filer and volume servers take only requests signed with JWT keys that weed
    alone holds."""
    import urllib.error
    import urllib.request

    from lakehouse_demo.s3server import SeaweedFS

    weed = SeaweedFS(
        bucket="lake",
        data_dir=tmp_path / "s3",
        access_key="AKREVIEW",
        secret_key="review-secret-not-known-to-the-attacker",
    )
    weed.start()
    key = "prod/manifest/00000000000000000001.manifest"
    try:
        weed.store().put(key, b"acknowledged")
        url = f"http://127.0.0.1:{weed.ports['filer']}/buckets/lake/{key}"
        answers = {}
        for method, body in (
            ("GET", None),
            ("PUT", b"forged"),
            ("POST", b"forged"),
            ("DELETE", None),
        ):
            req = urllib.request.Request(url, data=body, method=method)
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    answers[method] = (resp.status, resp.read())
            except urllib.error.HTTPError as e:
                answers[method] = (e.code, b"")
        assert answers["GET"][0] in (401, 403) and b"acknowledged" not in answers["GET"][1]
        assert all(answers[m][0] in (401, 403) for m in ("PUT", "POST", "DELETE")), {
            m: a[0] for m, a in answers.items()
        }
        assert weed.store().get(key).data == b"acknowledged", "changed through the filer's port"
        # the S3 gateway (with the keys) still does everything
        weed.store().delete(key)
        assert not list(weed.store().list("prod"))
    finally:
        weed.stop()


@pytest.mark.slow
def test_weed_shell_without_the_certificate_cannot_delete(tmp_path: Path) -> None:
    """Issue 39, item 8: the gRPC ports (filer, master, volume) took any client: a local user
    with the ``weed`` binary ran ``weed shell`` against them and deleted objects without the S3
    keys. They now require mutual TLS with a certificate of the data folder's own CA."""
    from lakehouse_demo.s3server import SeaweedFS, weed_binary

    weed = SeaweedFS(bucket="lake", data_dir=tmp_path / "s3", access_key="AK", secret_key="sk-x")
    weed.start()
    try:
        weed.store().put("prod/victim", b"acknowledged")
        p = weed.ports
        attacker = tmp_path / "attacker"  # no security.toml there
        attacker.mkdir()
        try:
            subprocess.run(
                [
                    weed_binary(),
                    "shell",
                    f"-master=127.0.0.1:{p['master']}.{p['master_grpc']}",
                    f"-filer=127.0.0.1:{p['filer']}.{p['filer_grpc']}",
                ],
                input="fs.rm /buckets/lake/prod/victim\nexit\n",
                capture_output=True,
                text=True,
                timeout=15,
                cwd=attacker,
                env={"PATH": os.environ["PATH"], "HOME": str(attacker)},
            )
        except subprocess.TimeoutExpired:
            pass  # it never got a connection
        assert weed.store().get("prod/victim").data == b"acknowledged", "deleted over gRPC"
    finally:
        weed.stop()


# ---- cluster-stop after a leader was killed: what it started goes too ----------------------------
def test_stop_takes_the_group_of_a_killed_leader(tmp_path: Path) -> None:
    """The daemon killed -9 (the cluster test does it) leaves its code servers and run workers
    in its process group; ``cluster-stop`` said "was not running" and left them running."""
    import signal
    import time

    from lakehouse_demo.cluster.processes import start_time

    script = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
        "print(p.pid, flush=True); time.sleep(120)"
    )
    log = tmp_path / "leader.log"
    record = spawn([sys.executable, "-c", script], log=log, env=os.environ, cwd=tmp_path)
    deadline = time.monotonic() + 60
    while not log.read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.1)
    child = int(log.read_text().split()[0])
    pid = record["pid"]
    assert isinstance(pid, int)
    try:
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while alive(record) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(record) and start_time(child) is not None
        assert stop(record, timeout_s=5) is True
        deadline = time.monotonic() + 10
        while start_time(child) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert start_time(child) is None, "the killed leader's child outlived cluster-stop"
        assert stop(record) is False  # nothing left: nothing signalled
    finally:
        if start_time(child) is not None:
            os.kill(child, signal.SIGKILL)
