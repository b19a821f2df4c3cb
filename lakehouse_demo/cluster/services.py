"""The services of ``make cluster``, each started from what the project installs, bound to
127.0.0.1, logging under ``<dir>/logs``, and checked until it answers:

* ``s3``: SeaweedFS ``weed mini`` (lakehouse_demo/s3server.py), bucket ``lake``;
* ``postgres``: a PostgreSQL cluster of Debian's server binaries with password authentication
  (scram-sha-256); the ``dagster`` role owns the ``dagster`` database, the superuser's password
  is random and discarded after set-up;
* ``spark-master`` and ``spark-worker-N``: pyspark's own ``spark-class`` through
  infra/spark-entrypoint.sh, as in infra/docker-compose.yml;
* ``dagster-webserver`` and ``dagster-daemon`` with infra/dagster.yaml and workspace.yaml;
* ``metrics-exporter``: ``slatedb fleet serve-metrics`` of the store, and ``prometheus``: Debian's
  Prometheus server scraping it, its TSDB under ``<dir>/prometheus/`` (issue 40, item 11;
  lakehouse_demo/cluster/prometheus.py). Without the ``prometheus`` binary the cluster starts
  without that one service and says so.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import secrets
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from lakehouse_demo.cluster import prometheus
from lakehouse_demo.cluster.processes import (
    MARKER,
    OWNER,
    ClusterError,
    http_ok,
    open_log,
    spawn,
    start_time,
    tail,
)
from lakehouse_demo.cluster.settings import (
    BUCKET,
    HOST,
    INFRA,
    POSTGRES_DB,
    POSTGRES_USER,
    REPO,
    ClusterSettings,
    private_dir,
)
from lakehouse_demo.s3server import SeaweedFS

Record = dict[str, object]
Env = Mapping[str, str]


@dataclass(frozen=True)
class Service:
    name: str
    start: Callable[[ClusterSettings, Env], Record]
    ready: Callable[[ClusterSettings, Env], bool]
    describe: Callable[[ClusterSettings], str]
    timeout_s: float = 120.0
    unavailable: Callable[[], str | None] = lambda: None
    """Why this service cannot run on this machine (a binary not installed), or None: the
    cluster then starts without it, and says so in one line."""


# ---- S3 ----------------------------------------------------------------------------------------
def _start_s3(s: ClusterSettings, env: Env) -> Record:
    log = s.logs / "s3.log"
    os.close(open_log(log))  # 0600 before weed appends to it
    weed = SeaweedFS(
        bucket=BUCKET,
        data_dir=s.dir / "s3",
        s3_port=s.ports.s3,
        access_key=env["AWS_ACCESS_KEY_ID"],
        secret_key=env["AWS_SECRET_ACCESS_KEY"],
        log_file=log,
    )
    weed.start()  # returns once a put/get/delete round trip with the keys works
    assert weed.pid is not None
    return {"pid": weed.pid, "start_time": start_time(weed.pid), "log": str(log)}


def _s3_ready(s: ClusterSettings, env: Env) -> bool:
    try:
        urllib.request.urlopen(s.s3_endpoint, timeout=2)
    except urllib.error.HTTPError:
        return True  # 403 without credentials: the listener answers
    except OSError:
        return False
    return True


# ---- PostgreSQL --------------------------------------------------------------------------------
PG_MISSING = (
    "PostgreSQL server binaries (initdb, pg_ctl) not found; install Debian's postgresql "
    "package (apt-get install -y postgresql)"
)


def find_pg_bin() -> Path | None:
    """The directory holding PostgreSQL's ``initdb`` and ``pg_ctl`` (PATH first, then Debian's
    /usr/lib/postgresql/<version>/bin, newest first), or None. The tests' throwaway clusters
    (tests/pgcluster.py) find theirs the same way."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(os.path.realpath(found)).parent
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(f"{d}/initdb") and os.path.exists(f"{d}/pg_ctl"):
            return Path(d)
    return None


def pg_bin() -> Path:
    found = find_pg_bin()
    if found is None:
        raise ClusterError(PG_MISSING)
    return found


