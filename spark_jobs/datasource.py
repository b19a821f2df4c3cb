"""``format("slatedb")``: a sharded table as a Spark data source (PySpark's Python Data Source
API, ``pyspark.sql.datasource``). Register it once per session::

    from spark_jobs.datasource import SlateDBDataSource
    spark.dataSource.register(SlateDBDataSource)

    (df.write.format("slatedb")
       .option("url", "file:///data/lake").option("path", "orders")
       .option("key", "order_id")                  # string (UTF-8) or binary
       .option("value", "payload")                 # optional binary/string column
       .option("app_id", "loader").option("batch_version", 42)   # optional: exactly once
       .mode("append")                             # append (upsert by key) | overwrite
       .save())
    spark.read.format("slatedb").option("url", ...).option("path", "orders").load()
    # a database's change feed (spark_jobs.changes_source, docs/changes.md "Spark"):
    spark.readStream.format("slatedb").option("url", ...).option("path", "orders-db").load()
    spark.read.format("slatedb").option(...).option("changes_since", "earliest").load()

What each option does (docs/spark.md has the whole story):

=====================  ============================================================================
``url``                the object store (``file://``, ``s3://``, not ``memory://``: refused)
``path``               the table's path inside the store
``key``                write: the key column, string (stored as UTF-8) or binary
``value``              write: the value column, binary or string. Without it, every other column
                       is encoded into the value per row (``value_format``) and the table records
                       those columns (:class:`~slatedb_core.ValueEncoding`): reads return them
``value_format``       ``json`` (default) or ``arrow``, as ``spark_jobs.ingest`` and the CLI
``tombstone``          write: a boolean column; true deletes the row's key
``split_points``       write: comma-separated UTF-8 keys, only when the write creates the table
``app_id``,            write: exactly-once batches (Delta's transaction app id and version): a
``batch_version``      write whose version is at or below the last one a shard committed for the
                       app is skipped on that shard, decided atomically with the shard's commit
``mode``               write: ``error`` / ``errorifexists`` / ``ignore`` (Spark 4.3 refuses
                       ``.mode("error")`` and ``.mode("ignore")`` for every Python data source, so
                       these two travel as an option, with ``.mode("append")``)
``task_memory_bytes``  what a task may take in its Python worker (default 512 MiB, at least 4
                       MiB; spark_jobs.write_tasks.TASK_MEMORY_BYTES), whatever its rows. Write:
                       the task stages its rows in runs of a fifth of it (each run one more L0
                       SST per shard). Read: its scan holds a sixteenth of it in SST bytes
                       fetched at once (spark_jobs.datasource_read)
``run_bytes``          write: input bytes a task sorts at once (default: ``task_memory_bytes / 5``)
``ttl_column``         write: an integer column, each row's TTL in ms (SlateDB RFC 0003: the row
                       stores ``expire_ts`` = the write's time + TTL); null: ``ttl``, else none
``ttl``                write: the TTL in ms of every row without one of its own
``checkpoint``         read: the name of a table snapshot (``Table.snapshot(name=...)``)
``wal_url``            the shards' separate WAL store (SlateDB's ``with_wal_object_store``, RFC
                       0009), a store URL like ``url``; never shown. Write (append): the shard
                       writers keep their WAL there. Read: the query's snapshot and its tasks find
                       the WAL there; without it such a shard fails the query (``WalStoreMissing``)
``merge_operator``     read: the merge operator the shards' writers use (SlateDB RFC 0006), a
                       built-in name (``add_int64``, ``string_append``): operands are folded with
                       it; without it a key holding operands fails the query
                       (``MergeOperatorMissing``, naming the key)
=====================  ============================================================================

Writes are the staged-SST ingest of :mod:`spark_jobs.ingest` (see its module doc for why retries
and speculative attempts are safe), with the commit moved to the driver: tasks stage SSTs and
return references (:class:`~spark_jobs.datasource_write.StagedRefs`); ``commit()`` commits each
shard once through its fenced writer; ``abort()`` deletes what the run staged. ``overwrite``
builds new databases and swaps them in with one shard-map commit (docs/overwrite.md). Streams
(``df.writeStream.format("slatedb")``) do the same per micro-batch, with the query's id as app
id and the batch id as version, so a restarted query never applies a micro-batch twice.

Options are checked on the driver, before any task runs; a bad one raises
:class:`~slatedb_core.errors.InvalidArgument` naming it, and nothing is written. So does one the
read or write does not take (:func:`~spark_jobs.datasource_options.check_option_names`, with the
closest known name: a misspelt ``checkpoint`` must not read the latest state).
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from slatedb_core.errors import InvalidArgument
from spark_jobs.changes_source import (
    SPARK_CHANGE_SCHEMA,
    ChangesBatchReader,
    ChangesStreamReader,
    holds_database,
    wants_changes,
)
from spark_jobs.datasource_options import WriteOptions
from spark_jobs.datasource_read import SlateDBReader, check_read_options, read_schema
from spark_jobs.datasource_write import (
    SlateDBBatchWriter,
    SlateDBStreamWriter,
    plan_write,
)
from spark_jobs.shared_store import refuse_process_store
from spark_jobs.worker_python import ensure_worker_python

__all__ = ["PUSHDOWN_CONF", "SlateDBDataSource"]

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


class SlateDBDataSource(DataSource):
    """The ``slatedb`` format (see the module doc)."""

    @classmethod
    def name(cls) -> str:
        """ "slatedb". Called by ``spark.dataSource.register`` in the driver's process, where it
        also turns on Spark's filter pushdown for Python data sources when the session leaves it
        unset (:data:`PUSHDOWN_CONF`: off by default in Spark 4.3, and Spark then refuses every
        reader that pushes filters, ours included). A session that sets it to false cannot read
        the format. It also makes the session's Python workers run an interpreter that has the
        package, or raises :class:`~spark_jobs.worker_python.WorkerPythonMissing` saying how to
        set one (:func:`~spark_jobs.worker_python.ensure_worker_python`)."""
        session = SparkSession.getActiveSession()
        if session is not None and session.conf.get(PUSHDOWN_CONF, None) in (None, ""):
            session.conf.set(PUSHDOWN_CONF, "true")
        if session is not None:
            ensure_worker_python()
        return "slatedb"

    def schema(self) -> StructType:
        _refuse_process_store(self.options)
        if wants_changes(self.options):  # a database's change feed (spark_jobs.changes_source)
            return SPARK_CHANGE_SCHEMA
        try:
            check_read_options(self.options)
        except InvalidArgument:
            if holds_database(self.options):
                return SPARK_CHANGE_SCHEMA
            raise
        return read_schema(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        _refuse_process_store(self.options)
        if wants_changes(self.options) or schema == SPARK_CHANGE_SCHEMA:
            return ChangesBatchReader(self.options)
        check_read_options(self.options)
        return SlateDBReader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """``spark.readStream.format("slatedb")``: a database's or a sharded table's change
        feed. A table's path with no option of a read of changes was given a table read's
        schema (:meth:`schema`): refused, naming the option that asks for its changes."""
        _refuse_process_store(self.options)
        if schema != SPARK_CHANGE_SCHEMA and not wants_changes(self.options):
            raise InvalidArgument(
                "a stream of a sharded table's changes needs option 'starting' ('earliest', "
                "'latest' or a table cursor): without it the path is read as the table's rows"
            )
        return ChangesStreamReader(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        _refuse_process_store(self.options)
        return SlateDBBatchWriter(plan_write(WriteOptions.parse(self.options, schema, overwrite)))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        _refuse_process_store(self.options)
        return SlateDBStreamWriter(
            plan_write(WriteOptions.parse(self.options, schema, overwrite, stream=True))
        )


def _refuse_process_store(options: Mapping[str, str]) -> None:
    """Every entry point Spark calls refuses a ``memory://`` ``url`` or ``wal_url``
    (:mod:`spark_jobs.shared_store`)."""
    for name in ("url", "wal_url"):
        refuse_process_store(options.get(name), f"option {name!r}")
