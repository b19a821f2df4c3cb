"""What a writer with no compactor in its process says when L0 fills.

Noticed in session 55: with the 32 MiB memtable default (9b35339) a writer opened with
``DbOptions()`` (no in-process compactor; SlateDB's own default runs one) stalls after about 1.2M
single puts, and its one warning said only that flushes "wait for a compactor". A new user
following README's example had no way to know none was running. The warning now names the ways
to run one, and the stall ends when a compactor elsewhere makes room."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from slatedb_core.compactor.compactor import run_compaction_once
from slatedb_core.options import CompactorOptions, DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db
from tests.writer.thread_steps import start_recorded


def test_a_stalled_writer_without_a_compactor_says_how_to_run_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store(f"file://{tmp_path}/lake")
    with Db.open("db", store, DbOptions(l0_max_ssts=2)) as db:
        for i in range(2):
            db.put(f"k{i}".encode(), b"v")
            db.flush_memtable()
        db.put(b"k2", b"v")
        with caplog.at_level(logging.WARNING, logger="slatedb_core.writer.engine"):
            t, outcome = start_recorded(db.flush_memtable)
            deadline = time.monotonic() + 10
            while "l0_max_ssts" not in caplog.text and time.monotonic() < deadline:
                time.sleep(0.02)
        assert not outcome, "the flush did not wait for L0 room"
        text = caplog.text
        assert "no compactor runs in this process" in text, text
        assert "slatedb compact" in text and "DbOptions(compactor=CompactorOptions())" in text
        assert run_compaction_once("db", store, CompactorOptions(l0_trigger=2)) is not None
        t.join(15)
        assert outcome == [None]
        assert [db.get(f"k{i}".encode()) for i in range(3)] == [b"v"] * 3
