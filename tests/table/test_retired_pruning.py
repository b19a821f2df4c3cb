"""``Table.resume()`` drops from the shard map the retired databases the GC has deleted, and only
those (a follow-up of issue 37, 7b/7c).

A split, merge or overwrite lists its sources as retired and soft-destroys them; the GC deletes
each once ``db_delete_grace`` has passed (``run_gc_once`` on each path of ``shard_map.retired``).
``resume`` soft-destroys them again and meant to drop the deleted ones, but ``destroy(soft=True)``
on a deleted path returns without an error, so the list only grew. A database counts as gone once
its path holds the tombstone and none of its own objects (the GC deletes the latest manifest
last); one the GC has started but not finished deleting stays listed, or no pass would ever
finish it."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pytest

from slatedb_core.errors import InjectedFault
from slatedb_core.gc.service import run_gc_once
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.table.shardmap import ShardMapStore
from slatedb_core.testing import FaultyStore
from tests.table.conftest import OPTS, fill

GC_NOW = GarbageCollectorOptions(min_age=timedelta(0), db_delete_grace=timedelta(0))
ROWS = {b"a": b"1", b"q": b"2"}


def overwritten(store: ObjectStore) -> tuple[str, ...]:
    """A table of two shards overwritten once: the paths of its two retired shards."""
    with Table.create("t", store, [b"m"], OPTS) as t:
        fill(t, ROWS)
        t.overwrite([pa.record_batch([pa.array([b"b"]), pa.array([b"new"])], ["key", "value"])])
        t.refresh()
        retired = t.shard_map.retired
    assert len(retired) == 2
    return retired


def resumed(store: ObjectStore) -> tuple[str, ...]:
    with Table.open("t", store, OPTS) as t:
        retired = t.resume().retired
    assert ShardMapStore(store, "t").read_latest().retired == retired
    return retired


def test_resume_drops_the_retired_databases_the_gc_deleted(mem: ObjectStore) -> None:
    a, b = overwritten(mem)
    assert run_gc_once(a, mem, GC_NOW).database_deleted
    assert resumed(mem) == (b,)  # (a, b) before the fix
    assert run_gc_once(b, mem, GC_NOW).database_deleted
    assert resumed(mem) == ()
    with Table.open("t", mem, OPTS) as t:
        assert dict(t.scan()) == {b"b": b"new"}


def test_resume_keeps_a_retired_database_until_the_gc_deleted_all_of_it(mem: ObjectStore) -> None:
    a, b = overwritten(mem)
    assert resumed(mem) == (a, b)  # soft-destroyed, not deleted: kept
    stalled = FaultyStore(mem)
    stalled.fail_next("delete", f"{a}/manifest/*.manifest", times=1000)
    with pytest.raises(InjectedFault):
        run_gc_once(a, stalled, GC_NOW)
    assert ManifestStore(mem, a).is_tombstone()  # the GC began deleting it
    assert resumed(mem) == (a, b)  # its manifests are still there: the next pass finishes it
    assert run_gc_once(a, mem, GC_NOW).database_deleted
    assert resumed(mem) == (b,)
