"""Helpers of the compaction data-model tests (issue 38, items 1-3): SlateDB's engine with a
merge operator, merge operands and snapshots, and the rows of SSTs read with their timestamps.

The merge operator is string append on both sides: SlateDB's through its Python binding
(:class:`Append`), ours the built-in ``"string_append"`` (the same function)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import slatedb.uniffi as sdb  # type: ignore[import-untyped]

from slatedb_core.lsm.merge_operator import string_append
from slatedb_core.lsm.row_model import ROW_SCHEMA, widen
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.sst.reader import SstReader
from slatedb_core.store.objectstore import ObjectStore
from tests.interop.oracle import DB, Oracle, SlateReader, SlateWriter, settings

Row = tuple[bytes, int, int, bytes | None, int | None, int | None]
"""key, seq, kind, value (None for a tombstone), expire_ts, create_ts."""


class Append(sdb.MergeOperator):  # type: ignore[misc]
    """SlateDB's side of ``string_append``."""

    def merge(self, key: bytes, existing_value: bytes | None, operand: bytes) -> bytes:
        return string_append(key, existing_value, operand)


def open_merge_db(oracle: Oracle, *, compactor: bool = False, **extra: Any) -> SlateWriter:
    """SlateDB's Db with the append operator (its compactor off unless ``compactor``)."""
    builder = sdb.DbBuilder(DB, oracle.store())
    builder.with_settings(settings(compactor=compactor, **extra))
    builder.with_merge_operator(Append())
    writer = SlateWriter(oracle, oracle.run(builder.build()))
    oracle._open.append(writer.db.shutdown)  # closed with the oracle, like open_db's handles
    return writer


def open_merge_reader(oracle: Oracle) -> SlateReader:
    """SlateDB's DbReader (its managed checkpoint) with the append operator."""
    builder = sdb.DbReaderBuilder(DB, oracle.store())
    builder.with_merge_operator(Append())
    reader = SlateReader(oracle, oracle.run(builder.build()))
    oracle._open.append(reader.reader.shutdown)
    return reader


def merge(w: SlateWriter, key: bytes, operand: bytes) -> None:
    """A durable merge operand."""

    async def run() -> None:
        handle = await w.db.merge(key, operand)
        await handle.await_durable()

    w.oracle.run(run())


def snapshot_get(oracle: Oracle, snap: sdb.DbSnapshot) -> Callable[[bytes], bytes | None]:
    def get(key: bytes) -> bytes | None:
        value: bytes | None = oracle.run(snap.get(key))
        return value

    return get


def rows_batch(rows: list[Row]) -> pa.RecordBatch:
    """``rows`` as one ``ROW_SCHEMA`` batch."""
    names = ROW_SCHEMA.names
    return pa.RecordBatch.from_pydict(
        {n: [r[i] for r in rows] for i, n in enumerate(names)}, schema=ROW_SCHEMA
    )


def batch_rows(b: pa.RecordBatch) -> list[Row]:
    """The rows of a batch (either schema) as :data:`Row` tuples."""
    return _rows(pa.Table.from_batches([widen(b)]))


def sst_rows(store: ObjectStore, path: str) -> list[Row]:
    """Every row (all versions, as written) of the SST at ``path``, with its timestamps."""
    reader = SstReader.open(store, path)
    return _rows(reader.read_all(timestamps=True))


def _rows(table: pa.Table) -> list[Row]:
    d = table.to_pydict()
    return [
        (
            d["key"][i],
            d["seq"][i],
            d["kind"][i],
            None if d["kind"][i] == 1 else d["value"][i],
            d["expire_ts"][i],
            d["create_ts"][i],
        )
        for i in range(table.num_rows)
    ]


def tree_rows(store: ObjectStore, db: str = DB) -> dict[str, list[Row]]:
    """The rows of every SST of the latest manifest: ``"l0"`` and ``"run <id>"``."""
    m = ManifestStore(store, db).read_latest().manifest
    out: dict[str, list[Row]] = {"l0": []}
    for v in m.l0:
        out["l0"] += sst_rows(store, f"{db}/compacted/{v.sst_id}.sst")
    for r in m.compacted:
        out[f"run {r.id}"] = [
            row for v in r.views for row in sst_rows(store, f"{db}/compacted/{v.sst_id}.sst")
        ]
    return out
