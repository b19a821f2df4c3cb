"""PySpark's worker daemon, with the workers' modules imported before it forks them.

Spark starts Python workers by forking them from a daemon (``pyspark.daemon``); each forked worker
then imports its worker module and what its task needs. Spark runs them with its
``pyspark.zip`` first on ``PYTHONPATH``, and Python caches no bytecode for modules imported from a
zip: every new worker compiles pyspark's worker modules from source, then imports pyarrow and
slatedb_core, a second or more per worker, paid again by each worker a query starts (finding a
data source's schema, planning its read, one per executor core). Run as the daemon
(``spark.python.daemon.module=spark_jobs.worker_daemon``, set by :mod:`spark_jobs.session`), this
module imports them once; the workers it forks start with them loaded.
"""

from __future__ import annotations

import pyspark.daemon
import pyspark.sql.worker.create_data_source
import pyspark.sql.worker.data_source_pushdown_filters
import pyspark.sql.worker.plan_data_source_read
import pyspark.sql.worker.write_into_data_source
import pyspark.worker

import spark_jobs.datasource

PRELOADED = (
    pyspark.worker,
    pyspark.sql.worker.create_data_source,
    pyspark.sql.worker.data_source_pushdown_filters,
    pyspark.sql.worker.plan_data_source_read,
    pyspark.sql.worker.write_into_data_source,
    spark_jobs.datasource,
)

if __name__ == "__main__":
    pyspark.daemon.manager()
