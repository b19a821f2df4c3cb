"""The write options of ``format("slatedb")`` (:mod:`spark_jobs.datasource`), parsed and checked
on the driver before any task runs: a bad option raises InvalidArgument naming it."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from slatedb_core import ValueEncoding
from slatedb_core.errors import CatalogOptionsMissing, InvalidArgument
from slatedb_core.options import DbOptions
from slatedb_core.table.ingest_txn import check_txn
from slatedb_core.table.shardmap import check_split_points
from slatedb_core.writer.ttl import NoExpiry, check_ttl
from spark_jobs.value_columns import payload_schema as value_payload_schema
from spark_jobs.write_tasks import TASK_MEMORY_BYTES, check_task_memory, run_bytes_of

__all__ = [
    "MODES",
    "SPARK_TABLE_PROPERTIES",
    "WriteOptions",
    "check_option_names",
    "user_option_names",
]

MODES = ("append", "overwrite", "error", "errorifexists", "ignore")
"""Save modes: Spark's ``.mode()`` passes append or overwrite; the ``mode`` option the others."""
_VALUE_FORMATS = ("json", "arrow")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_KNOWN = frozenset(
    {
        "url",
        "path",
        "key",
        "value",
        "value_format",
        "tombstone",
        "split_points",
        "app_id",
        "batch_version",
        "mode",
        "run_bytes",
        "task_memory_bytes",
        "checkpointlocation",
        "checkpoint",
        "ttl_column",
        "ttl",
        "wal_url",
    }
)
"""Every option a write reads (``checkpoint`` belongs to reads and is refused on writes)."""


SPARK_TABLE_PROPERTIES = frozenset(
    {"comment", "collation", "location", "provider", "owner", "external", "is_managed_location"}
)
"""The properties Spark's catalog adds to a table (its reserved ``TableCatalog`` properties).
PySpark 4.3 hands them, with the table's TBLPROPERTIES and a copy of each OPTION as
``option.<name>``, to ``schema()`` when ``CREATE TABLE ... USING slatedb`` infers the columns
(``location`` is also passed as ``path``). ``provider`` is there in every such call."""
_OPTION_PREFIX = "option."
_SPARK_STREAM_OPTIONS = frozenset({"checkpointlocation"})
"""Options Spark's streaming itself reads: ``writeStream.toTable(name)`` into a catalog table
hands the writer only these (without the table's OPTIONS)."""


def user_option_names(options: Mapping[str, object]) -> list[str]:
    """The names of the options the user gave, without those Spark adds itself: ``__``-prefixed
    names, and in a call from Spark's catalog (``provider`` is set, see
    :data:`SPARK_TABLE_PROPERTIES`) everything but the table's OPTIONS (its ``option.<name>``
    copies; the reserved properties and TBLPROPERTIES are Spark's business, not ours)."""
    names = [k for k in options if not k.startswith("__")]
    if not any(k.lower() == "provider" for k in names):
        return names
    given = {k[len(_OPTION_PREFIX) :] for k in names if k.lower().startswith(_OPTION_PREFIX)}
    if not given and not any(k.lower() in SPARK_TABLE_PROPERTIES - {"provider"} for k in names):
        # no OPTIONS copies and none of the properties the catalog adds beside ``provider``
        # (``owner`` is in every call it makes): a direct call whose user gave a ``provider``
        # option, and whose every name is the user's (issue 40 adversarial review)
        return names
    return [k for k in names if k in given]


def check_option_names(options: Mapping[str, object], known: frozenset[str], what: str) -> None:
    """Refuse an option ``what`` (a read, a write) does not take: InvalidArgument naming it, the
    closest known name (a misspelt ``checkpoint`` must not read the latest state silently) and
    every known one. Spark hands the options over case-insensitively, as are the names here
    (``known`` is lower case); names Spark adds itself are not the user's
    (:func:`user_option_names`). No options at all (or only a stream's ``checkpointLocation``) is
    what Spark's catalog hands over for a table used by name:
    :class:`~slatedb_core.errors.CatalogOptionsMissing`, saying what works. Used by
    both the read and the write option parsers."""
    if all(k.startswith("__") or k.lower() in _SPARK_STREAM_OPTIONS for k in options):
        raise CatalogOptionsMissing(_no_options(what))
    unknown = sorted(
        {k for k in user_option_names(options) if k.lower() not in known}, key=str.lower
    )
    if not unknown:
        return
    named = []
    for name in unknown:
        close = difflib.get_close_matches(name.lower(), sorted(known), n=1)
        named.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    plural = "s" if len(named) > 1 else ""
    raise InvalidArgument(
        f"unknown option{plural} {', '.join(named)}: {what} takes {', '.join(sorted(known))}"
    )


