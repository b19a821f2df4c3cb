"""A SlateDB data source whose read fails once, after its first batch, as a lost executor would
(review 53): Spark retries the task, and the query must hold each row once.

The failure is armed by a file ``FLAKY_MARKER`` in the table's directory (the read's ``url`` is a
``file://`` URL); the first task to find it deletes it and fails, so exactly one task attempt
fails whatever the partitions' order. Spark pickles the class to its Python workers by value
(``register_pickle_by_value``), so they need not import the tests package."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from spark_jobs.datasource import SlateDBDataSource
from spark_jobs.datasource_read import SlateDBReader

FLAKY_MARKER = "fail-one-read-task"


class _FlakyReader(SlateDBReader):
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The partition's batches; the first task to find the marker fails after one batch."""
        marker = Path(urlparse(self.options.url).path) / FLAKY_MARKER
        for i, b in enumerate(super().read(partition)):
            yield b
            if i == 0:
                try:
                    marker.unlink()
                except FileNotFoundError:
                    continue
                raise RuntimeError("review 53: an injected read task failure")


class FlakySlateDBDataSource(SlateDBDataSource):
    """``slatedb`` reads whose first task to find ``FLAKY_MARKER`` fails after a batch."""

    @classmethod
    def name(cls) -> str:
        """The format name the tests read with."""
        return "slatedb_flaky"

    def reader(self, schema: StructType) -> DataSourceReader:
        """A reader that fails once (see the module doc)."""
        super().reader(schema)  # the format's checks of the options
        return _FlakyReader(self.options, schema)
