"""A split, merge or overwrite whose fencing writer is fenced by a concurrent opener while it
opens retries the fence instead of failing and leaving the shards sealed (issue 37, hole 5).

The rescale's step 2 (slatedb_core.table.rescale, "fence") opens a writer on each source; an
ingest whose commit the seal refused opens one too (to read its checkpoint as of a fence), and
if it bumps the epoch while the rescale's writer is between its own bump and its fence, the
rescale's ``Db.open`` raises ``Fenced``. It used to open outside its retry loop: the split or
merge raised and every writer of the sealed shards was refused until ``Table.resume()``. The
same held for the writer an overwrite opens on each target to carry the records (step 4).

The interleaving is made deterministic with a pause point of :class:`FaultyStore`: the rescale
parks right before it lists the shard's WAL to fence it (after its epoch bump), the concurrent
opener runs through the real store, then the rescale goes on."""

from __future__ import annotations

from collections.abc import Callable

from slatedb_core.manifest.model import AppVersion
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table, table_app_versions
from slatedb_core.table.ingest import REFUSED, commit_shard, plan_ingest
from slatedb_core.table.overwrite import plan_overwrite
from slatedb_core.table.shardmap import ShardMap
from slatedb_core.testing import FaultyStore
from slatedb_core.writer.db import Db
from tests.table.conftest import OPTS, fill, in_thread
from tests.table.ingest_steps import by_shard, overwrite_dies_at, stage

ROWS = {b"k%03d" % i: b"v%03d" % i for i in range(40)}
MID = b"k020"


def table_with_rows(store: ObjectStore) -> None:
    with Table.create("t", store, [MID], OPTS) as t:
        fill(t, ROWS)


def assert_unsealed_with_rows(store: ObjectStore, shards: int) -> None:
    with Table.open("t", store, OPTS) as t:
        assert not t.shard_map.pending, t.shard_map.pending
        assert len(t.shards) == shards
        assert dict(t.scan()) == ROWS
        with t.writer(0) as db:  # the new shards take writes
            db.put(b"k000", b"new")
    with Table.open("t", store, OPTS) as t:
        assert t.get(b"k000") == b"new"


def refused_ingest_fences_while_rescale_opens(
    mem: ObjectStore, rescale: Callable[[Table], ShardMap]
) -> object:
    """``rescale`` of the table, run while an ingest planned before it commits shard 0 at the
    moment the rescale's fencing writer of shard 0 sits between its epoch bump and its fence."""
    table_with_rows(mem)
    plan = plan_ingest("t", mem, job_id="late")  # routes by the map before the rescale
    shard0 = plan.shards[0]
    faulty = FaultyStore(mem)
    with Table.open("t", faulty, OPTS) as t:
        pause = faulty.pause("fencing", "list", f"{shard0.db_path}/wal*")
        th, out = in_thread(lambda: rescale(t))
        try:
            assert pause.wait_reached()
            late = commit_shard(mem, plan, "run", shard0, [])  # its open fences the rescale's
            assert late.status == REFUSED and "ShardMapConflict" in late.message
        finally:
            pause.release()
            th.join()
    (result,) = out
    return result


def test_a_merge_fenced_by_a_refused_ingest_while_it_fences_still_completes(
    mem: ObjectStore,
) -> None:
    result = refused_ingest_fences_while_rescale_opens(mem, lambda t: t.merge(0))
    assert isinstance(result, ShardMap), result
    assert_unsealed_with_rows(mem, 1)


def test_a_split_fenced_by_a_refused_ingest_while_it_fences_still_completes(
    mem: ObjectStore,
) -> None:
    result = refused_ingest_fences_while_rescale_opens(mem, lambda t: t.split(0, b"k010"))
    assert isinstance(result, ShardMap), result
    assert_unsealed_with_rows(mem, 3)


def test_an_overwrite_whose_target_writer_is_fenced_while_it_carries_records_completes(
    mem: ObjectStore,
) -> None:
    """The overwrite is sealed (its first commit attempt failed right after the seal); its
    resume opens a writer on each target to carry the records, and another run of the same
    replace opens target 0 while ours sits between its epoch bump and its fence."""
    table_with_rows(mem)
    earlier = plan_ingest("t", mem, txn=AppVersion("loader", 1))  # records to carry
    for shard in earlier.shards:
        commit_shard(mem, earlier, "run", shard, [])
    plan = plan_overwrite("t", mem)
    staged = by_shard(stage(mem, plan, ROWS))
    with Table.open("t", mem, OPTS) as t:
        source0 = t.shards[0].db_path
    overwrite_dies_at(mem, plan, staged, f"{source0}/manifest/*")  # at the fence
    with Table.open("t", mem, OPTS) as t:
        assert t.shard_map.pending  # sealed, not swapped
    target0 = plan.shards[0].db_path
    faulty = FaultyStore(mem)
    with Table.open("t", faulty, OPTS) as t:
        pause = faulty.pause("carrying", "list", f"{target0}/wal*")
        th, out = in_thread(t.resume)
        try:
            assert pause.wait_reached()
            Db.open(target0, mem).close()
        finally:
            pause.release()
            th.join()
    (result,) = out
    assert isinstance(result, ShardMap), result
    assert_unsealed_with_rows(mem, 2)
    with Table.open("t", mem, OPTS) as t:
        assert [s.db_path for s in t.shards] == [s.db_path for s in plan.shards]
    assert table_app_versions(mem, "t", "loader") == {0: 1, 1: 1}
