"""Parquet input that the job reads itself, through the object store, so a Spark cluster without
hadoop-aws's jars can ingest from ``s3://`` (infra/README.md).

``spark.read.parquet("s3a://...")`` needs the hadoop-aws and AWS SDK jars on every JVM of the
cluster; pyspark's wheel has neither. For a URL ``open_store`` understands (``s3://bucket/prefix``
with the endpoint and keys from the query or the ``AWS_*`` variables)
the driver lists the ``.parquet`` objects under the prefix and reads the first one's footer for the
schema (two ranged GETs); each Spark task then reads whole objects with one GET each and hands
their row groups to Spark as Arrow batches (``mapInArrow``: no row is ever a Python object).
Credentials reach the executors through their environment, never through the job's arguments.

``s3a://`` paths and plain filesystem paths still go to ``spark.read.parquet``.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from slatedb_core import ObjectStore, open_store
from slatedb_core.errors import InvalidArgument
from slatedb_core.store.redact import redact_url

STORE_SCHEMES = ("s3",)
"""Input URLs read through ``open_store`` (``file://`` and paths: Spark reads those itself)."""
FOOTER_GUESS = 64 * 1024


def is_store_url(path: str) -> bool:
    return urlsplit(path).scheme.lower() in STORE_SCHEMES


def redacted(url: str) -> str:
    """``url`` for messages: the one shared redaction (keys, passwords, txn URLs masked)."""
    return redact_url(url)


def _hidden(name: str) -> bool:
    """A name Spark's file listing skips: ``_temporary``, ``_SUCCESS``, ``.spark-staging-*``,
    ``.part.crc`` (but ``_col=1`` is a partition folder)."""
    return name.startswith(".") or (name.startswith("_") and "=" not in name)


def _store_and_prefix(url: str) -> tuple[ObjectStore, str]:
    """The store at the URL's bucket (with its query: endpoint, region, keys) and the prefix."""
    parts = urlsplit(url)
    prefix = parts.path.strip("/")
    root = urlunsplit((parts.scheme, parts.netloc, "", parts.query, ""))
    return open_store(root), prefix


def parquet_objects(store: ObjectStore, prefix: str) -> list[tuple[str, int]]:
    """``(path, size)`` of every ``.parquet`` object under ``prefix`` (a single object when the
    prefix names one), sorted by path. As Spark's own listing, anything under a ``_``/``.``
    name below the prefix is skipped: markers (``_SUCCESS``) and, above all, the uncommitted
    task outputs of a Spark write (``_temporary/0/...``, ``.spark-staging-*``), which would
    otherwise be read beside the committed copies of the same rows. Partition folders
    (``key=value``) are refused: their column would be lost."""
    if prefix.endswith(".parquet"):
        return [(prefix, store.head(prefix).size)]
    base = f"{prefix}/" if prefix else ""
    found = []
    for meta in store.list(base):
        names = meta.path[len(base) :].split("/")
        if not names[-1].endswith(".parquet") or any(_hidden(n) for n in names):
            continue
        if any("=" in n for n in names[:-1]):
            raise InvalidArgument(
                f"input {meta.path!r} is in a partition folder (key=value): its column would be "
                "lost; read partitioned input through s3a:// (Spark's reader)"
            )
        found.append((meta.path, meta.size))
    return sorted(found)


class _Tail(io.RawIOBase):
    """A read-only file of ``size`` bytes of which only the last ``len(tail)`` are known: enough
    for a Parquet reader that seeks to the footer."""

    def __init__(self, tail: bytes, size: int) -> None:
        self._tail, self._size, self._pos = tail, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        start = self._size - len(self._tail)
        if self._pos < start:
            raise OSError("read before the fetched Parquet footer")
        chunk = self._tail[self._pos - start : self._pos - start + len(buffer)]
        memoryview(buffer)[: len(chunk)] = chunk
        self._pos += len(chunk)
        return len(chunk)


def read_schema(store: ObjectStore, path: str, size: int) -> pa.Schema:
    """The Parquet schema from the file's footer, fetched with one suffix GET (two when the
    footer is larger than ``FOOTER_GUESS``)."""
    if size < 12:
        raise InvalidArgument(f"input {path!r} is {size} bytes: not a Parquet file")
    tail = store.get_suffix(path, min(size, FOOTER_GUESS)).data
    if tail[-4:] != b"PAR1":
        raise InvalidArgument(f"input {path!r} is not a Parquet file (no PAR1 trailer)")
    footer_len = int.from_bytes(tail[-8:-4], "little") + 8
    if footer_len > len(tail):
        if footer_len > size:
            raise InvalidArgument(f"input {path!r}: footer length {footer_len} exceeds the file")
        tail = store.get_suffix(path, footer_len).data
    try:
        return pq.read_schema(pa.PythonFile(_Tail(tail, size), mode="r"))
    except (pa.ArrowInvalid, OSError) as e:
        raise InvalidArgument(f"input {path!r}: unreadable Parquet footer: {e}") from e


def spark_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with the types Spark's Arrow hand-over takes: timestamps in microseconds
    (Parquet writers often store milliseconds; Spark refuses them in ``mapInArrow``); every
    column nullable, as Spark's own Parquet reader makes them (one file's "not null" says
    nothing of the others')."""
    fields = []
    for f in schema:
        if pa.types.is_timestamp(f.type) and f.type.unit != "us":
            f = f.with_type(pa.timestamp("us", tz=f.type.tz))
        fields.append(f.with_nullable(True))
    return pa.schema(fields)


def columns(schema: pa.Schema) -> list[tuple[str, pa.DataType]]:
    """What every input object must agree on: names and types, in order (the types as Spark
    sees them: a string is a string whether large, a view or dictionary-encoded, a timestamp
    is one whatever its unit)."""
    return [(f.name, _logical(f.type)) for f in schema]


def _logical(t: pa.DataType) -> pa.DataType:
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz=t.tz)
    return t


