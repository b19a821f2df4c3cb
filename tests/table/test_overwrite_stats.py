"""An overwrite's statistics never fail its commit: a staged SST that another attempt's cleanup
deletes while the rows of a target built earlier are counted is counted as gone
(slatedb_core/table/overwrite_stats.py). Before, ``exists`` then ``open`` raised ObjectNotFound
for an overwrite that had committed, when the delete fell between the two."""

from __future__ import annotations

import random
import threading

import pyarrow as pa

from slatedb_core.store.url import open_store
from slatedb_core.table import Table
from slatedb_core.table.ingest import attempt_dir, stage_ssts
from slatedb_core.table.overwrite import plan_overwrite
from slatedb_core.table.overwrite_stats import counts
from slatedb_core.testing import FaultyStore


def test_a_staged_sst_deleted_while_counted_counts_as_gone() -> None:
    mem = open_store(f"memory://overwrite-stats-{random.getrandbits(64):x}")
    Table.create("t", mem, [b"m"]).close()
    plan = plan_overwrite("t", mem)
    rows = pa.record_batch(
        {
            "key": pa.array([b"a", b"b", b"z"], pa.binary()),
            "value": pa.array([b"1", b"2", b"3"], pa.binary()),
        }
    )
    staged = list(stage_ssts(mem, plan, attempt_dir(plan, "r", 0, 0), 0, [rows], partition=0))
    paths = [s.path for s in staged]
    assert counts(mem, paths) == {
        "rows": 3,
        "ssts": 2,
        "bytes": sum(mem.head(p).size for p in paths),
    }
    faulty = FaultyStore(mem)
    pp = faulty.pause("read", "get", paths[0])
    out: list[object] = []
    th = threading.Thread(target=lambda: out.append(counts(faulty, paths[:1])))
    th.start()
    assert pp.wait_reached(10)
    mem.delete(paths[0])  # another attempt's staging cleanup
    pp.release()
    th.join(10)
    assert out == [{"rows": 0, "ssts": 0, "bytes": 0}]
