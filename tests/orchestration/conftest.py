"""Fixtures for the orchestration tests: a local store in tmp_path with real databases, the two
resources pointing at it, and an ephemeral Dagster instance with the database partitions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from devtools.sample_data import write_database
from orchestration.partitions import DATABASES
from orchestration.resources import CheckpointPolicy, ManagedDatabasesResource, ObjectStoreResource
from slatedb_core import ObjectStore


@pytest.fixture
def store_resource(tmp_path: Path) -> ObjectStoreResource:
    return ObjectStoreResource(url=(tmp_path / "store").as_uri())


@pytest.fixture
def store(store_resource: ObjectStoreResource) -> ObjectStore:
    return store_resource.open()


@pytest.fixture
def managed(tmp_path: Path) -> ManagedDatabasesResource:
    return ManagedDatabasesResource(
        discover_prefix="",
        l0_max_ssts=4,
        wal_backlog_max=64,
        manifest_lag_max=1000,
        gc_min_age="0s",
        gc_db_delete_grace="0s",
        checkpoints=[
            CheckpointPolicy(name="retention", lifetime="1h"),
            CheckpointPolicy(name="daily", lifetime="8d", every="1d", retain="7d"),
        ],
        export_root=str(tmp_path / "delta"),
        split_bytes=200_000,
        merge_bytes=60_000,
    )


@pytest.fixture
def orders(store: ObjectStore) -> str:
    """A database with 6 L0 SSTs (over the threshold of 4)."""
    write_database(store, "orders", prefix="order-", l0_ssts=6, rows_per_sst=300)
    return "orders"


@pytest.fixture
def resources(
    store_resource: ObjectStoreResource, managed: ManagedDatabasesResource
) -> dict[str, object]:
    return {"store": store_resource, "managed": managed}


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.DagsterInstance.ephemeral() as inst:
        yield inst


def add_partitions(instance: dg.DagsterInstance, *keys: str) -> None:
    instance.add_dynamic_partitions(DATABASES, list(keys))


@pytest.fixture
def persistent_instance() -> Iterator[dg.DagsterInstance]:
    """A Dagster instance a schedule or sensor context can reopen from its reference (an
    ephemeral one has none)."""
    with dg.instance_for_test() as instance:
        yield instance
