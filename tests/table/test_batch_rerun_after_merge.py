"""A batch's re-run after a merge writes exactly the rows it missed, never twice (issue 37,
adversarial review of ae4dd3b, hole A).

A batch (``app_id``, ``batch_version``) commits shard 0 and not shard 1 (a merge sealed it
meanwhile, or the job died between the commits). A key of shard 0 the batch wrote is deleted
afterwards. ae4dd3b let the merge go ahead and recorded for the merged database only what both
ranges had (nothing of the batch), so the batch's re-run wrote ALL its rows into the merged
shard, shard 0's half a second time: the deleted key came back. A merge of shards whose
exactly-once records differ is refused now (after the fence, when the records are final), the
sources unsealed; the re-run then writes the missing shard only, and the merge goes through
after it.

Driven through the real table ingest on a local store (see tests/table/test_batch_records.py)."""

from __future__ import annotations

from slatedb_core.errors import ShardMapConflict
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table, table_app_versions
from slatedb_core.table.ingest import REFUSED, SKIPPED, WRITTEN
from tests.table.ingest_steps import (
    ALL,
    BATCH,
    commit,
    contents,
    delete,
    half_committed,
    rerun,
)


def try_merge(store: ObjectStore, index: int) -> bool:
    with Table.open("t", store) as t:
        try:
            t.merge(index)
        except ShardMapConflict:
            return False
    return True


def test_a_rerun_after_a_merge_does_not_bring_back_a_key_deleted_since(
    local: ObjectStore,
) -> None:
    plan, staged = half_committed(local)
    delete(local, b"k001")  # after the batch committed shard 0
    merged = try_merge(local, 0)
    # the job's commit of shard 1: refused if the merge went through, else written
    assert commit(local, plan, staged, 1).status == (REFUSED if merged else WRITTEN)
    rerun(local, "job-2")
    want = {k: v for k, v in ALL.items() if k != b"k001"}
    assert contents(local) == want
    # the merge goes through once the batch is everywhere, and keeps it applied
    assert try_merge(local, 0)
    assert table_app_versions(local, "t", BATCH.app_id) == {0: BATCH.version}
    assert [s.status for s in rerun(local, "job-3")] == [SKIPPED]
    assert contents(local) == want


def test_a_rerun_after_a_split_then_a_merge_does_not_bring_back_a_deleted_key(
    local: ObjectStore,
) -> None:
    """The batch committed shard 0; shard 0 is split (both children keep its records), then
    its upper child merged with shard 1, which never had the batch."""
    plan, staged = half_committed(local)
    delete(local, b"k049")  # in the upper child of the split below
    with Table.open("t", local) as t:
        t.split(0, b"k025")
    merged = try_merge(local, 1)
    assert commit(local, plan, staged, 1).status == (REFUSED if merged else WRITTEN)
    rerun(local, "job-2")
    want = {k: v for k, v in ALL.items() if k != b"k049"}
    assert contents(local) == want
    if not merged:
        assert try_merge(local, 1)
    assert {s.status for s in rerun(local, "job-3")} == {SKIPPED}
    assert contents(local) == want
