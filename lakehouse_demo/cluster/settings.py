"""What ``make cluster`` runs, where, and with which credentials.

One folder (``cluster-data/`` by default) holds everything: ``logs/`` (one file per service, the
Dagster runs' output in ``dagster-runs/``, the Spark executors' in ``spark-worker-N/``),
``state.json`` (the processes this launcher started), ``cluster.env`` (the settings a client
needs, credentials included: mode 0600, never printed, never logged), ``dagster_home/`` (a copy
of infra/dagster.yaml), ``spark/`` (the Spark authentication secret and the two Spark
configurations that hold it, below), ``prometheus/`` (the Prometheus server's ``prometheus.yml``
and TSDB), and each service's data. The folder and every data folder
in it are private to the user (0700; issue 39, item 6). The config files are the deployment's
own: infra/dagster.yaml, infra/slatedb.yaml (or another file given with ``--config``),
infra/spark-defaults.conf, infra/spark-entrypoint.sh, workspace.yaml.

Spark (issue 39, item 1): the standalone master and workers require ``spark.authenticate`` with
a secret generated for this folder. It lives only in 0600 files: ``spark/auth.secret``,
``spark/daemon-conf/spark-defaults.conf`` (the master's and workers' ``SPARK_CONF_DIR``: the
secret alone) and ``spark/conf/spark-defaults.conf`` (the clients' ``SPARK_CONF_DIR`` in
``cluster.env``: infra/spark-defaults.conf, the secret, and the store's settings for the
executors as ``spark.executorEnv.AWS_*``). Workers start with a minimal environment, so an
executor has only what its own application sent it; Spark hands the worker's secret to its
executors in their environment, never on a command line.
"""

from __future__ import annotations

import grp
import json
import os
import secrets
import shlex
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from slatedb_core.errors import InvalidArgument
from slatedb_core.testing.ports import free_ports, free_run

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
    metrics: int = 9464
    """``slatedb fleet serve-metrics`` (lakehouse_demo/cluster/prometheus.py)."""
    prometheus: int = 9090
    """Debian's Prometheus server, scraping :attr:`metrics`."""

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
                raise InvalidArgument(f"port {name} must be an integer in 1..65535, got {value!r}")

    @classmethod
    def free(cls, workers: int) -> Ports:
        """Free ports on 127.0.0.1 that no outgoing connection takes while the services start,
        e.g. for a test's cluster (slatedb_core/testing/ports.py)."""
        ports = free_ports(7)
        # the worker UIs must be consecutive
        base = free_run(workers, exclude=set(ports))
        return cls(
            s3=ports[0],
            postgres=ports[1],
            dagster=ports[2],
            spark_master=ports[3],
            spark_master_ui=ports[4],
            spark_worker_ui=base,
            metrics=ports[5],
            prometheus=ports[6],
        )


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
    def spark_dir(self) -> Path:
        return self.dir / "spark"

    @property
    def spark_client_conf(self) -> Path:
        """``SPARK_CONF_DIR`` of the deployment's clients (spark-submit, Dagster's processes)."""
        return self.spark_dir / "conf"

    @property
    def spark_daemon_conf(self) -> Path:
        """``SPARK_CONF_DIR`` of the standalone master and workers."""
        return self.spark_dir / "daemon-conf"

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
    def prometheus_dir(self) -> Path:
        """The Prometheus server's ``prometheus.yml`` and, in ``data/``, its TSDB."""
        return self.dir / "prometheus"

    @property
    def metrics_url(self) -> str:
        return f"http://{HOST}:{self.ports.metrics}/metrics"

    @property
    def prometheus_url(self) -> str:
        return f"http://{HOST}:{self.ports.prometheus}"

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
        "SPARK_CONF_DIR": str(settings.spark_client_conf),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def private_dir(path: Path, *, postgres_traverses: bool = False) -> Path:
    """``path`` created (with missing parents) and set 0700: the one place the launcher makes a
    folder. As root, PostgreSQL runs as Debian's ``postgres`` user (it refuses root) and must
    reach its data folder through the folders above it: those get 0710 with the ``postgres``
    group (``postgres_traverses``), which lets that user pass through but not list them."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = 0o700
    if postgres_traverses and os.geteuid() == 0:
        try:
            gid = grp.getgrnam("postgres").gr_gid
        except KeyError:
            gid = None
        if gid is not None:
            os.chown(path, -1, gid)
            mode = 0o710
    path.chmod(mode)
    return path


def write_private_file(path: Path, text: str) -> None:
    """``path`` created 0600 before anything is written (and made 0600 if it existed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def write_env_file(settings: ClusterSettings, env: dict[str, str]) -> None:
    """``cluster.env``: ``export NAME='value'`` lines, created 0600 before anything is written."""
    path = settings.env_file
    lines = [
        "# make cluster's settings, credentials included: keep private (mode 0600).\n",
        f"# Use: source {path}\n",
        *(f"export {name}={shlex.quote(value)}\n" for name, value in env.items()),
    ]
    write_private_file(path, "".join(lines))


EXECUTOR_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ALLOW_HTTP",
)
"""What the deployment's jobs give their executors (``spark.executorEnv.*`` in the clients'
Spark configuration): the store's settings, read by ``open_store``. Not the PostgreSQL password,
not Dagster's settings."""


