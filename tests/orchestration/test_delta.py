"""orchestration.delta.export_to_delta, the one Delta export (the ``delta_export`` asset and the
demo's export step): a database at a checkpoint and a sharded table at a snapshot, on real
databases in a local store, read back with deltalake."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from devtools.sample_data import rows, write_database
from orchestration.delta import export_to_delta, export_uri
from slatedb_core import CheckpointOptions, ObjectStore, Table, admin
from slatedb_core.errors import InvalidArgument


def _kv(table: DeltaTable) -> list[tuple[bytes, bytes]]:
    data = table.to_pyarrow_table().sort_by("key")
    return list(zip(data.column("key").to_pylist(), data.column("value").to_pylist(), strict=True))


def test_a_database_is_exported_as_of_its_checkpoint(store: ObjectStore, tmp_path: Path) -> None:
    write_database(store, "orders", prefix="order-", l0_ssts=2, rows_per_sst=300, wal_rows=0)
    cp = admin.create_checkpoint("orders", store, CheckpointOptions())
    write_database(store, "orders", prefix="late-", l0_ssts=1, rows_per_sst=50, wal_rows=0)
    uri = export_uri(str(tmp_path / "delta"), "orders")

    seen: list[int] = []
    export = export_to_delta(store, "orders", uri, checkpoint=cp.id, on_rows=seen.append)

    table = DeltaTable(uri)
    kv = _kv(table)
    assert all(k.startswith(b"order-") for k, _ in kv)
    assert export.rows == export.rows_read_back == len(kv) == sum(seen) == 450
    assert export.bytes > 0 and export.version == 0 and export.files >= 1
    assert export.uri == uri == str((tmp_path / "delta" / "orders").resolve())
    commit = table.history(1)[0]
    expected = {
        "slatedb.database": "orders",
        "slatedb.checkpoint_id": str(cp.id),
        "slatedb.manifest_id": str(cp.manifest_id),
    }
    assert export.commit_metadata == expected
    assert {k: commit[k] for k in expected} == expected

    again = export_to_delta(store, "orders", uri, checkpoint=cp.id)  # overwrite: a new version
    assert again.version == 1 and again.rows_read_back == export.rows


def test_a_table_is_exported_as_of_its_snapshot_through_decode(
    store: ObjectStore, tmp_path: Path
) -> None:
    with Table.create("events", store, split_points=[b"event-00000100"]) as table:
        for shard in table.shards:
            with table.writer(shard) as db:
                db.put_arrow(rows("event-", 0 if shard.index == 0 else 100, 100))
                db.flush_memtable()
        snap = table.snapshot(name="daily")
        with table.writer(1) as db:  # after the snapshot: not exported
            db.put_arrow(rows("event-", 200, 50))
            db.flush_memtable()
    schema = pa.schema([("id", pa.string()), ("value_bytes", pa.int32())])

    def decode(kv: pa.RecordBatch) -> pa.Table:
        return pa.Table.from_arrays(
            [pc.cast(kv.column(0), pa.string()), pc.binary_length(kv.column(1))], schema=schema
        )

    uri = export_uri(str(tmp_path / "delta"), "events")
    export = export_to_delta(store, snap, uri, decode=decode, schema=schema)

    delta = DeltaTable(uri)
    data = delta.to_pyarrow_table()
    assert data.schema == schema
    assert sorted(data.column("id").to_pylist()) == [f"event-{i:08d}" for i in range(200)]
    assert export.rows == export.rows_read_back == 200
    commit = delta.history(1)[0]
    assert commit["slatedb.table"] == "events"
    assert commit["slatedb.shard_map_id"] == str(snap.shard_map_id)
    assert commit["slatedb.checkpoints"] == ",".join(str(c) for c in snap.checkpoints)
    assert commit["slatedb.snapshot"] == "daily"


def test_the_snapshot_to_read_must_be_named(store: ObjectStore, tmp_path: Path) -> None:
    write_database(store, "orders", l0_ssts=1, rows_per_sst=10, wal_rows=0)
    uri = str(tmp_path / "delta")
    with pytest.raises(InvalidArgument, match="at a checkpoint"):
        export_to_delta(store, "orders", uri)
    with Table.create("events", store) as table:
        snap = table.snapshot()
    with pytest.raises(InvalidArgument, match="names its own checkpoints"):
        export_to_delta(store, snap, uri, checkpoint=uuid.uuid4())
    with pytest.raises(InvalidArgument, match="schema"):
        export_to_delta(store, snap, uri, decode=lambda kv: kv)
    assert not (tmp_path / "delta").exists()
