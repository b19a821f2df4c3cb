"""A retry of an overwrite commit whose swap ``Table.resume()`` finished (issue 37, adversarial
review of 3b53094, hole C; known, not fixed).

3b53094 writes ``<table>/_ingest/<job>/overwrite.done`` when a commit of the job FINDS its
overwrite committed, after the swap. A swap finished by anything else (``Table.resume()`` after
the driver died past the seal: the map's pending op carries no job id) or a crash between the
swap and the record leaves no record, and once later overwrites retired the targets and the GC
pruned them from the map, a late retry of the commit says ShardMapConflict "the overwrite was
not applied, plan it again", though it was: the advice re-applies it over later writes. The fix
needs the record tied to the swap itself (the job id in the pending op, recorded by whoever
swaps, or the committed jobs listed in the shard map)."""

from __future__ import annotations

import pytest

from slatedb_core.errors import InjectedFault
from slatedb_core.store.faults import FaultyStore
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.table.ingest import WRITTEN
from slatedb_core.table.overwrite import commit_overwrite, plan_overwrite
from tests.table.conftest import OPTS
from tests.table.test_overwrite_commit import _prune_retired, _rows, _stage


@pytest.mark.xfail(strict=True, reason="overwrite.done is written after the swap, by the "
                   "commit only: a swap by Table.resume() or a crash after it leaves none")
def test_a_retry_after_a_resumed_swap_and_a_later_overwrite_reports_it_committed(
    mem: ObjectStore,
) -> None:
    faulty = FaultyStore(mem)
    with Table.create("t", mem, [b"m"], options=OPTS) as t:
        first = plan_overwrite("t", mem)
        staged = _stage(mem, first, b"1")
        # the driver dies right after its seal (the fence's first writer open)
        faulty.fail_next("put_if_absent", "t/shards/0000000001/*", times=1000)
        with pytest.raises(InjectedFault):
            commit_overwrite(faulty, first, "run", staged)
        t.refresh()
        assert t.shard_map.pending
        t.resume()  # the operator finishes the swap
        t.refresh()
        assert dict(t.scan()) == {b"a": b"1", b"k": b"1", b"x": b"1"}
        t.overwrite(_rows(b"2"))
        _prune_retired(t, mem)
        retry = commit_overwrite(mem, first, "run", staged)  # a late retry of the first
        assert {s.status for s in retry} == {WRITTEN}