def read_store_parquet(spark: SparkSession, url: str) -> DataFrame:
    """A DataFrame of every Parquet object under ``url``, one Spark task per object."""
    store, prefix = _store_and_prefix(url)
    objects = parquet_objects(store, prefix)
    if not objects:
        raise InvalidArgument(f"input {redacted(url)!r}: no .parquet objects under it")
    file_schema = read_schema(store, *objects[0])
    expected = columns(file_schema)
    schema = spark_schema(file_schema)
    store_url = urlunsplit(urlsplit(url)._replace(path=""))
    paths = [p for p, _ in objects]

    def read_objects(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        task_store = open_store(store_url)
        for batch in batches:
            for i in batch.column(0).to_pylist():
                data = task_store.get(paths[i]).data
                table = pq.read_table(io.BytesIO(data))
                # the same columns as the first object, or nothing: a cast would turn "2.5"
                # into 2.5 or 7 into "7" without a word
                if columns(table.schema) != expected:
                    raise InvalidArgument(
                        f"input {paths[i]!r} has columns {columns(table.schema)}, "
                        f"not those of {paths[0]!r}: {expected}"
                    )
                yield from table.cast(schema).to_batches()

    ids = spark.range(len(paths), numPartitions=len(paths))
    return ids.mapInArrow(read_objects, from_arrow_schema(schema))


def read_input(spark: SparkSession, path: str) -> DataFrame:
    """``s3://`` Parquet is read by the job itself through the object store
    (spark_jobs/parquet_input.py: no hadoop-aws jars needed); anything else goes to Spark's own
    readers (``s3a://`` on clusters that have the jars)."""
    if is_store_url(path):
        return read_store_parquet(spark, path)
    if path.endswith(".csv"):
        return spark.read.option("header", True).option("inferSchema", True).csv(path)
    if path.endswith(".parquet") or path.endswith("/"):
        return spark.read.parquet(path)
    raise InvalidArgument(f"input {path!r}: expected a .parquet or .csv path")
