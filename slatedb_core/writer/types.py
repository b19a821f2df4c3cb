"""Errors, statistics and the Arrow schema of the writer (``Db``, :mod:`slatedb_core.writer.engine`);
re-exported by both."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from slatedb_core.errors import SlateDBError

KV_SCHEMA = pa.schema(
    [pa.field("key", pa.binary(), nullable=False), pa.field("value", pa.binary())]
)


class DbClosed(SlateDBError):
    """The Db was closed; open it again to use it."""


@dataclass(frozen=True, slots=True)
class BulkIngestStats:
    rows: int
    ssts: int
    bytes_written: int
    manifest_id: int
