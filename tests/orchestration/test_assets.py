"""The maintenance assets against real databases in a local store: called directly, and through
``materialize()`` with their checks on an ephemeral instance."""

from __future__ import annotations

import time
from typing import Any

import dagster as dg
import pytest
from deltalake import DeltaTable

from devtools.sample_data import write_database
from orchestration.assets import (
    EXPORT_CHECKPOINT_NAME,
    checkpoint_refresh,
    compaction,
    delta_export,
    garbage_collection,
)
from orchestration.checks import CHECKS
from orchestration.delta import export_uri
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from slatedb_core import DbReader, ObjectStore, admin
from slatedb_core.health import inspect_database
from slatedb_core.lifecycle.destroy import destroy
from tests.orchestration.conftest import add_partitions


def _value(result: dg.MaterializeResult, key: str) -> Any:  # type: ignore[type-arg]
    assert result.metadata is not None
    v = result.metadata[key]
    return v.value if isinstance(v, dg.MetadataValue) else v


def _with(managed: ManagedDatabasesResource, **changes: Any) -> ManagedDatabasesResource:
    return ManagedDatabasesResource(**{**managed.model_dump(), **changes})


def _rows(store: ObjectStore, db: str) -> list[tuple[bytes, bytes]]:
    cp = admin.create_checkpoint(db, store)
    try:
        with DbReader.open(db, store, checkpoint=cp.id) as reader:
            return list(reader.scan())
    finally:
        admin.delete_checkpoint(db, store, cp.id)


def test_compaction_merges_l0_and_keeps_every_row(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    orders: str,
) -> None:
    before_rows = _rows(store, orders)
    ctx = dg.build_asset_context(partition_key=orders)
    result = compaction(context=ctx, store=store_resource, managed=managed)
    assert _value(result, "before_l0_ssts") == 6
    assert _value(result, "l0_ssts") == 0
    assert _value(result, "sorted_runs") >= 1
    assert _value(result, "compactions") >= 1
    assert _value(result, "bytes_in") > _value(result, "bytes_out") > 0
    # 6 flushes of 300 rows overlapping by half: the duplicates are dropped
    assert _value(result, "rows_in") == 1800
    assert _value(result, "rows_out") == len(before_rows)
    assert _rows(store, orders) == before_rows
    again = compaction(context=dg.build_asset_context(partition_key=orders), store=store_resource,
                       managed=managed)
    assert _value(again, "compactions") == 0