def _no_options(what: str) -> str:
    """One line: no options reached the data source, why that happens, and what works."""
    if "stream" in what:
        instead = "df.writeStream.format('slatedb').option('url', ...).option('path', ...)"
        instead += ".option('key', ...).start()"
    elif "write" in what:
        instead = "df.write.format('slatedb').option('url', ...).option('path', ...)"
        instead += ".option('key', ...).save()"
    else:
        instead = "spark.read.format('slatedb').option('url', ...).option('path', ...).load()"
    return (
        f"{what} of format('slatedb') got no options, so the store and the table are unknown; "
        "for a table used by name (SELECT, spark.table, INSERT INTO, insertInto, CREATE TABLE "
        "... AS SELECT, writeStream.toTable), Spark's catalog did not pass the table's OPTIONS "
        "to the data source (PySpark 4.3 passes none to a Python data source): "
        f"use {instead} instead"
    )


def _opt(options: Mapping[str, str], name: str) -> str | None:
    v = options.get(name)
    if v is None:
        return None
    if not isinstance(v, str):
        raise InvalidArgument(f"option {name!r} must be text, got {type(v).__name__}")
    return v


def _required(options: Mapping[str, str], name: str, what: str) -> str:
    v = _opt(options, name)
    if v is None or not v.strip():
        raise InvalidArgument(f"option {name!r} is required: {what}")
    return v


def _column(schema: StructType, option: str, name: str, kinds: tuple[type, ...]) -> None:
    if name not in schema.names:
        raise InvalidArgument(f"option {option!r}: no column {name!r} in {schema.names}")
    t = schema[name].dataType
    if not isinstance(t, kinds):
        allowed = " or ".join(k.__name__.removesuffix("Type").lower() for k in kinds)
        raise InvalidArgument(
            f"option {option!r}: column {name!r} must be {allowed}, got {t.simpleString()}"
        )


def _int(options: Mapping[str, str], name: str) -> int | None:
    v = _opt(options, name)
    if v is None:
        return None
    # decimal ASCII digits only: int() also takes "1_0" and other scripts' digits
    if _INTEGER.fullmatch(v.strip()) is None:
        raise InvalidArgument(f"option {name!r} must be an integer, got {v!r}")
    return int(v)


