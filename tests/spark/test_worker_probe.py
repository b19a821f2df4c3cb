"""The worker-interpreter probe of ``format("slatedb")``'s registration is bounded in time and
reports a worker failure that is not a missing module as what it is (issue 40, item 1; review of
spark_jobs/worker_python.py): before, a probe stuck on a busy cluster waited forever, and any task
failure was blamed on the interpreter ("cannot import spark_jobs ... set PYSPARK_PYTHON").

Real PySpark: the probe's code runs in a real Python worker of the session."""

from __future__ import annotations

import time

import pytest
from pyspark.sql import SparkSession

from spark_jobs.worker_python import WorkerProbeFailed, WorkerPythonMissing, probe_workers

pytestmark = pytest.mark.spark


def test_a_missing_module_is_reported_as_the_interpreter(spark: SparkSession) -> None:
    with pytest.raises(WorkerPythonMissing, match="No module named 'no_such_module_40'"):
        probe_workers(spark.sparkContext, "import no_such_module_40", timeout_s=60)


def test_another_failure_is_reported_as_itself(spark: SparkSession) -> None:
    with pytest.raises(WorkerProbeFailed) as info:
        probe_workers(spark.sparkContext, "raise RuntimeError('disk full')", timeout_s=60)
    assert not isinstance(info.value, WorkerPythonMissing)
    message = str(info.value)
    assert "RuntimeError: disk full" in message
    assert "cannot import" not in message and "PYSPARK_PYTHON" not in message


def test_the_probe_is_bounded_in_time(spark: SparkSession) -> None:
    began = time.monotonic()
    with pytest.raises(WorkerProbeFailed, match="did not finish within 3"):
        probe_workers(spark.sparkContext, "import time; time.sleep(120)", timeout_s=3)
    assert time.monotonic() - began < 30
    # the session is still usable: the stuck probe was cancelled
    assert spark.sparkContext.parallelize([1, 2, 3], 1).sum() == 6
