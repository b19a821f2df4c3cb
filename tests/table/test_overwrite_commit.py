"""A retried overwrite commit recognises its own commit after later overwrites retired its targets
and the GC pruned them (issue 37, known problem 7b: it was reported as ``ShardMapConflict``)."""

from __future__ import annotations

import dataclasses
import time
import uuid

import pyarrow as pa

from slatedb_core.keys import KeyRange
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.table.ingest import WRITTEN
from slatedb_core.table.overwrite import abort_overwrite, commit_overwrite, plan_overwrite
from slatedb_core.table.shardmap import PendingOp, ShardMapStore
from tests.table.conftest import OPTS
from tests.table.ingest_steps import prune_retired, stage_value


def _rows(value: bytes) -> list[pa.RecordBatch]:
    keys = [b"a", b"k", b"x"]
    return [pa.record_batch([pa.array(keys), pa.array([value] * 3)], ["key", "value"])]


def test_a_retried_commit_reports_its_overwrite_committed_after_its_targets_were_pruned(
    mem: ObjectStore,
) -> None:
    with Table.create("t", mem, [b"m"], options=OPTS) as t:
        first = plan_overwrite("t", mem)
        staged = stage_value(mem, first, b"1")
        assert {s.status for s in commit_overwrite(mem, first, "run", staged)} == {WRITTEN}
        t.refresh()
        t.overwrite(_rows(b"2"))  # retires the first overwrite's targets
        prune_retired(t, mem)
        assert all(s.shard_id not in {x.shard_id for x in first.shards} for s in t.shards)
        retry = commit_overwrite(mem, first, "run", staged)
        assert {s.status for s in retry} == {WRITTEN}
        assert all("earlier attempt" in s.message for s in retry)
        abort_overwrite(mem, first)  # committed: left alone
        t.refresh()
        assert dict(t.scan()) == {b"a": b"2", b"k": b"2", b"x": b"2"}


def test_a_stale_commit_of_a_committed_overwrite_fences_no_writer_of_its_former_targets(
    mem: ObjectStore,
) -> None:
    """Issue 37, known problem 7c: a retried commit that finds its overwrite committed ran
    ``resume``, which runs every pending op of the map: a split sealed since on one of the
    overwrite's targets (a shard it no longer owns) was run from the stale attempt, fencing the
    writer of that shard. It now resumes nothing."""
    with Table.create("t", mem, [b"m"], options=OPTS) as t:
        plan = plan_overwrite("t", mem)
        staged = stage_value(mem, plan, b"1")
        commit_overwrite(mem, plan, "run", staged)
        t.refresh()
        with t.writer(0) as db:  # a writer of the overwrite's first target, opened after it
            source = t.shards[0]
            first = t.shard_map.next_shard_id
            halves = (KeyRange(source.key_range.start, b"c"), KeyRange(b"c", source.key_range.end))
            op = PendingOp(
                uuid.uuid4(),
                "split",
                (source.shard_id,),
                ((first, halves[0]), (first + 1, halves[1])),
                time.time(),
            )
            ShardMapStore(mem, "t").update(
                lambda cur: dataclasses.replace(
                    cur, created_at=time.time(), next_shard_id=first + 2, pending=(op,)
                )
            )
            commit_overwrite(mem, plan, "run", staged)  # the stale retry
            db.put(b"b", b"after")  # not fenced
            db.flush()
        assert ShardMapStore(mem, "t").read_latest().pending == (op,)
