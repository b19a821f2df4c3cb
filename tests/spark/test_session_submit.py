"""Under ``spark-submit``, the job's session takes spark-submit's master and settings: our
defaults fill in only what it left unset (a job submitted to a standalone master used to run on
``local[2]`` in the driver, whatever ``--master`` said)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]  # a spark-submit of its own: ~30 s

SCRIPT = """
import json
from spark_jobs.session import SessionOptions, get_session
spark = get_session(SessionOptions(master="local[2]", app_name="ours", shuffle_partitions=8))
conf = spark.sparkContext.getConf()
print("RESULT " + json.dumps({
    "master": spark.sparkContext.master,
    "app": spark.sparkContext.appName,
    "shuffle": spark.conf.get("spark.sql.shuffle.partitions"),
    "daemon": conf.get("spark.python.daemon.module"),
    "driver_host": conf.get("spark.driver.host"),
}))
spark.stop()
"""


def test_spark_submit_master_and_conf_win(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    submit = Path(sys.executable).parent / "spark-submit"
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    res = subprocess.run(
        [
            str(submit),
            "--master",
            "local[1]",
            "--name",
            "submitted",
            "--conf",
            "spark.sql.shuffle.partitions=3",
            "--conf",
            "spark.ui.enabled=false",
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=280,
        env=env,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    line = next(x for x in res.stdout.splitlines() if x.startswith("RESULT "))
    got = json.loads(line[len("RESULT ") :])
    assert got["master"] == "local[1]"  # spark-submit's, not SessionOptions'
    assert got["app"] == "submitted"
    assert got["shuffle"] == "3"
    # what spark-submit left unset is still ours; where the driver listens is the deployment's
    assert got["daemon"] == "spark_jobs.worker_daemon"
    assert got["driver_host"] in ("127.0.0.1", "localhost")
