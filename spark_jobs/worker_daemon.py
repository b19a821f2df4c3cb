"""PySpark's worker daemon, with the workers' modules imported and frozen before it forks them.

Spark starts Python workers by forking them from a daemon (``pyspark.daemon``); each forked worker
then imports its worker module and what its task needs. Spark runs them with its
``pyspark.zip`` first on ``PYTHONPATH``, and Python caches no bytecode for modules imported from a
zip: every new worker compiles pyspark's worker modules from source, then imports pyarrow and
slatedb_core, a second or more per worker, paid again by each worker a query starts (finding a
data source's schema, planning its read, one per executor core). Run as the daemon
(``spark.python.daemon.module=spark_jobs.worker_daemon``, set by :mod:`spark_jobs.session`), this
module imports them once; the workers it forks start with them loaded.

pandas is among them although no task of ours uses it: pyarrow imports it the first time an
Arrow array is made from a numpy one (``pa.array``), which every scan does, so each worker paid
0.3-1 s for it in its first task.

A reused worker runs a full ``gc.collect()`` after every task (``pyspark.daemon``). With these
modules loaded that collection walked ~100k objects, ~110 ms of CPU per task: a quarter of a full
read's 8 tasks' worker time (bench/results/spark_read.txt, run E). :func:`prepare` ends with
``gc.freeze()``, which moves everything the daemon holds to the collector's permanent generation
(the use of ``gc.freeze`` the Python documentation gives for a parent that forks without exec):
a worker's collection then walks only what its own tasks made (~2k objects, ~1.5 ms).
"""

from __future__ import annotations

import gc
from types import ModuleType


def prepare() -> tuple[ModuleType, ...]:
    """Import what every worker runs, then freeze the collector's view of it; the modules."""
    import pyspark.sql.worker.create_data_source
    import pyspark.sql.worker.data_source_pushdown_filters
    import pyspark.sql.worker.plan_data_source_read
    import pyspark.sql.worker.write_into_data_source
    import pyspark.worker

    import spark_jobs.datasource

    loaded: tuple[ModuleType, ...] = (
        pyspark.worker,
        pyspark.sql.worker.create_data_source,
        pyspark.sql.worker.data_source_pushdown_filters,
        pyspark.sql.worker.plan_data_source_read,
        pyspark.sql.worker.write_into_data_source,
        spark_jobs.datasource,
    )
    try:  # the spark extra installs pandas; without it pyarrow has nothing to import either
        import pandas  # type: ignore[import-untyped]
        import pyarrow.pandas_compat
    except ImportError:
        pass
    else:
        loaded += (pandas, pyarrow.pandas_compat)
    gc.collect()  # what is garbage now need not be frozen with the rest
    gc.freeze()
    return loaded


if __name__ == "__main__":
    import pyspark.daemon

    prepare()
    pyspark.daemon.manager()
