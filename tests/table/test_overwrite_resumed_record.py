"""A late retry of an overwrite commit tells from the latest shard map alone that its overwrite
committed, whoever swapped it in (issue 37, adversarial review of 3b53094, hole C).

3b53094 wrote ``<table>/_ingest/<job>/overwrite.done`` when a commit of the job FOUND its
overwrite committed, after the swap. A swap finished by ``Table.resume()`` (the driver died past
the seal), a crash between the swap and the record, or the table GC at ``ingest_min_age=0``
left none, and once a later overwrite retired the targets and the GC pruned them from the map, a
late retry said ShardMapConflict "the overwrite was not applied, plan it again", though it was:
the advice re-applies it over later writes. The swap's own map commit now records the overwrite
in the map's bounded list of overwrite outcomes (``ShardMap.overwrites``), which every later
version carries; past the bound a retry raises OverwriteTooOld, never "plan it again"."""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import timedelta

import pytest

from slatedb_core.errors import InjectedFault, OverwriteTooOld, ShardMapConflict
from slatedb_core.meta.envelope import open_sealed, seal
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.table.ingest import WRITTEN, IngestPlan
from slatedb_core.table.overwrite import abort_overwrite, commit_overwrite, plan_overwrite
from slatedb_core.table.shardmap import (
    FORMAT_VERSION,
    OVERWRITES_KEPT,
    SHARDMAP_MAGIC,
    OverwriteOutcome,
    ShardMap,
    ShardMapStore,
    decode_shard_map,
    encode_shard_map,
)
from slatedb_core.testing import FaultyStore
from tests.table.conftest import OPTS
from tests.table.ingest_steps import by_shard, overwrite_dies_at, prune_retired, rows_batch, stage

ZERO = timedelta(0)
FIRST = {b"a": b"1", b"k": b"1", b"x": b"1"}
LATER = {b"a": b"2", b"k": b"2", b"x": b"2"}


def _map_name(map_id: int) -> str:
    return f"t/shardmap/{map_id:020}.shardmap"


def _late_retry_after_a_later_overwrite(
    t: Table, mem: ObjectStore, first: IngestPlan, staged: dict[int, list[tuple[str, int]]]
) -> None:
    """A later overwrite retires ``first``'s targets and they are pruned from the map
    (``_prune_retired``); then a late retry of ``first``'s commit says WRITTEN."""
    t.overwrite([rows_batch(LATER)])
    prune_retired(t, mem)
    retry = commit_overwrite(mem, first, "run", staged)
    assert {s.status for s in retry} == {WRITTEN}


def test_a_retry_after_a_resumed_swap_and_a_later_overwrite_reports_it_committed(
    mem: ObjectStore,
) -> None:
    """Table.resume() finishes the swap (the commit died after its seal); a later overwrite
    retires the targets, the GC deletes them and resume() prunes them, the old map versions are
    collected: the late retry still says WRITTEN, and the table keeps the later contents."""
    with Table.create("t", mem, [b"m"], options=OPTS) as t:
        first = plan_overwrite("t", mem)
        staged = by_shard(stage(mem, first, FIRST))
        # the driver dies right after its seal (the fence's first writer open)
        overwrite_dies_at(mem, first, staged, "t/shards/0000000001/*")
        t.refresh()
        assert t.shard_map.pending
        t.resume()  # the operator finishes the swap
        t.refresh()
        assert dict(t.scan()) == FIRST
        _late_retry_after_a_later_overwrite(t, mem, first, staged)
        abort_overwrite(mem, first)  # committed: left alone
        t.refresh()
        assert dict(t.scan()) == LATER


def test_a_retry_after_a_crash_right_after_the_swap_reports_it_committed(
    mem: ObjectStore,
) -> None:
    """The commit's swap map version is written, then the process dies (the write reports a
    failure after its effect): no step after the swap ran. A later overwrite and pruning; the
    late retry says WRITTEN."""
    with Table.create("t", mem, [b"m"], options=OPTS) as t:
        first = plan_overwrite("t", mem)  # map 2
        staged = by_shard(stage(mem, first, FIRST))
        faulty = FaultyStore(mem)
        # seal 3, swap 4: its create lands, then every call about it fails (read-back too)
        faulty.fail_next("put_if_absent", _map_name(4), after_effect=True, times=1000)
        faulty.fail_next("get", _map_name(4), times=1000)
        with pytest.raises(InjectedFault):
            commit_overwrite(faulty, first, "run", staged)
        t.refresh()
        assert {s.shard_id for s in t.shards} == {s.shard_id for s in first.shards}
        _late_retry_after_a_later_overwrite(t, mem, first, staged)
        t.refresh()
        assert dict(t.scan()) == LATER


