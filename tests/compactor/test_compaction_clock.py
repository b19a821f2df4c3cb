"""Review of issue 38 (item 1, TTL): the compaction clock of a database our writer owns.

SlateDB's compactions expire TTL rows at the manifest's ``last_l0_clock_tick``, which SlateDB's
writer sets at each L0 flush to the memtable's last clock tick: the tick of its newest write
(``flush.rs`` / ``mem_table.rs``). Our writer committed the time the memtable was *frozen*
(commit 241928d), later than its last write by up to the whole life of the memtable. A row whose
TTL ends between the last write and the freeze then survives SlateDB's compaction of SlateDB's
database but is retired by a compaction (ours or SlateDB's) of ours: the same writes, different
rows (and SlateDB 0.17 reads ignore ``expire_ts``, so SlateDB's reader sees the difference)."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest

from slatedb_core.compactor import run_compaction_once
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions, DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db
from tests.interop.oracle import Oracle
from tests.interop.oracle_compaction import tree_rows
from tests.interop.oracle_merge import slatedb_write
from tests.interop.oracle_merge_read import StringAppend, open_merge_db

pytestmark = pytest.mark.slatedb


TTL_MS = 200


COMPACT = CompactorOptions(l0_trigger=1, merge_operator="string_append")


def _run_rows(store: object, path: str) -> list[tuple[bytes, int, bytes | None]]:
    rows = tree_rows(store, path)  # type: ignore[arg-type]
    return [(r[0], r[2], r[3]) for name, rs in rows.items() if name != "l0" for r in rs]


def test_a_ttl_row_live_at_the_last_write_survives_the_compaction_as_in_slatedb(
    oracle: Oracle, tmp_path: Path
) -> None:
    """Found by the review of issue 38 (was review/test_issue38_compaction_clock.py)."""
    store = open_store(tmp_path.as_uri())
    # SlateDB: a live TTL row, the memtable flushed after the TTL has ended, no write since
    w = open_merge_db(oracle, StringAppend(), path="theirs")
    slatedb_write(w, [("put", b"t", b"1", TTL_MS)])
    time.sleep(2 * TTL_MS / 1000)
    w.flush_memtable()
    theirs_tick = ManifestStore(store, "theirs").read_latest().manifest.last_l0_clock_tick
    assert run_compaction_once("theirs", store, COMPACT) is not None
    want = _run_rows(store, "theirs")
    assert want == [(b"t", 0, b"1")]  # the clock is the write's tick: not expired

    # ours: the same writes
    options = DbOptions(flush_interval=timedelta(milliseconds=10), merge_operator="string_append")
    with Db.open("ours", store, options) as db:
        db.put(b"t", b"1", ttl=TTL_MS)
        time.sleep(2 * TTL_MS / 1000)
        db.flush_memtable()
    ours_tick = ManifestStore(store, "ours").read_latest().manifest.last_l0_clock_tick
    assert run_compaction_once("ours", store, COMPACT) is not None
    assert _run_rows(store, "ours") == want, (theirs_tick, ours_tick)


def test_a_plain_memtable_flush_moves_the_clock_only_to_its_last_write(
    oracle: Oracle, tmp_path: Path
) -> None:
    """Found by the review of issue 38 (was review/test_issue38_compaction_clock.py)."""
    store = open_store(tmp_path.as_uri())
    w = open_merge_db(oracle, StringAppend(), path="theirs")
    slatedb_write(w, [("put", b"t", b"1", TTL_MS)])
    w.flush_memtable()
    w.put(b"p", b"plain")  # a memtable of plain writes only, flushed after t's TTL
    time.sleep(2 * TTL_MS / 1000)
    w.flush_memtable()
    assert run_compaction_once("theirs", store, COMPACT) is not None
    want = _run_rows(store, "theirs")
    assert (b"t", 0, b"1") in want

    options = DbOptions(flush_interval=timedelta(milliseconds=10), merge_operator="string_append")
    with Db.open("ours", store, options) as db:
        db.put(b"t", b"1", ttl=TTL_MS)
        db.flush_memtable()
        db.put(b"p", b"plain")
        time.sleep(2 * TTL_MS / 1000)
        db.flush_memtable()
    assert run_compaction_once("ours", store, COMPACT) is not None
    assert _run_rows(store, "ours") == want