def spark_secret(settings: ClusterSettings) -> str:
    """The cluster's ``spark.authenticate.secret``: generated at the first start, kept in
    ``spark/auth.secret`` (0600)."""
    path = settings.spark_dir / "auth.secret"
    if path.exists():
        value = path.read_text().strip()
        if value:
            return value
    private_dir(settings.spark_dir)
    value = secrets.token_urlsafe(32)
    write_private_file(path, value + "\n")
    return value


def spark_auth_conf(secret: str) -> dict[str, str]:
    """What every Spark process of the deployment sets: authentication with ``secret`` (and the
    RPC encryption that comes with it), no killing of applications from the web UIs."""
    return {
        "spark.authenticate": "true",
        "spark.authenticate.secret": secret,
        "spark.network.crypto.enabled": "true",
        "spark.ui.killEnabled": "false",
    }


def _property(value: str) -> str:
    """``value`` as a Java properties value: backslashes and line breaks escaped (a newline in a
    credential taken from the environment must not add a setting), a leading blank kept."""
    out = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    return "\\" + out if out[:1] in (" ", "\t") else out


def write_spark_confs(settings: ClusterSettings, client: dict[str, str]) -> None:
    """The two ``spark-defaults.conf`` (0600, in 0700 folders): the daemons' (authentication
    only) and the clients' (infra/spark-defaults.conf, authentication, executors' store
    settings from ``client``, the output of :func:`client_env`)."""
    auth = spark_auth_conf(spark_secret(settings))
    auth = {k: _property(v) for k, v in auth.items()}
    head = "# written by make cluster (lakehouse_demo/cluster/settings.py): private, mode 0600\n"
    daemon = "".join(f"{k} {v}\n" for k, v in auth.items())
    private_dir(settings.spark_daemon_conf)
    write_private_file(settings.spark_daemon_conf / "spark-defaults.conf", head + daemon)
    executors = {
        f"spark.executorEnv.{n}": _property(client[n]) for n in EXECUTOR_ENV if n in client
    }
    extra = "".join(f"{k} {v}\n" for k, v in {**auth, **executors}.items())
    base = (INFRA / "spark-defaults.conf").read_text()
    private_dir(settings.spark_client_conf)
    write_private_file(settings.spark_client_conf / "spark-defaults.conf", head + base + extra)


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
    write_private_file(
        tmp, json.dumps({"ports": asdict(settings.ports), "services": state}, indent=2)
    )
    tmp.replace(settings.state_file)


def load_state(dir: Path) -> tuple[Ports | None, dict[str, dict[str, object]]]:
    path = dir / "state.json"
    if not path.exists():
        return None, {}
    raw = json.loads(path.read_text())
    return Ports(**raw["ports"]), dict(raw["services"])
