"""Issue 39, item 1: ``make cluster``'s Spark standalone master ran anyone's code with the
cluster's secrets. A local user's driver that held no secret got the S3 keys and the Dagster
PostgreSQL password back from its executor, which inherited the workers' whole environment.

A real master and worker from the cluster launcher: a driver without the secret is refused;
the deployment's own ``spark-submit`` (``source cluster.env``) runs, and its executor holds the
store's settings its application sent and nothing of Dagster's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import lakehouse_demo.cluster.__main__ as cluster_cli
from lakehouse_demo.cluster.processes import stop
from lakehouse_demo.cluster.services import services
from lakehouse_demo.cluster.settings import (
    INFRA,
    ClusterSettings,
    Ports,
    load_state,
    read_env_file,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PROBE = textwrap.dedent(
    """
    import os, sys
    from pyspark.sql import SparkSession
    spark = SparkSession.builder.master(sys.argv[1]).appName("probe").getOrCreate()
    env = spark.sparkContext.parallelize([0], 1).map(lambda _: dict(os.environ)).collect()[0]
    print("EXECUTOR_ENV", " ".join(sorted(env)), flush=True)
    spark.stop()
    """
)


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterSettings]:
    """The launcher's own start of the master and one worker (the other services left out)."""
    s = ClusterSettings(
        dir=tmp_path_factory.mktemp("spark-auth") / "c", ports=Ports.free(1), workers=1
    )
    wanted = {"spark-master", "spark-worker-1"}
    mp = pytest.MonkeyPatch()
    mp.setattr(cluster_cli, "services", lambda s: [v for v in services(s) if v.name in wanted])
    # the launcher's environment holds credentials (as under make cluster); workers must not
    mp.setenv("DAGSTER_POSTGRES_PASSWORD", "pg-password-the-attacker-wants")
    mp.setenv("AWS_SECRET_ACCESS_KEY", "s3-secret-the-attacker-wants")
    try:
        assert cluster_cli.start(s) == 0
        yield s
    finally:
        _, state = load_state(s.dir)
        for record in reversed(list(state.values())):
            stop(record)
        mp.undo()


def _submit(env: dict[str, str], master: str, probe: Path) -> subprocess.CompletedProcess[str]:
    spark_submit = str(Path(sys.executable).parent / "spark-submit")
    try:
        return subprocess.run(
            [spark_submit, "--master", master, str(probe), master],
            capture_output=True,
            text=True,
            env=env,
            timeout=240,
        )
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return subprocess.CompletedProcess(e.cmd, -9, out, "")


def _outsider_env() -> dict[str, str]:
    """A local user with the project installed and no secret: the repo's public Spark config."""
    keep = ("PATH", "HOME", "JAVA_HOME", "LANG")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(SPARK_CONF_DIR=str(INFRA), SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    return env


def test_a_driver_without_the_secret_is_refused(
    spark_cluster: ClusterSettings, tmp_path: Path
) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    res = _submit(_outsider_env(), spark_cluster.spark_master_url, probe)
    assert "EXECUTOR_ENV" not in res.stdout, "an unauthenticated driver ran code on the cluster"
    assert res.returncode != 0


def test_the_deployments_client_runs_and_its_executor_holds_no_dagster_secret(
    spark_cluster: ClusterSettings, tmp_path: Path
) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    env = {**os.environ, **read_env_file(spark_cluster.env_file)}
    res = _submit(env, spark_cluster.spark_master_url, probe)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("EXECUTOR_ENV ")]
    assert res.returncode == 0 and lines, res.stderr[-3000:]
    names = set(lines[0].split()[1:])
    # what the application sent (spark.executorEnv.* of the clients' private spark-defaults.conf)
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"} <= names
    assert not {n for n in names if n.startswith(("DAGSTER_", "SLATEDB_"))}, sorted(names)


def test_workers_hold_no_credentials_and_the_secret_is_on_no_command_line(
    spark_cluster: ClusterSettings,
) -> None:
    _, state = load_state(spark_cluster.dir)
    secret = (spark_cluster.spark_dir / "auth.secret").read_text().strip()
    assert len(secret) >= 32
    for name in ("spark-master", "spark-worker-1"):
        pid = state[name]["pid"]
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        names = {e.split(b"=", 1)[0].decode() for e in environ if e}
        assert not {n for n in names if n.startswith(("AWS_", "DAGSTER_", "SLATEDB_"))}, (
            name,
            sorted(names),
        )
    leaked = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if secret.encode() in cmdline:
                leaked.append(entry.name)
    assert not leaked, f"the Spark secret is on the command line of pids {leaked}"
    for log in spark_cluster.logs.rglob("*"):
        if log.is_file():
            assert secret.encode() not in log.read_bytes(), f"the Spark secret is in {log}"
    for conf in (spark_cluster.spark_client_conf, spark_cluster.spark_daemon_conf):
        assert conf.stat().st_mode & 0o777 == 0o700
        assert (conf / "spark-defaults.conf").stat().st_mode & 0o777 == 0o600