def test_materialize_compaction_then_gc_with_checks(
    store: ObjectStore,
    resources: dict[str, object],
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    add_partitions(instance, orders)
    result = dg.materialize(
        [compaction, garbage_collection, *CHECKS[:2], CHECKS[3]],
        partition_key=orders,
        resources=resources,
        instance=instance,
    )
    assert result.success
    gc = next(
        m for m in result.asset_materializations_for_node("garbage_collection")
    ).metadata
    # the writer's checkpoint still pins the L0 SSTs compaction replaced; the manifests and WAL
    # SSTs before it are garbage
    assert gc["manifest_deleted"].value >= 1
    assert gc["wal_deleted"].value >= 1
    assert gc["bytes_freed"].value == sum(
        gc[f"{k}_bytes_freed"].value for k in ("manifest", "wal", "compacted", "compactions")
    ) > 0
    assert gc["manifest_boundary"].value >= 1
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert set(evaluations) == {
        "manifest_and_ssts_intact",
        "l0_under_threshold",
        "boundaries_behind_latest",
    }
    assert all(e.passed for e in evaluations.values()), evaluations
    assert evaluations["manifest_and_ssts_intact"].metadata["missing"].value == 0


def test_l0_check_fails_over_threshold_and_sst_check_names_missing_ssts(
    store: ObjectStore,
    resources: dict[str, object],
    instance: dg.DagsterInstance,
    orders: str,
) -> None:
    add_partitions(instance, orders)
    stored, _ = inspect_database(store, orders)
    victim = f"{orders}/compacted/{stored.manifest.ssts[0].id}.sst"
    store.delete(victim)
    checks_only = dg.define_asset_job(
        "checks_only",
        selection=dg.AssetSelection.checks(*CHECKS[:2]),
    )
    defs = dg.Definitions(
        assets=[compaction, garbage_collection], asset_checks=CHECKS, jobs=[checks_only],
        resources=resources,
    )
    # execute_in_process refuses partition_key= when only checks are selected (Dagster 1.13
    # finds no asset to take the partitions from); the partition tag is what the UI sets.
    result = defs.resolve_job_def("checks_only").execute_in_process(
        tags={"dagster/partition": orders}, instance=instance
    )
    assert result.success  # a failed check is a result, not a step failure
    assert result.get_asset_materialization_events() == []
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert not evaluations["l0_under_threshold"].passed
    assert evaluations["l0_under_threshold"].metadata["l0_ssts"].value == 6
    sst = evaluations["manifest_and_ssts_intact"]
    assert not sst.passed
    assert sst.metadata["missing"].value == 1
    assert victim in sst.metadata["missing_paths"].value


def test_gc_deletes_soft_destroyed_database_past_grace(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
) -> None:
    write_database(store, "legacy", l0_ssts=1, rows_per_sst=100, wal_rows=0)
    destroy("legacy", store, soft=True)
    ctx = dg.build_asset_context(partition_key="legacy")
    result = garbage_collection(context=ctx, store=store_resource, managed=managed)
    assert _value(result, "database_deleted") is True
    assert _value(result, "database_objects_deleted") > 0
    # only the tombstone is left (docs/clones-and-destroy.md)
    assert sorted(m.path for m in store.list("legacy")) == [
        f"legacy/gc/{ns}.boundary" for ns in ("compacted", "compactions", "manifest", "wal")
    ]
    gone = garbage_collection(context=ctx, store=store_resource, managed=managed)
    assert _value(gone, "skipped") == "database not found (already deleted)"


def test_gc_keeps_soft_destroyed_database_within_grace(
    store: ObjectStore, store_resource: ObjectStoreResource, managed: ManagedDatabasesResource
) -> None:
    write_database(store, "legacy", l0_ssts=1, rows_per_sst=100, wal_rows=0)
    destroy("legacy", store, soft=True)
    patient = _with(managed, gc_db_delete_grace="1d")
    result = garbage_collection(
        context=dg.build_asset_context(partition_key="legacy"), store=store_resource,
        managed=patient,
    )
    assert _value(result, "destroyed") is True
    assert _value(result, "database_deleted") is False
    assert any(store.list("legacy/compacted"))


def test_checkpoint_refresh_creates_policies_once(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    orders: str,
) -> None:
    reader_cp = admin.create_checkpoint(orders, store)  # not ours: must survive
    ctx = dg.build_asset_context(partition_key=orders)
    first = checkpoint_refresh(context=ctx, store=store_resource, managed=managed)
    assert (_value(first, "created"), _value(first, "deleted")) == (2, 0)
    names = sorted(c.name or "" for c in admin.list_checkpoints(orders, store) if c.name)
    assert names == ["daily", "retention"]
    second = checkpoint_refresh(context=ctx, store=store_resource, managed=managed)
    assert (_value(second, "created"), _value(second, "refreshed"), _value(second, "deleted")) == (
        0, 0, 0,
    )
    assert _value(second, "managed_checkpoints") == 2
    assert any(c.id == reader_cp.id for c in admin.list_checkpoints(orders, store))


def test_checkpoint_refresh_refreshes_before_expiry(
    store: ObjectStore, store_resource: ObjectStoreResource, managed: ManagedDatabasesResource,
    orders: str,
) -> None:
    from orchestration.resources import CheckpointPolicy

    # refresh once less than 3599 s of the 1 h lifetime remain (expiry is rounded up to whole
    # seconds, so that is true 2 s after creation, never at creation)
    eager = _with(
        managed,
        checkpoints=[CheckpointPolicy(name="retention", lifetime="1h", refresh_before="3599s")],
    )
    ctx = dg.build_asset_context(partition_key=orders)
    checkpoint_refresh(context=ctx, store=store_resource, managed=eager)
    (cp,) = admin.list_checkpoints(orders, store, "retention")
    time.sleep(2.1)
    result = checkpoint_refresh(context=ctx, store=store_resource, managed=eager)
    assert _value(result, "refreshed") == 1
    (after,) = admin.list_checkpoints(orders, store, "retention")
    assert after.id == cp.id
    assert after.expire_time_s is not None and cp.expire_time_s is not None
    assert after.expire_time_s > cp.expire_time_s


def test_delta_export_writes_the_checkpoint_snapshot(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    orders: str,
) -> None:
    expected = _rows(store, orders)
    ctx = dg.build_asset_context(partition_key=orders)
    result = delta_export(context=ctx, store=store_resource, managed=managed)
    assert _value(result, "rows") == len(expected)
    assert _value(result, "snapshot") == "temporary"
    table = DeltaTable(export_uri(managed.export_root, orders))
    data = table.to_pyarrow_table().sort_by("key")
    assert list(zip(data.column("key").to_pylist(), data.column("value").to_pylist(),
                    strict=True)) == expected
    commit = table.history(1)[0]
    assert commit["slatedb.checkpoint_id"] == _value(result, "checkpoint_id")
    # the temporary checkpoint is gone again
    assert admin.list_checkpoints(orders, store, EXPORT_CHECKPOINT_NAME) == []
    # a second export overwrites: new Delta version, same rows
    again = delta_export(context=ctx, store=store_resource, managed=managed)
    assert _value(again, "delta_version") == _value(result, "delta_version") + 1
    assert DeltaTable(export_uri(managed.export_root, orders)).to_pyarrow_table().num_rows == len(
        expected
    )


def test_delta_export_uses_the_named_snapshot_when_configured(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    orders: str,
) -> None:
    ctx = dg.build_asset_context(partition_key=orders)
    checkpoint_refresh(context=ctx, store=store_resource, managed=managed)
    (daily,) = admin.list_checkpoints(orders, store, "daily")
    write_database(store, orders, prefix="late-", l0_ssts=1, rows_per_sst=50, wal_rows=0)
    named = _with(managed, export_checkpoint_name="daily")
    result = delta_export(context=ctx, store=store_resource, managed=named)
    assert _value(result, "snapshot") == "named"
    assert _value(result, "checkpoint_id") == str(daily.id)
    keys = DeltaTable(export_uri(managed.export_root, orders)).to_pyarrow_table().column("key")
    assert not any(k.startswith(b"late-") for k in keys.to_pylist())


def test_corrupt_manifest_fails_with_an_alert(
    store: ObjectStore, store_resource: ObjectStoreResource, managed: ManagedDatabasesResource,
    orders: str,
) -> None:
    stored, _ = inspect_database(store, orders)
    store.put(f"{orders}/manifest/{stored.id:020d}.manifest", b"not a manifest")
    with pytest.raises(dg.Failure) as info:
        compaction(context=dg.build_asset_context(partition_key=orders), store=store_resource,
                   managed=managed)
    assert "SLATEDB ALERT CorruptionError" in str(info.value.description)
    assert info.value.metadata["slatedb_error"].value == "CorruptionError"
