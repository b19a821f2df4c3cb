"""slatedb_core.health: the read-only figures the orchestration acts on, on real databases."""

from __future__ import annotations

from datetime import timedelta

from devtools.sample_data import write_database
from slatedb_core import ObjectStore, admin, run_gc_once
from slatedb_core.health import (
    check_boundaries,
    inspect_database,
    latest_ids,
    list_databases,
    missing_ssts,
    read_boundaries,
    split_key,
)
from slatedb_core.keys import KeyRange
from slatedb_core.layout import boundary_path
from slatedb_core.options import GarbageCollectorOptions


def test_list_databases_finds_nested_paths_only_with_manifests(store: ObjectStore) -> None:
    write_database(store, "a", l0_ssts=1, rows_per_sst=10)
    write_database(store, "team/b", l0_ssts=1, rows_per_sst=10)
    store.put("notes/manifest/readme.txt", b"not a database")
    assert list_databases(store) == ["a", "team/b"]
    assert list_databases(store, "team") == ["team/b"]


def test_health_counts_l0_runs_bytes_and_pins(store: ObjectStore, orders: str) -> None:
    stored, h = inspect_database(store, orders)
    assert (h.l0_ssts, h.sorted_runs, h.ssts) == (6, 0, 6)
    assert h.sst_bytes == h.l0_bytes == sum(s.info.size_bytes for s in stored.manifest.ssts) > 0
    assert h.manifest_lag == 0 and h.oldest_pinned_manifest_id is None
    cp = admin.create_checkpoint(orders, store)
    write_database(store, orders, prefix="x-", l0_ssts=1, rows_per_sst=10, wal_rows=0)
    stored, h = inspect_database(store, orders)
    assert h.oldest_pinned_manifest_id == cp.manifest_id
    assert h.manifest_lag == stored.id - cp.manifest_id > 0
    assert h.key_range == KeyRange()


def test_boundaries_after_gc_are_behind_the_latest_ids(store: ObjectStore, orders: str) -> None:
    assert read_boundaries(store, orders) == dict.fromkeys(
        ("manifest", "wal", "compactions", "compacted")
    )
    run_gc_once(orders, store, GarbageCollectorOptions(min_age=timedelta()))
    boundaries = read_boundaries(store, orders)
    assert boundaries["manifest"] and boundaries["wal"] and boundaries["compacted"]
    latest = latest_ids(store, orders)
    assert check_boundaries(boundaries, latest) == []
    assert latest["manifest"] is not None
    store.put(boundary_path(orders, "manifest"), str(latest["manifest"]).encode())
    (violation,) = check_boundaries(read_boundaries(store, orders), latest)
    assert violation.namespace == "manifest"
    assert violation.reason == "boundary covers the latest object"


def test_missing_ssts_names_deleted_files(store: ObjectStore, orders: str) -> None:
    stored, _ = inspect_database(store, orders)
    assert missing_ssts(store, orders, stored.manifest) == []
    gone = f"{orders}/compacted/{stored.manifest.ssts[2].id}.sst"
    store.delete(gone)
    assert missing_ssts(store, orders, stored.manifest) == [gone]


def test_split_key_halves_the_data(store: ObjectStore) -> None:
    write_database(store, "big", prefix="k", l0_ssts=4, rows_per_sst=1000, wal_rows=0)
    stored, _ = inspect_database(store, "big")
    key = split_key(stored.manifest)
    assert key is not None
    keys = [f"k{i:08d}".encode() for i in range(2500)]  # the keys written (overlapping flushes)
    below = sum(1 for k in keys if k < key)
    assert 0.3 * len(keys) < below < 0.7 * len(keys)
    write_database(store, "empty", l0_ssts=0, wal_rows=0)
    assert split_key(inspect_database(store, "empty")[0].manifest) is None
