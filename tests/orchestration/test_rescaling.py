"""The rescaling asset on a real sharded table: a big shard is split, small neighbours merged,
the new layout recorded, every row still readable; discovery manages the new shards."""

from __future__ import annotations

import dagster as dg

from devtools.sample_data import rows
from orchestration.assets import rescaling
from orchestration.partitions import DATABASES, TABLES
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from orchestration.sensors import discovery_requests
from slatedb_core import ObjectStore
from slatedb_core.table import Table


def _table(store: ObjectStore) -> list[tuple[bytes, bytes]]:
    with Table.create("events", store, split_points=[b"e-00003000", b"e-00003100"]) as table:
        for shard, (start, count) in zip(table.shards, [(0, 3000), (3000, 100), (3100, 100)],
                                         strict=True):
            with table.writer(shard) as db:
                db.put_arrow(rows("e-", start, count))
                db.flush_memtable()
        return list(table.scan())


def test_rescaling_splits_the_big_shard_and_merges_the_small_ones(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
) -> None:
    expected = _table(store)
    assert len(expected) == 3200
    ctx = dg.build_asset_context(partition_key="events")
    result = rescaling(context=ctx, store=store_resource, managed=managed)
    metadata = result.metadata or {}
    assert metadata["splits"].value == 1
    assert metadata["merges"].value == 1
    assert metadata["shards_before"].value == 3
    assert metadata["shards"].value == 3
    with Table.open("events", store) as table:
        assert metadata["shard_map_id"].value == table.shard_map.id
        assert len(table.shard_map.retired) == 3  # the split shard and the two merged ones
        bounds = [(s.key_range.start, s.key_range.end) for s in table.shards]
        assert bounds[0][0] is None and bounds[-1][1] is None
        assert bounds[1][1] == b"e-00003000"  # the two small shards were merged into one
        split_at = bounds[0][1]
        assert split_at is not None and b"e-00000900" < split_at < b"e-00002100"
        assert list(table.scan()) == expected
    layout = metadata["layout"].value
    assert [r.data["db_path"] for r in layout.records] == [
        s.db_path for s in Table.open("events", store).shards
    ]
    assert metadata["ingest_leftovers_deleted"].value == 0
    assert metadata["summary"].value.startswith("1 split, 1 merge: 3 -> 3 shards, ")
    # a second pass finds a balanced table: nothing to do but the table's garbage
    store.put_if_absent("events/_ingest/job/staged/run/00000-1-ab/00000.sst", b"zombie")
    prompt = ManagedDatabasesResource(**{**managed.model_dump(), "ingest_retention": "0s"})
    again = rescaling(context=ctx, store=store_resource, managed=prompt)
    assert (again.metadata or {})["splits"].value == 0
    assert (again.metadata or {})["merges"].value == 0
    assert (again.metadata or {})["ingest_leftovers_deleted"].value == 1
    assert (again.metadata or {})["ingest_leftover_freed_bytes"].value == 6
    assert not list(store.list("events/_ingest/"))

    # discovery: the table partition, its live shards and its retired (soft-destroyed) shards
    listed = ManagedDatabasesResource(
        **{**managed.model_dump(), "discover_prefix": None, "tables": ["events"]}
    )
    requests = discovery_requests(instance, store_resource, listed)
    added = {r.partitions_def_name: set(r.partition_keys) for r in requests}
    assert added[TABLES] == {"events"}
    with Table.open("events", store) as table:
        assert added[DATABASES] == {s.db_path for s in table.shards} | set(
            table.shard_map.retired
        )
