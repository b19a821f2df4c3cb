"""The rescaling asset on a real sharded table: a big shard is split, small neighbours merged,
the new layout recorded, every row still readable; discovery manages the new shards."""

from __future__ import annotations

import dagster as dg
import pyarrow as pa

from devtools.sample_data import rows
from orchestration.assets import rescaling
from orchestration.partitions import DATABASES, TABLES
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from orchestration.sensors import discovery_requests
from slatedb_core import ObjectStore
from slatedb_core.manifest.model import AppVersion
from slatedb_core.table import Table
from slatedb_core.table.ingest import attempt_dir, commit_shard, plan_ingest, stage_ssts


def _table(store: ObjectStore) -> list[tuple[bytes, bytes]]:
    with Table.create("events", store, split_points=[b"e-00003000", b"e-00003100"]) as table:
        for shard, (start, count) in zip(
            table.shards, [(0, 3000), (3000, 100), (3100, 100)], strict=True
        ):
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
        assert added[DATABASES] == {s.db_path for s in table.shards} | set(table.shard_map.retired)


def test_a_merge_a_half_applied_batch_blocks_is_reported_not_a_failed_run(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    managed: ManagedDatabasesResource,
) -> None:
    """Issue 37, hole 1 (and the review's hole A): a merge of shards whose exactly-once records
    differ is refused (MergeBlockedByBatch). The policy merges small shards on its own, so a
    batch half applied by a failed job must neither fail every rescaling run nor be merged
    over: the pass reports the blocked pair, leaves both shards writable, and merges them once
    the batch's re-run has reached the missing shard."""
    batch = AppVersion("loader", 3)
    keys = [b"k%03d" % i for i in range(100)]
    Table.create("half", store, [b"k050"]).close()

    def commit(job: str, shards: list[int]) -> None:
        plan = plan_ingest("half", store, job_id=job, txn=batch)
        rows = pa.record_batch(
            [pa.array(keys, pa.binary()), pa.array(keys, pa.binary())], ["key", "value"]
        )
        staged = list(
            stage_ssts(store, plan, attempt_dir(plan, "run", 0, 0), 0, [rows], partition=0)
        )
        for i in shards:
            mine = [s for s in staged if s.shard.index == i]
            commit_shard(
                store,
                plan,
                "run",
                plan.shards[i],
                [s.path for s in mine],
                seqs=[s.seq for s in mine],
            )

    commit("job-1", [0])  # the job died before shard 1's commit
    ctx = dg.build_asset_context(partition_key="half")
    result = rescaling(context=ctx, store=store_resource, managed=managed)
    metadata = result.metadata or {}
    assert metadata["merges"].value == 0
    assert metadata["merges_blocked"].value == 1
    assert "'loader'" in metadata["merge_blocked_reasons"].value
    with Table.open("half", store) as table:
        assert len(table.shards) == 2 and not table.shard_map.pending
        with table.writer(1) as db:  # unsealed: still writable
            db.put(b"k099", b"x")
    commit("job-2", [0, 1])  # the re-run: shard 0 skips, shard 1 gets the batch
    again = rescaling(context=ctx, store=store_resource, managed=managed)
    assert (again.metadata or {})["merges"].value == 1
    assert (again.metadata or {})["merges_blocked"].value == 0
    with Table.open("half", store) as table:
        assert len(table.shards) == 1
        assert dict(table.scan()) == {k: k for k in keys}
