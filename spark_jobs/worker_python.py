"""The Python interpreter Spark's workers run for ``format("slatedb")``: one that can import the
package, checked on the driver when the data source is registered (docs/spark.md).

PySpark fixes a session's worker interpreter when its SparkContext starts:
``SparkContext.pythonExec``, ``PYSPARK_PYTHON`` or else ``python3`` found on the workers' PATH,
and ``spark.dataSource.register`` captures it for every read and write of the format. A driver
started as ``.venv/bin/python`` without the venv activated thus gets workers on the system
``python3``, where every query fails deep in a worker (``PYTHON_DATA_SOURCE_ERROR``, ``No module
named ...``). :func:`ensure_worker_python`, run at registration:

* nothing to do when the workers run this interpreter (``spark_jobs.session`` sets that up);
* a session whose executors are on this machine (:func:`~spark_jobs.session.on_loopback`) and
  whose interpreter nobody chose (``PYSPARK_PYTHON`` unset) is pointed at this interpreter;
* otherwise (an interpreter someone chose, a cluster's) one tiny task imports the data source in
  a worker, and a failure raises :class:`WorkerPythonMissing` on the driver, one line naming the
  interpreter and how to set it. A success is remembered for the context and interpreter.
  The probe is bounded (:data:`PROBE_TIMEOUT_S`, then cancelled), and a failure that is not a
  missing module (a worker crash, a lost executor, no free executor in time) raises
  :class:`WorkerProbeFailed` with the worker's own error instead of blaming the interpreter.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import uuid

from pyspark import SparkContext

from slatedb_core.errors import InvalidArgument, SlateDBError
from spark_jobs.session import on_loopback

__all__ = ["PROBE_TIMEOUT_S", "WorkerProbeFailed", "WorkerPythonMissing", "ensure_worker_python"]

_PROBE = "import spark_jobs.datasource"
_checked: set[tuple[str, str]] = set()
"""(application id, interpreter) pairs whose workers imported the data source."""


PROBE_TIMEOUT_S = 120.0
"""How long the probe task may take (a cluster without a free executor holds it queued)."""
_MISSING = ("ModuleNotFoundError", "ImportError")
"""The worker errors that say the interpreter lacks the package."""


class WorkerPythonMissing(InvalidArgument):
    """Spark's Python workers run an interpreter that cannot import the package."""


class WorkerProbeFailed(SlateDBError):
    """The task checking Spark's Python workers failed for another reason than a missing module
    (the message quotes the worker's error), or did not finish in time."""


def _same_interpreter(exe: str) -> bool:
    """Whether ``exe`` is this interpreter by its path. Not by its file: a venv's ``python``
    links to its base interpreter's file, which runs without the venv's packages."""
    found = shutil.which(exe) if os.sep not in exe else exe
    return found is not None and os.path.abspath(found) == os.path.abspath(sys.executable)


def _missing(exe: str, why: str) -> WorkerPythonMissing:
    return WorkerPythonMissing(
        f"Spark's Python workers run {exe!r}, which cannot import spark_jobs ({why}): start the "
        f"session with PYSPARK_PYTHON={sys.executable} (spark-submit: --conf "
        f"spark.pyspark.python={sys.executable}), or install the package into {exe!r}"
    )


def _cause(error: BaseException) -> str:
    """The worker's own error line (``ModuleNotFoundError: ...``) out of Spark's report."""
    text = str(error)
    for line in reversed(text.splitlines()):
        if "Error:" in line and "Traceback" not in line:
            return line.strip()[:200]
    return type(error).__name__


def ensure_worker_python(
    sc: SparkContext | None = None, *, timeout_s: float = PROBE_TIMEOUT_S
) -> None:
    """Make the active SparkContext's Python workers able to import the package, or raise
    :class:`WorkerPythonMissing` (see the module doc); :class:`WorkerProbeFailed` when the probe
    fails otherwise or takes over ``timeout_s``. No context (Spark Connect, a worker): nothing to
    check."""
    sc = sc or SparkContext._active_spark_context
    if sc is None:
        return
    exe = sc.pythonExec
    if _same_interpreter(exe):
        return
    if on_loopback(sc.master or "") and "PYSPARK_PYTHON" not in os.environ:
        # nobody chose the workers' interpreter: this one has the package (it imported us)
        sc.pythonExec = sys.executable
        return
    key = (sc.applicationId, exe)
    if key in _checked:
        return
    probe_workers(sc, _PROBE, timeout_s=timeout_s)
    _checked.add(key)


def probe_workers(sc: SparkContext, code: str, *, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Run ``code`` in one Python worker of ``sc``: WorkerPythonMissing when it fails on a missing
    module, WorkerProbeFailed when it fails otherwise or takes over ``timeout_s`` (the job is
    cancelled then)."""
    exe = sc.pythonExec
    tag = f"slatedb-worker-probe-{uuid.uuid4().hex}"
    timer = threading.Timer(timeout_s, sc.cancelJobsWithTag, (tag,))
    sc.addJobTag(tag)
    timer.start()
    try:
        # exec is pickled by reference: the worker needs nothing of ours to run the probe
        sc.parallelize([code], 1).foreach(exec)
    except Exception as e:  # Py4JJavaError: the task failed in the worker, or was cancelled
        if not timer.is_alive():
            raise WorkerProbeFailed(
                f"the task checking Spark's Python workers ({exe!r}) did not finish within "
                f"{timeout_s:g} s (no free executor?); it was cancelled"
            ) from None
        cause = _cause(e)
        if cause.startswith(_MISSING):
            raise _missing(exe, cause) from None
        raise WorkerProbeFailed(
            f"the task checking Spark's Python workers ({exe!r}) failed: {cause}"
        ) from None
    finally:
        timer.cancel()
        sc.removeJobTag(tag)
