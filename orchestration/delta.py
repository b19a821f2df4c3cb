"""The one Delta export: a database at a checkpoint, or a sharded table at a snapshot, written as a
Delta table with deltalake. Used by the ``delta_export`` asset and by the demo's export step.

The rows come from a reader pinned to the checkpoint (or from the snapshot's per-shard
checkpoints), so the export is one consistent version whatever writers, compactions or rescales
do meanwhile (SlateDB RFC 0004: checkpoints). Each write overwrites the Delta table; the earlier
versions stay readable by Delta time travel. The commit records where the rows came from in its
``custom_metadata`` (``slatedb.*`` keys).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from slatedb_core import DbReader, ObjectStore, Table, TableSnapshot
from slatedb_core.errors import InvalidArgument
from slatedb_core.options import DbReaderOptions
from slatedb_core.table import TableOptions

Decode = Callable[[pa.RecordBatch], pa.Table | pa.RecordBatch]
"""Turns a batch of (key, value) rows into the rows to export (e.g. JSON values into columns)."""


@dataclass(frozen=True)
class DeltaExport:
    """What one export wrote, measured while it ran and read back from the Delta log."""

    uri: str
    rows: int
    """Rows written (after ``decode``)."""
    bytes: int
    """Arrow bytes of the rows written."""
    version: int
    """The Delta table's version after the commit."""
    files: int
    """Data files of that version."""
    rows_read_back: int
    """Rows deltalake reads in that version: equal to ``rows`` unless something went wrong."""
    commit_metadata: dict[str, str]
    """The ``slatedb.*`` keys recorded in the commit."""


def export_uri(root: str, name: str) -> str:
    """Where the Delta table of ``name`` lives: ``<root>/<name>``; a plain directory is made
    absolute."""
    if "://" in root:
        return f"{root.rstrip('/')}/{name}"
    return str((Path(root) / name).resolve())


def export_to_delta(
    store: ObjectStore,
    source: str | TableSnapshot,
    uri: str,
    *,
    checkpoint: uuid.UUID | None = None,
    decode: Decode | None = None,
    schema: pa.Schema | None = None,
    on_rows: Callable[[int], None] | None = None,
    batch_size: int = 65536,
    options: DbReaderOptions | None = None,
) -> DeltaExport:
    """Write ``source`` as it was at a checkpoint to the Delta table at ``uri`` (overwrite).

    ``source`` is a database path, read at ``checkpoint`` (required), or a :class:`TableSnapshot`
    (every shard at its own checkpoint). Without ``decode`` the Delta table has the (key, value)
    columns the readers return; with it, ``schema`` (required) is the schema ``decode`` produces.
    ``on_rows`` is called with the rows of each batch written (progress). The caller owns the
    checkpoints: they must stay live until this returns. ``options``: how the databases are
    read (their WAL store, SlateDB RFC 0009, and merge operator, RFC 0006); the mode is the
    checkpoint's."""
    from deltalake import CommitProperties, DeltaTable, write_deltalake

    if decode is not None and schema is None:
        raise InvalidArgument("export_to_delta: decode needs the schema it produces")
    counts = {"rows": 0, "bytes": 0}

    def batches(data: pa.RecordBatchReader) -> Iterator[pa.RecordBatch]:
        for kv in data:
            out = kv if decode is None else decode(kv)
            counts["rows"] += out.num_rows
            counts["bytes"] += out.nbytes
            if on_rows is not None:
                on_rows(out.num_rows)
            if isinstance(out, pa.Table):
                yield from out.to_batches()
            else:
                yield out

    def write(data: pa.RecordBatchReader, metadata: dict[str, str]) -> None:
        write_deltalake(
            uri,
            pa.RecordBatchReader.from_batches(schema or data.schema, batches(data)),
            mode="overwrite",
            commit_properties=CommitProperties(custom_metadata=metadata),
        )

    if isinstance(source, TableSnapshot):
        if checkpoint is not None:
            raise InvalidArgument("export_to_delta: a table snapshot names its own checkpoints")
        metadata = {
            "slatedb.table": source.table_path,
            "slatedb.shard_map_id": str(source.shard_map_id),
            "slatedb.checkpoints": ",".join(str(c) for c in source.checkpoints),
        }
        if source.name is not None:
            metadata["slatedb.snapshot"] = source.name
        table_options = TableOptions(reader=options or DbReaderOptions())
        with Table.open(source.table_path, store, table_options, snapshot=source) as table:
            write(table.scan_arrow(batch_size=batch_size), metadata)
    else:
        if checkpoint is None:
            raise InvalidArgument("export_to_delta: a database is exported at a checkpoint")
        with DbReader.open(source, store, checkpoint, options) as reader:
            metadata = {
                "slatedb.database": source,
                "slatedb.checkpoint_id": str(checkpoint),
                "slatedb.manifest_id": str(reader.manifest_id),
            }
            write(reader.scan_arrow(batch_size=batch_size), metadata)
    delta = DeltaTable(uri)
    return DeltaExport(
        uri=uri,
        rows=counts["rows"],
        bytes=counts["bytes"],
        version=delta.version(),
        files=len(delta.file_uris()),
        rows_read_back=delta.to_pyarrow_dataset().count_rows(),
        commit_metadata=metadata,
    )
