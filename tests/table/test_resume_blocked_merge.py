"""``Table.resume()`` finishes every other pending op and the retirements before it reports a
pending merge that a half-applied batch blocks (issue 37, final review of 456d978).

A run that died after sealing a merge leaves it pending; if a batch reached one of its shards
only before the seal, its run under ``resume()`` refuses it (MergeBlockedByBatch). That error used
to escape from the middle of ``resume()``: the pending ops after the merge (a split a dead run
left sealed too) and the retired databases waiting for their soft destroy were skipped, and the
split's shard stayed unwritable until a second ``resume()``. Now every other op and retirement is
finished first, then the blocked merge is raised."""

from __future__ import annotations

import dataclasses
import time
import uuid

import pytest

from slatedb_core.errors import MergeBlockedByBatch
from slatedb_core.keys import KeyRange
from slatedb_core.layout import join, shard_db_name
from slatedb_core.manifest.model import AppVersion
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.table.ingest import commit_shard, plan_ingest
from slatedb_core.table.shardmap import PendingOp, ShardMap, ShardMapStore
from slatedb_core.writer.db import Db
from tests.table.conftest import OPTS, fill

ROWS = {b"a": b"1", b"h": b"2", b"q": b"3", b"z": b"4"}


def _crashed_runs(mem: ObjectStore) -> str:
    """A three-shard table ([..g), [g..p), [p..)) that dead runs left with a merge of shards 0
    and 1 pending (and a batch of app 'loader' committed to shard 0 only, which blocks it), a
    split of shard 2 at ``t`` pending, and a retired database not yet soft-destroyed. Returns
    that database's path."""
    with Table.create("t", mem, [b"g", b"p"], options=OPTS) as t:
        fill(t, ROWS, flush=True)
    half = plan_ingest("t", mem, txn=AppVersion("loader", 1))
    commit_shard(mem, half, "run", half.shards[0], [])  # shard 0 only
    maps = ShardMapStore(mem, "t")
    retired = join("t", shard_db_name(maps.read_latest().next_shard_id + 3))
    Db.open(retired, mem).close()

    def sealed_by_dead_runs(cur: ShardMap) -> ShardMap:
        a, b, c = cur.shards
        n = cur.next_shard_id
        merge = PendingOp(
            uuid.uuid4(),
            "merge",
            (a.shard_id, b.shard_id),
            ((n, KeyRange(None, b"p")),),
            time.time(),
        )
        split = PendingOp(
            uuid.uuid4(),
            "split",
            (c.shard_id,),
            ((n + 1, KeyRange(b"p", b"t")), (n + 2, KeyRange(b"t", None))),
            time.time(),
        )
        return dataclasses.replace(
            cur,
            created_at=time.time(),
            next_shard_id=n + 4,
            pending=(merge, split),
            retired=(retired,),
        )

    maps.update(sealed_by_dead_runs)
    return retired


def test_resume_finishes_the_other_ops_and_retirements_then_reports_the_blocked_merge(
    mem: ObjectStore,
) -> None:
    retired = _crashed_runs(mem)
    with Table.open("t", mem, OPTS) as t:
        with pytest.raises(MergeBlockedByBatch, match="loader"):
            t.resume()
        m = ShardMapStore(mem, "t").read_latest()
        assert m.pending == ()  # the split ran, the merge was cancelled (its shards unsealed)
        assert [s.key_range.start for s in m.shards] == [None, b"g", b"p", b"t"]
        assert not any(s.sealed for s in m.shards)
        assert ManifestStore(mem, retired).read_latest().manifest.destroyed_at_s is not None
        assert t.shard_map.id == m.id  # the handle sees what resume did
        assert dict(t.scan()) == ROWS
        with t.writer(3) as w:  # a shard of the split takes writes
            w.put(b"zz", b"5")
        t.resume()  # nothing left: no error