def test_a_retry_after_the_ingest_gc_at_zero_age_reports_it_committed(mem: ObjectStore) -> None:
    """The commit succeeds, a retry finds it committed (3b53094 wrote its record then), and the
    table GC at ``ingest_min_age=0`` collects everything under ``_ingest/``; after a later
    overwrite and pruning the late retry says WRITTEN."""
    with Table.create("t", mem, [b"m"], options=OPTS) as t:
        first = plan_overwrite("t", mem)
        staged = by_shard(stage(mem, first, FIRST))
        assert {s.status for s in commit_overwrite(mem, first, "run", staged)} == {WRITTEN}
        assert {s.status for s in commit_overwrite(mem, first, "run", staged)} == {WRITTEN}
        t.collect_garbage(min_age=ZERO, ingest_min_age=ZERO)
        assert not list(mem.list("t/_ingest/"))
        t.refresh()
        _late_retry_after_a_later_overwrite(t, mem, first, staged)
        t.refresh()
        assert dict(t.scan()) == LATER


def test_a_retry_whose_outcome_the_map_forgot_raises_overwrite_too_old(mem: ObjectStore) -> None:
    """Past the bound (OVERWRITES_KEPT outcomes recorded after it) the map no longer says whether
    the overwrite committed: the retry and the abort raise OverwriteTooOld, the table keeps its
    later contents (never 'plan it again', which would re-apply it over later writes)."""
    with Table.create("t", mem, [b"m"], options=OPTS) as t:
        first = plan_overwrite("t", mem)
        staged = by_shard(stage(mem, first, FIRST))
        commit_overwrite(mem, first, "run", staged)
        t.refresh()
        t.overwrite([rows_batch(LATER)])
        prune_retired(t, mem)
        # OVERWRITES_KEPT later outcomes push the first overwrite's out of the list (ids that
        # no shard uses: as if that many overwrites had been planned and aborted since)
        base = ShardMapStore(mem, "t").read_latest().next_shard_id

        def many(cur: ShardMap) -> ShardMap:
            later = tuple(
                OverwriteOutcome(f"j{i}", base + i, "cancelled") for i in range(OVERWRITES_KEPT)
            )
            return dataclasses.replace(
                cur,
                created_at=time.time(),
                next_shard_id=base + OVERWRITES_KEPT,
                overwrites=(*cur.overwrites, *later),
            )

        m = ShardMapStore(mem, "t").update(many)
        assert len(m.overwrites) == OVERWRITES_KEPT
        assert m.overwrites_forgotten_below > first.shards[0].shard_id
        with pytest.raises(OverwriteTooOld):
            commit_overwrite(mem, first, "run", staged)
        with pytest.raises(OverwriteTooOld):
            abort_overwrite(mem, first)
        assert not issubclass(OverwriteTooOld, ShardMapConflict)
        t.refresh()
        assert dict(t.scan()) == LATER


def test_a_map_written_before_the_outcome_list_decodes_and_forgets_nothing_it_knew(
    mem: ObjectStore,
) -> None:
    """Old maps stay decodable: no ``overwrites`` field decodes as an empty list whose bound is
    the map's next_shard_id (what it did not record cannot be told: OverwriteTooOld, not
    'plan it again')."""
    with Table.create("t", mem, [b"m"], options=OPTS) as t:
        m = t.shard_map
    doc = json.loads(
        open_sealed(
            encode_shard_map(m, "t"),
            magic=SHARDMAP_MAGIC,
            name="x",
            versions=frozenset({FORMAT_VERSION}),
        ).payload
    )
    doc.pop("overwrites", None)
    doc.pop("overwrites_forgotten_below", None)
    old = seal(SHARDMAP_MAGIC, FORMAT_VERSION, json.dumps(doc).encode())
    decoded = decode_shard_map(old, map_id=m.id, table_path="t", name="x")
    assert decoded.overwrites == ()
    assert decoded.overwrites_forgotten_below == m.next_shard_id
    again = decode_shard_map(encode_shard_map(decoded, "t"), map_id=m.id, table_path="t", name="x")
    assert again == decoded
