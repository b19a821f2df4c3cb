"""Issue 39, item 1, the Compose deployment (Docker cannot run here): the Spark master and
workers require ``spark.authenticate`` with a secret that reaches them as a Docker secret, their
environment holds no credential (an executor inherits its worker's), and the one service that
submits (``spark-client``) hands its executors the store's settings itself. The entrypoint that
turns the secret into a private ``spark-defaults.conf`` runs for real."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]

from lakehouse_demo.cluster.settings import INFRA

SECRET_PATH = "/run/secrets/spark_auth_secret"
CREDENTIAL_PREFIXES = ("AWS_", "DAGSTER_", "MINIO_", "SLATEDB_", "POSTGRES_")


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((INFRA / "docker-compose.yml").read_text())
    return loaded


def test_spark_daemons_authenticate_and_hold_no_credentials() -> None:
    compose = _compose()
    assert compose["secrets"]["spark_auth_secret"] == {"environment": "SPARK_AUTH_SECRET"}
    example = (INFRA / "env.example").read_text()
    assert "\nSPARK_AUTH_SECRET=change-me" in example
    services = compose["services"]
    for name in ("spark-master", "spark-worker", "spark-client"):
        svc = services[name]
        env = svc["environment"]
        assert "spark_auth_secret" in svc.get("secrets", []), name
        assert env["SPARK_AUTH_SECRET_FILE"] == SECRET_PATH, name
        assert env["SPARK_CONF_DIR"] != "/opt/slatedb/infra", f"{name}: the public config"
    for name in ("spark-master", "spark-worker"):
        env = services[name]["environment"]
        held = sorted(k for k in env if k.startswith(CREDENTIAL_PREFIXES))
        assert not held, f"{name}'s environment (inherited by executors) holds {held}"
    # the secret's value is in no container's environment or command
    for name, svc in services.items():
        assert "SPARK_AUTH_SECRET" not in (svc.get("environment") or {}), name
        assert "SPARK_AUTH_SECRET}" not in str(svc.get("command", "")), name
    # the client sends its executors the store's settings
    assert "AWS_SECRET_ACCESS_KEY" in services["spark-client"]["environment"]
    assert services["spark-client"].get("profiles") == ["tools"]


def _entrypoint(tmp_path: Path, mode: str, *args: str, secret: str | None) -> tuple[int, str]:
    secret_file = tmp_path / "secret"
    if secret is not None:
        secret_file.write_text(secret + "\n")
    env = {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "SPARK_AUTH_SECRET_FILE": str(secret_file),
        "SPARK_CONF_DIR": str(tmp_path / "conf"),
        "SPARK_BASE_CONF": str(INFRA / "spark-defaults.conf"),
        "SPARK_MASTER_URL": "local[1]",
        "AWS_ACCESS_KEY_ID": "AKCOMPOSE",
        "AWS_SECRET_ACCESS_KEY": "compose-s3-secret",
        "AWS_ENDPOINT_URL": "http://minio:9000",
        **({"JAVA_HOME": os.environ["JAVA_HOME"]} if "JAVA_HOME" in os.environ else {}),
    }
    res = subprocess.run(
        ["sh", str(INFRA / "spark-entrypoint.sh"), mode, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    return res.returncode, res.stdout + res.stderr


def test_entrypoint_writes_the_secret_into_a_private_config(tmp_path: Path) -> None:
    code, out = _entrypoint(tmp_path, "submit", "--version", secret="compose-spark-secret-xyz")
    assert code == 0, out[-2000:]
    conf_dir = tmp_path / "conf"
    conf = conf_dir / "spark-defaults.conf"
    assert stat.S_IMODE(conf_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(conf.stat().st_mode) == 0o600
    lines = conf.read_text().splitlines()
    assert "spark.authenticate true" in lines
    assert "spark.authenticate.secret compose-spark-secret-xyz" in lines
    assert "spark.executorEnv.AWS_SECRET_ACCESS_KEY compose-s3-secret" in lines
    assert "spark.executorEnv.AWS_ENDPOINT_URL http://minio:9000" in lines
    # infra/spark-defaults.conf is kept
    assert "spark.speculation                         true" in lines
    assert "compose-spark-secret-xyz" not in out


def test_entrypoint_refuses_to_start_without_the_secret(tmp_path: Path) -> None:
    code, out = _entrypoint(tmp_path, "master", secret=None)
    assert code == 2 and "missing or empty" in out
    assert not (tmp_path / "conf" / "spark-defaults.conf").exists()
