"""A merge that differing exactly-once records block is refused before it seals or fences
anything (issue 37, final review of a7f6d30/47d9a2b).

A batch that reached one shard of a pair and not the other blocks their merge until the batch is
re-run (or the app's next batch commits). An app that stopped after such a failure blocks it for
good, and the Dagster rescaling asset tries the pair again on every pass. Each try used to seal
the pair in the map and fence both shards (opening their writers) before it read the records:
every pass made the writers of both shards fail with Fenced and committed two map versions, for
a merge that could not happen. The records are now compared first, from the shards' latest
manifests: a pair that differs there is refused with nothing written. (A batch committing
between that look and the fence is still caught by the look under the fence.)"""

from __future__ import annotations

import pyarrow as pa
import pytest

from slatedb_core.errors import MergeBlockedByBatch
from slatedb_core.manifest.model import AppVersion
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.table.ingest import WRITTEN, attempt_dir, commit_shard, plan_ingest, stage_ssts
from slatedb_core.table.shardmap import ShardMapStore
from tests.table.conftest import OPTS

MID = b"m"


def half_applied(store: ObjectStore) -> None:
    """A two-shard table where batch 5 of app 'loader' committed shard 0 only."""
    Table.create("t", store, [MID], options=OPTS).close()
    plan = plan_ingest("t", store, job_id="job", txn=AppVersion("loader", 5))
    rows = pa.record_batch(
        [pa.array([b"a", b"z"], pa.binary()), pa.array([b"1", b"2"], pa.binary())], ["key", "value"]
    )
    staged = list(stage_ssts(store, plan, attempt_dir(plan, "run", 0, 0), 0, [rows], partition=0))
    mine = [s for s in staged if s.shard.index == 0]
    stats = commit_shard(
        store, plan, "run", plan.shards[0], [s.path for s in mine], seqs=[s.seq for s in mine]
    )
    assert stats.status == WRITTEN


def test_a_blocked_merge_fences_no_writer_and_commits_no_map(local: ObjectStore) -> None:
    half_applied(local)
    with Table.open("t", local, OPTS) as t:
        before = ShardMapStore(local, "t").read_latest().id
        w0, w1 = t.writer(0), t.writer(1)
        try:
            for _ in range(3):  # as the rescaling asset, pass after pass
                with pytest.raises(MergeBlockedByBatch):
                    t.merge(0)
            w0.put(b"b", b"still mine")  # neither writer was fenced
            w1.put(b"y", b"still mine")
        finally:
            w0.close()
            w1.close()
        assert ShardMapStore(local, "t").read_latest().id == before
        t.refresh()
        assert t.get(b"b") == b"still mine" and t.get(b"y") == b"still mine"