@dataclass(frozen=True)
class WriteOptions:
    """A checked write (see :mod:`spark_jobs.datasource` for each option)."""

    url: str
    path: str
    key: str
    value: str | None
    value_format: str
    payload: tuple[str, ...]
    """The columns encoded into each value (none with ``value``)."""
    payload_schema: str | None
    """Their StructType as JSON, recorded by the table (ValueEncoding)."""
    tombstone: str | None
    split_points: tuple[bytes, ...] | None
    app_id: str | None
    batch_version: int | None
    mode: str
    run_bytes: int
    """Input bytes a task sorts at once: option ``run_bytes``, else ``task_memory_bytes / 5``."""
    checkpoint_location: str | None
    stream: bool = False
    """A stream: its batches' versions are their batch ids (no ``batch_version``)."""
    wal_url: str | None = field(default=None, repr=False)
    """The shards' separate WAL store (SlateDB RFC 0009, ``DbOptions.wal_url``): option
    ``wal_url``, a store URL; never shown (it may carry credentials)."""
    ttl_column: str | None = None
    """The column of each row's TTL in ms (SlateDB RFC 0003; null: ``ttl_ms``, else none)."""
    ttl_ms: int | NoExpiry | None = None
    """The TTL in ms of every row without one of its own (option ``ttl``)."""
    task_memory_bytes: int = TASK_MEMORY_BYTES
    """What a task's rows may take in its Python worker (option ``task_memory_bytes``;
    :data:`spark_jobs.write_tasks.TASK_MEMORY_BYTES`): sets the run size."""

    def __post_init__(self) -> None:
        check_task_memory("option 'task_memory_bytes'", self.task_memory_bytes)
        if type(self.run_bytes) is not int or self.run_bytes < 1:
            raise InvalidArgument(f"option 'run_bytes' must be >= 1, got {self.run_bytes!r}")

    @property
    def db_options(self) -> DbOptions | None:
        """The shard writers' options this write needs: the WAL store, if any."""
        return None if self.wal_url is None else DbOptions(wal_url=self.wal_url)

    @property
    def encoding(self) -> ValueEncoding | None:
        if self.payload_schema is None:
            return None
        return ValueEncoding(self.value_format, self.payload_schema)

    @classmethod
    def parse(
        cls,
        options: Mapping[str, str],
        schema: StructType,
        overwrite: bool,
        *,
        stream: bool = False,
    ) -> WriteOptions:
        check_option_names(options, _KNOWN, "a stream write" if stream else "a write")
        if _opt(options, "checkpoint") is not None:
            raise InvalidArgument("option 'checkpoint' names a snapshot to read; writes take none")
        url = _required(options, "url", "the object store URL, e.g. file:///data/lake")
        path = _required(options, "path", "the table's path inside the store")
        key = _required(options, "key", "the key column (string or binary)")
        _column(schema, "key", key, (StringType, BinaryType))
        mode = (_opt(options, "mode") or ("overwrite" if overwrite else "append")).lower()
        if mode not in MODES:
            raise InvalidArgument(f"option 'mode' must be one of {MODES}, got {mode!r}")
        if overwrite and mode != "overwrite":
            raise InvalidArgument(f"option 'mode' is {mode!r} but Spark's mode is overwrite")
        if stream and mode != "append":
            raise InvalidArgument(f"option 'mode': a stream appends, got {mode!r}")
        mode = "error" if mode == "errorifexists" else mode
        tombstone = _opt(options, "tombstone")
        if tombstone is not None:
            _column(schema, "tombstone", tombstone, (BooleanType,))
            if tombstone == key:
                raise InvalidArgument("option 'tombstone' names the key column")
        ttl_column = _opt(options, "ttl_column")
        if ttl_column is not None:
            _column(schema, "ttl_column", ttl_column, (LongType, IntegerType, ShortType, ByteType))
            if ttl_column in (key, tombstone):
                raise InvalidArgument("option 'ttl_column' names the key or tombstone column")
        try:
            ttl_ms = check_ttl("ttl", _int(options, "ttl"))
        except InvalidArgument as e:
            raise InvalidArgument(f"option 'ttl': {e}") from None
        value = _opt(options, "value")
        fmt = _opt(options, "value_format")
        if value is not None:
            _column(schema, "value", value, (BinaryType, StringType))
            if value in (key, tombstone, ttl_column):
                raise InvalidArgument(
                    f"option 'value' names the key, tombstone or TTL column {value!r}"
                )
            if fmt is not None:
                raise InvalidArgument("option 'value_format' encodes columns; with 'value' none")
            payload: tuple[str, ...] = ()
            payload_schema = None
            fmt = "binary"
        else:
            fmt = (fmt or "json").lower()
            if fmt not in _VALUE_FORMATS:
                raise InvalidArgument(
                    f"option 'value_format' must be one of {_VALUE_FORMATS}, got {fmt!r}"
                )
            payload = tuple(c for c in schema.names if c not in (key, tombstone, ttl_column))
            if not payload:
                raise InvalidArgument(
                    "option 'value' is missing and there is no other column to encode into values"
                )
            payload_schema = value_payload_schema(schema, payload)
        splits_text = _opt(options, "split_points")
        splits = None
        if splits_text is not None:
            parts = splits_text.split(",")
            if any(not p for p in parts):
                raise InvalidArgument(f"option 'split_points': empty key in {splits_text!r}")
            try:
                splits = check_split_points([p.encode() for p in parts])
            except InvalidArgument as e:
                raise InvalidArgument(f"option 'split_points': {e}") from None
        app_id = _opt(options, "app_id")
        batch_version = _int(options, "batch_version")
        if stream and batch_version is not None:
            raise InvalidArgument("option 'batch_version': a stream's version is its batch id")
        try:  # a stream's version is its batch id: only the app id is checked here
            check_txn(app_id, 0 if stream and app_id is not None else batch_version)
        except InvalidArgument as e:
            raise InvalidArgument(f"options 'app_id'/'batch_version': {e}") from None
        wal_url = _opt(options, "wal_url")
        if wal_url is not None and not wal_url.strip():
            raise InvalidArgument("option 'wal_url' must be a store URL, got an empty string")
        if wal_url is not None and mode == "overwrite":
            raise InvalidArgument(
                "option 'wal_url': an overwrite builds new databases, which keep their WAL in "
                "the main store; append to a table whose shards have a WAL store"
            )
        run_bytes = _int(options, "run_bytes")
        if run_bytes is not None and run_bytes < 1:
            raise InvalidArgument(f"option 'run_bytes' must be >= 1, got {run_bytes}")
        task_memory = _int(options, "task_memory_bytes")
        task_memory = TASK_MEMORY_BYTES if task_memory is None else task_memory
        check_task_memory("option 'task_memory_bytes'", task_memory)
        return cls(
            url=url,
            path=path,
            key=key,
            value=value,
            value_format=fmt,
            payload=payload,
            payload_schema=payload_schema,
            tombstone=tombstone,
            split_points=splits,
            app_id=app_id,
            batch_version=batch_version,
            mode=mode,
            run_bytes=run_bytes or run_bytes_of(task_memory),
            checkpoint_location=_opt(options, "checkpointlocation"),
            stream=stream,
            wal_url=wal_url,
            ttl_column=ttl_column,
            ttl_ms=ttl_ms,
            task_memory_bytes=task_memory,
        )