def _as_postgres(path: Path | None = None) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run it as Debian's ``postgres`` user (and give
    it ``path``)."""
    if os.geteuid() != 0:
        return []
    user = pwd.getpwnam("postgres")
    if path is not None:
        os.chown(path, user.pw_uid, user.pw_gid)
    return ["runuser", "-u", "postgres", "--"]


def _pg(cmd: list[str], s: ClusterSettings) -> None:
    res = subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env=_pg_env(), umask=0o077
    )
    if res.returncode != 0:
        raise ClusterError(
            f"{Path(cmd[len(_as_postgres())]).name} failed ({res.returncode}): "
            f"{res.stderr.strip()}\n{tail(s.logs / 'postgres.log')}"
        )


def postmaster_pid(dir: Path) -> int | None:
    """The pid in the cluster's ``postmaster.pid`` (PostgreSQL's own record), or None."""
    try:
        return int((dir / "postgres" / "data" / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _pg_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("PG", "AWS_", "DAGSTER_"))}


def _start_postgres(s: ClusterSettings, env: Env) -> Record:
    bin_dir, root = pg_bin(), s.dir / "postgres"
    data, log = root / "data", s.logs / "postgres.log"
    private_dir(root)
    os.close(open_log(log))
    as_pg = _as_postgres(root)
    _as_postgres(log)
    superuser_password = None
    # set-up (initdb .. the dagster role) runs once; a first start that failed half-way (port
    # taken, killed) redoes it, else the role would never exist. The marker only ever names a
    # cluster without the dagster role, hence without any Dagster data.
    unfinished = root / "setup-unfinished"
    if unfinished.exists() and data.exists():
        subprocess.run(
            [*as_pg, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
            capture_output=True,
            timeout=120,
            env=_pg_env(),
        )
        shutil.rmtree(data)
    if not (data / "PG_VERSION").exists():
        unfinished.touch()
        superuser_password = secrets.token_urlsafe(24)
        pwfile = root / "initdb.pw"
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(superuser_password + "\n")
        _as_postgres(pwfile)
        try:
            _pg(
                [
                    *as_pg,
                    str(bin_dir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    "postgres",
                    "-A",
                    "scram-sha-256",
                    f"--pwfile={pwfile}",
                    "-E",
                    "UTF8",
                    "--no-locale",
                ],
                s,
            )
        finally:
            pwfile.unlink(missing_ok=True)
    opts = f"-p {s.ports.postgres} -k {root} -c listen_addresses={HOST}"
    _pg(
        [
            *as_pg,
            str(bin_dir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(log),
            "-o",
            opts,
            "-w",
            "-t",
            "60",
            "start",
        ],
        s,
    )
    pid = int((data / "postmaster.pid").read_text().split()[0])
    if superuser_password is not None:
        _create_dagster_database(s, superuser_password, env["DAGSTER_POSTGRES_PASSWORD"])
        unfinished.unlink()
    # SIGINT is PostgreSQL's fast shutdown; the postmaster stops its own children
    return {
        "pid": pid,
        "start_time": start_time(pid),
        "log": str(log),
        "stop_signal": "SIGINT",
        "group": False,
    }


def _create_dagster_database(s: ClusterSettings, superuser_password: str, password: str) -> None:
    conninfo = psycopg.conninfo.make_conninfo(
        host=HOST,
        port=s.ports.postgres,
        user="postgres",
        password=superuser_password,
        dbname="postgres",
    )
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(POSTGRES_USER), sql.Literal(password)
            )
        )
        conn.execute(
            sql.SQL("CREATE DATABASE {} OWNER {}").format(
                sql.Identifier(POSTGRES_DB), sql.Identifier(POSTGRES_USER)
            )
        )


def _postgres_ready(s: ClusterSettings, env: Env) -> bool:
    conninfo = psycopg.conninfo.make_conninfo(
        host=HOST,
        port=s.ports.postgres,
        user=POSTGRES_USER,
        password=env["DAGSTER_POSTGRES_PASSWORD"],
        dbname=POSTGRES_DB,
        connect_timeout=3,
    )
    try:
        with psycopg.connect(conninfo) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


# ---- Spark -------------------------------------------------------------------------------------
def _spark_json(s: ClusterSettings) -> dict[str, object] | None:
    body = http_ok(f"http://{HOST}:{s.ports.spark_master_ui}/json/")
    if body is None:
        return None
    try:
        loaded = json.loads(body)
    except ValueError:  # an empty 200 while the master's UI starts: not ready yet
        return None
    return loaded if isinstance(loaded, dict) else None


SPARK_DAEMON_ENV = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TZ",
    "JAVA_HOME",
    "TMPDIR",
    "USER",
    "LOGNAME",
    MARKER,
)
"""All the master and the workers take from the launcher's environment (issue 39, item 1): an
executor inherits its worker's environment, so a worker holds no credential; what an executor
needs comes from its own application (``spark.executorEnv.*``, settings.EXECUTOR_ENV)."""


def _spark_env(s: ClusterSettings, env: Env) -> dict[str, str]:
    return {
        **{k: env[k] for k in SPARK_DAEMON_ENV if k in env},
        "SPARK_CONF_DIR": str(s.spark_daemon_conf),
        "SPARK_LOCAL_IP": HOST,
        "PYSPARK_PYTHON": env.get("PYSPARK_PYTHON", "python"),
        "SPARK_MASTER_URL": s.spark_master_url,
        "SPARK_MASTER_HOST": HOST,
        "SPARK_MASTER_PORT": str(s.ports.spark_master),
        "SPARK_MASTER_WEBUI_PORT": str(s.ports.spark_master_ui),
        "SPARK_LOG_DIR": str(s.logs),
        "SPARK_DAEMON_MEMORY": "512m",
        "SPARK_WORKER_CORES": str(s.worker_cores),
        "SPARK_WORKER_MEMORY": s.worker_memory,
    }


def _start_master(s: ClusterSettings, env: Env) -> Record:
    return spawn(
        [str(INFRA / "spark-entrypoint.sh"), "master"],
        log=s.logs / "spark-master.log",
        env=_spark_env(s, env),
        cwd=s.dir,
    )


def _master_ready(s: ClusterSettings, env: Env) -> bool:
    state = _spark_json(s)
    return state is not None and state.get("status") == "ALIVE"


def _worker(n: int) -> Service:
    def start(s: ClusterSettings, env: Env) -> Record:
        # the worker's folder holds its executors' stdout/stderr: with the other logs
        work = private_dir(s.logs / f"spark-worker-{n}")
        wenv = {
            **_spark_env(s, env),
            "SPARK_WORKER_DIR": str(work),
            "SPARK_LOCAL_DIRS": str(private_dir(s.dir / "spark-tmp")),
            "SPARK_WORKER_WEBUI_PORT": str(s.ports.spark_worker_ui + n - 1),
        }
        return spawn(
            [str(INFRA / "spark-entrypoint.sh"), "worker"],
            log=s.logs / f"spark-worker-{n}.log",
            env=wenv,
            cwd=s.dir,
        )

    def ready(s: ClusterSettings, env: Env) -> bool:
        state = _spark_json(s) or {}
        ui = f":{s.ports.spark_worker_ui + n - 1}"
        workers = state.get("workers")
        return isinstance(workers, list) and any(
            isinstance(w, dict)
            and w.get("state") == "ALIVE"
            and str(w.get("webuiaddress", "")).endswith(ui)
            for w in workers
        )

    def describe(s: ClusterSettings) -> str:
        return (
            f"{s.worker_cores} core(s), {s.worker_memory}; "
            f"ui http://{HOST}:{s.ports.spark_worker_ui + n - 1}"
        )

    return Service(f"spark-worker-{n}", start, ready, describe)


# ---- Dagster -----------------------------------------------------------------------------------
def _dagster_env(s: ClusterSettings, env: Env) -> dict[str, str]:
    home = private_dir(s.dagster_home)
    # the deployment's instance file, unchanged (tests/cluster checks they are identical)
    shutil.copyfile(INFRA / "dagster.yaml", home / "dagster.yaml")
    return dict(env)


def _start_webserver(s: ClusterSettings, env: Env) -> Record:
    cmd = [
        "dagster-webserver",
        "-h",
        HOST,
        "-p",
        str(s.ports.dagster),
        "-w",
        str(REPO / "workspace.yaml"),
    ]
    return spawn(cmd, log=s.logs / "dagster-webserver.log", env=_dagster_env(s, env), cwd=REPO)


def _webserver_ready(s: ClusterSettings, env: Env) -> bool:
    return http_ok(f"{s.dagster_url}/server_info") is not None


def _start_daemon(s: ClusterSettings, env: Env) -> Record:
    cmd = ["dagster-daemon", "run", "-w", str(REPO / "workspace.yaml")]
    return spawn(cmd, log=s.logs / "dagster-daemon.log", env=_dagster_env(s, env), cwd=REPO)


DAEMON_QUERY = "{ instance { daemonHealth { allDaemonStatuses { daemonType required healthy } } } }"


def graphql(
    s: ClusterSettings, query: str, variables: Mapping[str, object] | None = None
) -> dict[str, object]:
    """One query to the webserver's GraphQL endpoint; its ``data``."""
    body = json.dumps({"query": query, "variables": dict(variables or {})}).encode()
    req = urllib.request.Request(
        f"{s.dagster_url}/graphql", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        answer = json.loads(resp.read())
    if answer.get("errors"):
        raise ClusterError(f"GraphQL errors: {answer['errors']}")
    data: dict[str, object] = answer["data"]
    return data


def daemon_statuses(s: ClusterSettings) -> dict[str, bool]:
    """Each required Dagster daemon (scheduler, sensors, run queue, run monitoring, ...)
    and whether its heartbeat is fresh."""
    data = graphql(s, DAEMON_QUERY)
    statuses = data["instance"]["daemonHealth"]["allDaemonStatuses"]  # type: ignore[index]
    return {d["daemonType"]: bool(d["healthy"]) for d in statuses if d["required"]}


def _daemon_ready(s: ClusterSettings, env: Env) -> bool:
    try:
        statuses = daemon_statuses(s)
    except (OSError, ValueError, ClusterError, KeyError, TypeError):  # ValueError: not JSON yet
        return False
    return bool(statuses) and all(statuses.values())


# ---- Prometheus --------------------------------------------------------------------------------
EXPORTER_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER", "LOGNAME", MARKER, OWNER)
"""What the exporter takes from the launcher's environment, beside the store's settings: not the
PostgreSQL password, not Dagster's or Spark's settings."""
EXPORTER_DISCOVER_S = 60.0
"""How often the cluster's exporter lists the store for new databases (the command's default is
300 s): a database created on the cluster shows in Prometheus within about a minute."""


def _start_exporter(s: ClusterSettings, env: Env) -> Record:
    store = {k: env[k] for k in env if k.startswith("AWS_")}
    xenv = {**{k: env[k] for k in EXPORTER_ENV if k in env}, **store, "SLATEDB_URL": s.store_url}
    cmd = prometheus.exporter_command(
        HOST, s.ports.metrics, discover_interval_s=EXPORTER_DISCOVER_S
    )
    return spawn(cmd, log=s.logs / "metrics-exporter.log", env=xenv, cwd=REPO)


def _exporter_ready(s: ClusterSettings, env: Env) -> bool:
    return http_ok(s.metrics_url, timeout_s=30) is not None


def _start_prometheus(s: ClusterSettings, env: Env) -> Record:
    binary = prometheus.find_prometheus()
    if binary is None:
        raise ClusterError(prometheus.PROMETHEUS_MISSING)
    root = private_dir(s.prometheus_dir)
    data = private_dir(root / "data")
    config = prometheus.write_config(root / "prometheus.yml", f"{HOST}:{s.ports.metrics}")
    cmd = prometheus.prometheus_command(binary, config, data, f"{HOST}:{s.ports.prometheus}")
    penv = {k: env[k] for k in EXPORTER_ENV if k in env}
    return spawn(cmd, log=s.logs / "prometheus.log", env=penv, cwd=root)


def _prometheus_ready(s: ClusterSettings, env: Env) -> bool:
    return http_ok(f"{s.prometheus_url}/-/ready") is not None


def _prometheus_unavailable() -> str | None:
    return None if prometheus.find_prometheus() else prometheus.PROMETHEUS_MISSING


def services(s: ClusterSettings) -> list[Service]:
    """In start order; ``make cluster-stop`` stops them in the reverse order."""
    return [
        Service(
            "s3",
            _start_s3,
            _s3_ready,
            lambda s: f"{s.s3_endpoint} (SeaweedFS; bucket {BUCKET}, store {s.store_url})",
        ),
        Service(
            "postgres",
            _start_postgres,
            _postgres_ready,
            lambda s: (
                f"{HOST}:{s.ports.postgres} (database {POSTGRES_DB}, "
                f"user {POSTGRES_USER}, password auth)"
            ),
        ),
        Service(
            "spark-master",
            _start_master,
            _master_ready,
            lambda s: f"{s.spark_master_url}; ui http://{HOST}:{s.ports.spark_master_ui}",
        ),
        *[_worker(n) for n in range(1, s.workers + 1)],
        Service(
            "dagster-webserver",
            _start_webserver,
            _webserver_ready,
            lambda s: f"{s.dagster_url} (GraphQL {s.dagster_url}/graphql)",
            180.0,
        ),
        Service(
            "dagster-daemon",
            _start_daemon,
            _daemon_ready,
            lambda s: "scheduler, sensors, run queue (one run per database), run monitoring",
            180.0,
        ),
        Service(
            "metrics-exporter",
            _start_exporter,
            _exporter_ready,
            lambda s: f"{s.metrics_url} (slatedb fleet serve-metrics of {s.store_url})",
        ),
        Service(
            "prometheus",
            _start_prometheus,
            _prometheus_ready,
            lambda s: (
                f"{s.prometheus_url} (scrapes the exporter; "
                f"Grafana: import infra/grafana/slatedb-fleet.json)"
            ),
            unavailable=_prometheus_unavailable,
        ),
    ]
