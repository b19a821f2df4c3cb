"""Spark jobs on slatedb_core's public API: how data reaches the store, and how it scales out.
Spark wiring only: the protocols they run live in slatedb_core (the batch ingest and its
exactly-once commit in :mod:`slatedb_core.table.ingest`, distributed compaction in
:mod:`slatedb_core.compactor.distributed`, the manifest arithmetic in
:mod:`slatedb_core.manifest.projection`).

* :mod:`spark_jobs.ingest`: upsert a DataFrame (or a Parquet/CSV path) into a sharded table,
  sorted SSTs staged per input partition, one fenced commit per shard (task code in
  :mod:`spark_jobs.write_tasks`), safe under task retries and speculative execution;
* :mod:`spark_jobs.read`: a table (or a snapshot of it) as a DataFrame, one partition per SST;
* :mod:`spark_jobs.compact`: compaction of a large database (or of every shard of a table) as
  key-range subcompaction tasks, committed by the driver under the compactor epoch;
* :mod:`spark_jobs.routing`: Spark's hash partitioning reproduced (shard -> partition key);
* :mod:`spark_jobs.session`: a SparkSession bound to 127.0.0.1.

Command lines: ``python -m spark_jobs {ingest,read,compact} --help`` (or each module with
``python -m`` / ``spark-submit``). Nothing here is imported eagerly: importing the package does
not start or even import Spark.
"""
