"""What ``make cluster`` runs, where, and with which credentials.

One folder (``cluster-data/`` by default) holds everything: ``logs/`` (one file per service, the
Dagster runs' output in ``dagster-runs/``, the Spark executors' in ``spark-worker-N/``),
``state.json`` (the processes this launcher started), ``cluster.env`` (the settings a client
needs, credentials included: mode 0600, never printed, never logged), ``dagster_home/`` (a copy
of infra/dagster.yaml), and each service's data. The config files are the deployment's own:
infra/dagster.yaml, infra/slatedb.yaml (or another file given with ``--config``),
infra/spark-defaults.conf (``SPARK_CONF_DIR``), infra/spark-entrypoint.sh, workspace.yaml.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import socket
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from slatedb_core.errors import InvalidArgument

REPO = Path(__file__).resolve().parents[2]
INFRA = REPO / "infra"
HOST = "127.0.0.1"
BUCKET = "lake"
STORE_PREFIX = "prod"
REGION = "us-east-1"
POSTGRES_DB = "dagster"
POSTGRES_USER = "dagster"
SECRET_NAMES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "DAGSTER_POSTGRES_PASSWORD")
"""Taken from the environment when set there at the first start, generated otherwise; kept in
``cluster.env`` (0600) so later commands use the same ones."""


@dataclass(frozen=True)
class Ports:
    s3: int = 8333
    postgres: int = 5433
    dagster: int = 3000
    spark_master: int = 7077
    spark_master_ui: int = 8080
    spark_worker_ui: int = 8081
    """The first worker's UI; worker N listens on this + N - 1."""

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
                raise InvalidArgument(f"port {name} must be an integer in 1..65535, got {value!r}")

    @classmethod
    def free(cls, workers: int) -> Ports:
        """Free ports on 127.0.0.1 (held together while picking), e.g. for a test's cluster."""
        socks: list[socket.socket] = []
        try:
            while len(socks) < 5 + workers:
                s = socket.socket()
                s.bind((HOST, 0))
                socks.append(s)
            ports = [s.getsockname()[1] for s in socks]
        finally:
            for s in socks:
                s.close()
        # the worker UIs must be consecutive: probe a free run after the others
        base = _free_run(workers, exclude=set(ports[:5]))
        return cls(
            s3=ports[0],
            postgres=ports[1],
            dagster=ports[2],
            spark_master=ports[3],
            spark_master_ui=ports[4],
            spark_worker_ui=base,
        )


def _free_run(n: int, exclude: set[int]) -> int:
    for base in range(20000, 60000, 97):
        run = range(base, base + n)
        if exclude.isdisjoint(run) and all(_is_free(p) for p in run):
            return base
    raise InvalidArgument(f"no {n} consecutive free ports on {HOST}")


def _is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
        return True


@dataclass(frozen=True)
class ClusterSettings:
    dir: Path
    ports: Ports = field(default_factory=Ports)
    workers: int = 2
    worker_cores: int = 1
    worker_memory: str = "1g"
    config: Path = INFRA / "slatedb.yaml"
    """The orchestration config (SLATEDB_ORCHESTRATION_CONFIG)."""

    def __post_init__(self) -> None:
        if not isinstance(self.workers, int) or not 1 <= self.workers <= 16:
            raise InvalidArgument(f"workers must be 1..16, got {self.workers!r}")
        if not isinstance(self.worker_cores, int) or not 1 <= self.worker_cores <= 64:
            raise InvalidArgument(f"worker_cores must be 1..64, got {self.worker_cores!r}")
        mem = self.worker_memory
        if not (isinstance(mem, str) and mem[:-1].isdigit() and mem[-1] in "mg"):
            raise InvalidArgument(f"worker_memory must look like 512m or 2g, got {mem!r}")
        if not self.config.is_file():
            raise InvalidArgument(f"orchestration config {self.config} does not exist")

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    @property
    def state_file(self) -> Path:
        return self.dir / "state.json"

    @property
    def env_file(self) -> Path:
        return self.dir / "cluster.env"

    @property
    def dagster_home(self) -> Path:
        return self.dir / "dagster_home"

    @property
    def s3_endpoint(self) -> str:
        return f"http://{HOST}:{self.ports.s3}"

    @property
    def spark_master_url(self) -> str:
        return f"spark://{HOST}:{self.ports.spark_master}"

    @property
    def dagster_url(self) -> str:
        return f"http://{HOST}:{self.ports.dagster}"

    @property
    def store_url(self) -> str:
        return f"s3://{BUCKET}/{STORE_PREFIX}"


def load_secrets(settings: ClusterSettings) -> dict[str, str]:
    """The cluster's credentials: from ``cluster.env`` once it exists; at the first start from the
    environment where set there, else freshly generated."""
    known = read_env_file(settings.env_file)
    out = {}
    for name in SECRET_NAMES:
        value = known.get(name) or os.environ.get(name)
        if not value:
            value = (
                f"lakehouse-{secrets.token_hex(4)}"
                if name == "AWS_ACCESS_KEY_ID"
                else secrets.token_urlsafe(24)
            )
        out[name] = value
    return out


def client_env(settings: ClusterSettings, creds: dict[str, str]) -> dict[str, str]:
    """Everything a client of the cluster (spark-submit, the slatedb CLI, Dagster's processes)
    needs in its environment. Credentials travel only this way, never on a command line."""
    bin_dir = str(Path(sys.executable).parent)
    return {
        **creds,
        "AWS_REGION": REGION,
        "AWS_ENDPOINT_URL": settings.s3_endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_CONDITIONAL_PUT": "etag",
        "SLATEDB_STORE_URL": settings.store_url,
        "SLATEDB_ORCHESTRATION_CONFIG": str(settings.config),
        "DAGSTER_HOME": str(settings.dagster_home),
        "DAGSTER_COMPUTE_LOG_DIR": str(settings.logs / "dagster-runs"),
        "DAGSTER_POSTGRES_HOST": HOST,
        "DAGSTER_POSTGRES_PORT": str(settings.ports.postgres),
        "DAGSTER_POSTGRES_DB": POSTGRES_DB,
        "DAGSTER_POSTGRES_USER": POSTGRES_USER,
        "SPARK_MASTER_URL": settings.spark_master_url,
        "SPARK_LOCAL_IP": HOST,
        "SPARK_CONF_DIR": str(INFRA),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def write_env_file(settings: ClusterSettings, env: dict[str, str]) -> None:
    """``cluster.env``: ``export NAME='value'`` lines, created 0600 before anything is written."""
    path = settings.env_file
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("# make cluster's settings, credentials included: keep private (mode 0600).\n")
        f.write(f"# Use: source {path}\n")
        for name, value in env.items():
            f.write(f"export {name}={shlex.quote(value)}\n")


def read_env_file(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        if line.startswith("export ") and "=" in line:
            name, _, value = line[len("export ") :].partition("=")
            out[name] = "".join(shlex.split(value))  # as written by shlex.quote
    return out


def save_state(settings: ClusterSettings, state: dict[str, dict[str, object]]) -> None:
    tmp = settings.state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps({"ports": asdict(settings.ports), "services": state}, indent=2))
    tmp.replace(settings.state_file)


def load_state(dir: Path) -> tuple[Ports | None, dict[str, dict[str, object]]]:
    path = dir / "state.json"
    if not path.exists():
        return None, {}
    raw = json.loads(path.read_text())
    return Ports(**raw["ports"]), dict(raw["services"])
