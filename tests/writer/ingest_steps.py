"""Staging SSTs for ``Db.ingest_ssts`` tests: rows encoded with :func:`slatedb_core.sst.encode_sst`
and put under ``staging/`` of the store the database lives in."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from slatedb_core.sst import ENTRY_SCHEMA, KIND_TOMBSTONE, KIND_VALUE, encode_sst
from slatedb_core.store.objectstore import ObjectStore

Row = tuple[bytes, bytes | None]  # a None value is a tombstone


def sst_bytes(rows: Sequence[Row], seq: int = 1) -> bytes:
    """One SST of ``rows`` (sorted here; keys unique), every entry at ``seq``."""
    rows = sorted(rows)
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([k for k, _ in rows], pa.binary()),
            pa.array([seq] * len(rows), pa.uint64()),
            pa.array([KIND_TOMBSTONE if v is None else KIND_VALUE for _, v in rows], pa.uint8()),
            pa.array([b"" if v is None else v for _, v in rows], pa.binary()),
        ],
        schema=ENTRY_SCHEMA,
    )
    return encode_sst(batch)[0]


def stage(store: ObjectStore, name: str, rows: Sequence[Row], seq: int = 1) -> str:
    path = f"staging/{name}.sst"
    store.put(path, sst_bytes(rows, seq))
    return path


def sst_of_rows(rows: list[tuple[bytes, int, int, bytes]]) -> bytes:
    """An SST of (key, seq, kind, value) rows, in the given order (unsorted or repeated keys
    included: what an ingest is handed, not what it makes)."""
    return encode_sst(
        pa.RecordBatch.from_arrays(
            [
                pa.array([r[0] for r in rows], pa.binary()),
                pa.array([r[1] for r in rows], pa.uint64()),
                pa.array([r[2] for r in rows], pa.uint8()),
                pa.array([r[3] for r in rows], pa.binary()),
            ],
            schema=ENTRY_SCHEMA,
        )
    )[0]
