"""Byte counts and GC boundaries carry their units in the UI (issue 40, item 10): every
``*_bytes`` integer (kept so Dagster plots it) has a ``*_size`` text beside it for people, and the
durable GC boundaries say what they are (an id of a kind, a time) instead of a bare integer. Also:
every record the maintenance passes leave is filed under its database's partition, so the
Plots tab's by-partition axis and each partition's events are per database (item 10, plots)."""

from __future__ import annotations

import dagster as dg

from devtools.sample_data import write_database
from orchestration.assets import ASSETS, compaction, garbage_collection
from orchestration.jobs import JOBS
from orchestration.metadata import size
from slatedb_core import ObjectStore
from tests.orchestration.conftest import add_partitions


def _records(instance: dg.DagsterInstance, asset: dg.AssetsDefinition) -> list[dg.EventLogRecord]:
    return [
        *instance.fetch_materializations(asset.key, limit=100).records,
        *instance.fetch_observations(asset.key, limit=100).records,
    ]


def _metadata(record: dg.EventLogRecord) -> dict[str, dg.MetadataValue]:
    event = record.asset_materialization or record.asset_observation
    assert event is not None
    return dict(event.metadata)


def _run_passes(resources: dict[str, object], instance: dg.DagsterInstance, *dbs: str) -> None:
    defs = dg.Definitions(assets=ASSETS, jobs=JOBS, resources=resources)
    for db in dbs:
        for job in ("compaction_job", "gc_job", "compaction_job", "gc_job"):
            result = defs.resolve_job_def(job).execute_in_process(
                partition_key=db, instance=instance
            )
            assert result.success


def test_bytes_have_a_readable_size_and_boundaries_say_what_they_are(
    resources: dict[str, object], instance: dg.DagsterInstance, orders: str
) -> None:
    add_partitions(instance, orders)
    _run_passes(resources, instance, orders)
    seen_bytes = 0
    for asset in (compaction, garbage_collection):
        for record in _records(instance, asset):
            md = _metadata(record)
            for key, value in md.items():
                if key.endswith("_bytes"):
                    assert isinstance(value, dg.IntMetadataValue), key
                    human = md.get(key.removesuffix("_bytes") + "_size")
                    assert isinstance(human, dg.TextMetadataValue), (key, sorted(md))
                    assert value.value is not None and human.value == size(value.value)
                    seen_bytes += 1
                if key.endswith("_boundary"):
                    assert not isinstance(value, dg.IntMetadataValue), (key, value)
                    if isinstance(value, dg.TextMetadataValue):
                        assert any(w in value.value for w in (" id ", "not set")), value
    assert seen_bytes >= 6
    gc_md = _metadata(instance.fetch_materializations(garbage_collection.key, limit=1).records[0])
    manifest = gc_md["manifest_boundary"]
    assert isinstance(manifest, dg.TextMetadataValue)
    assert manifest.value.startswith("manifest id ")


def test_every_pass_is_filed_under_its_database(
    store: ObjectStore, resources: dict[str, object], instance: dg.DagsterInstance, orders: str
) -> None:
    write_database(store, "billing", prefix="bill-", l0_ssts=5, rows_per_sst=100)
    add_partitions(instance, orders, "billing")
    _run_passes(resources, instance, orders, "billing")
    for asset in (compaction, garbage_collection):
        records = _records(instance, asset)
        assert {r.partition_key for r in records} == {orders, "billing"}
        for r in records:
            event = r.asset_materialization or r.asset_observation
            assert event is not None and event.partition == r.partition_key
