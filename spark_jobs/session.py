"""SparkSession construction shared by the jobs, their tests and the benchmarks.

Everything binds to 127.0.0.1 (the driver, its block manager, no UI): a job started on a developer
machine must not listen on a public interface. ``spark-submit`` users pass their own master and
configuration; :func:`get_session` then only fills in what is unset.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

NETWORK_CONF: dict[str, str] = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
}
"""Where the driver listens, for a session that picks its own (local) master or is submitted to
one whose executors are all on loopback (:func:`on_loopback`), unless ``--conf`` says otherwise.
Under ``spark-submit`` to another cluster these are left to the deployment: ``SPARK_LOCAL_IP`` or
its own ``--conf``, since executors on other hosts must reach the driver."""

LOCAL_CONF: dict[str, str] = {
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Each ingest task holds its shard's rows as Arrow batches; 10k-row batches keep the
    # JVM -> Python hand-over cheap without large per-batch latency.
    "spark.sql.execution.arrow.maxRecordsPerBatch": "10000",
    # format("slatedb") reads take the key filters (spark_jobs.datasource_read); PySpark refuses
    # a Python data source reader with pushFilters unless this is on (off by default in 4.x)
    "spark.sql.python.filterPushdown.enabled": "true",
    # Python workers are forked from a daemon that has pyspark's worker modules, pyarrow and
    # slatedb_core imported already (each new worker otherwise compiles pyspark from Spark's zip
    # and imports the rest: ~2 s of CPU per worker; spark_jobs/worker_daemon.py)
    "spark.python.daemon.module": "spark_jobs.worker_daemon",
}


@dataclass(frozen=True)
class SessionOptions:
    master: str = "local[2]"
    """Used only when nothing chose one: ``spark-submit --master`` (or its ``spark.master``)
    wins."""
    app_name: str = "slatedb-spark"
    shuffle_partitions: int = 8
    conf: Mapping[str, str] = field(default_factory=dict)
    """Extra settings, applied last (they win over the defaults above)."""


def submitted_conf() -> dict[str, str]:
    """The settings ``spark-submit`` gave this driver (its ``--master``, ``--conf`` and
    ``spark-defaults.conf``), or {} when this process was not started by ``spark-submit``."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return {}
    SparkContext._ensure_initialized()  # connects to spark-submit's JVM; SparkConf reads it
    return dict(SparkConf().getAll())


def on_loopback(master: str) -> bool:
    """Whether every executor of ``master`` runs on this machine's loopback (``local[...]``, or
    a standalone master on 127.0.0.1 as ``make cluster``'s), so the driver need not listen
    anywhere else (``spark-submit --master local[2]`` without ``SPARK_LOCAL_IP`` would otherwise
    put the driver on the host's address and its UI on 0.0.0.0:4040)."""
    m = master.strip().lower()
    return m.startswith("local") or m.startswith(("spark://127.0.0.1:", "spark://localhost:"))


def _loopback_ip(ip: str) -> bool:
    return ip.startswith("127.") or ip in ("localhost", "::1")


def get_session(options: SessionOptions | None = None) -> SparkSession:
    """A SparkSession: the running one, or a new one with our defaults filling in only what
    ``spark-submit`` left unset. Without ``spark-submit`` it runs on ``options.master`` bound to
    127.0.0.1."""
    options = options or SessionOptions()
    # Executors must run the same interpreter as the driver (the venv with slatedb_core).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    given = submitted_conf()
    builder = SparkSession.builder.appName(given.get("spark.app.name", options.app_name))
    master = given.get("spark.master")
    defaults = {**LOCAL_CONF, "spark.sql.shuffle.partitions": str(options.shuffle_partitions)}
    if master is None:
        builder = builder.master(options.master)
        defaults.update(NETWORK_CONF)
    elif on_loopback(master):
        defaults.update(NETWORK_CONF)
        if _loopback_ip(os.environ.get("SPARK_LOCAL_IP", "")):
            del defaults["spark.ui.enabled"]  # the UI binds to SPARK_LOCAL_IP: keep it
    conf = {k: v for k, v in defaults.items() if k not in given}
    conf.update(options.conf)
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
