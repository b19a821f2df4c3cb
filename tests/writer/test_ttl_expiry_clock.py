"""Our writer's L0 flushes advance the manifest's ``last_l0_clock_tick``, the clock SlateDB's
compaction (and ours, ``lsm/retention.py``) expires TTL rows at (issue 38 item 1; found by the
compaction helper: our writer left it at 0, so on a database our writer owns no compaction ever
dropped an expired row)."""

from __future__ import annotations

import time

from slatedb_core.compactor.compactor import run_compaction_once
from slatedb_core.lsm.row_model import now_ms
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions, DbOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db

ONE_RUN = CompactorOptions(l0_trigger=1)


def test_flush_records_the_clock_and_compaction_expires_at_it(mem: ObjectStore) -> None:
    before = now_ms()
    with Db.open("db", mem, DbOptions()) as db:
        db.put(b"short", b"v", ttl=20)
        db.put(b"long", b"v", ttl=3_600_000)
        time.sleep(0.1)
        db.put(b"plain", b"v")  # a write without a TTL: the clock still moves on
        db.flush_memtable()
        tick = ManifestStore(mem, "db").read_latest().manifest.last_l0_clock_tick
        assert tick >= before + 100
    assert run_compaction_once("db", mem, ONE_RUN) is not None
    # the compaction wrote the last run: the expired row became a tombstone and went
    with DbReader.open("db", mem) as r:
        assert r.get(b"short") is None
        assert r.get(b"long") == b"v"
        assert r.get(b"plain") == b"v"
