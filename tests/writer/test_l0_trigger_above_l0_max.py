"""A writer whose in-process compactor would never compact L0 before its flushes stall.

From review54 (session 54), probing c63afbd's stall handling: with ``DbOptions.l0_max_ssts``
below the embedded compactor's ``CompactorOptions.l0_trigger``, the compactor never schedules an
L0 compaction (it waits for ``l0_trigger`` SSTs, the writer never makes more than
``l0_max_ssts``), and never fails either: the third ``flush_memtable`` of
``DbOptions(l0_max_ssts=2, compactor=CompactorOptions(l0_trigger=4))`` waited forever behind one
warning, and puts after it through backpressure. Such options are refused up front."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import pytest

from slatedb_core.errors import InvalidArgument
from slatedb_core.options import CompactorOptions, DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db

FAST = timedelta(milliseconds=20)


def test_options_whose_compactor_waits_for_more_l0_than_the_writer_allows_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="l0_trigger"):
        DbOptions(l0_max_ssts=2, compactor=CompactorOptions(l0_trigger=4))


def test_equal_limits_compact_and_do_not_stall(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}/lake")
    opts = DbOptions(
        l0_max_ssts=2,
        manifest_poll_interval=FAST,
        compactor=CompactorOptions(poll_interval=FAST, l0_trigger=2),
    )
    db = Db.open("db", store, opts)
    try:

        def go() -> None:
            for i in range(6):
                db.put(b"k%d" % i, b"v")
                db.flush_memtable()

        t = threading.Thread(target=go, daemon=True)
        t.start()
        t.join(30)
        assert not t.is_alive(), "the writer stalled with a compactor that can compact"
        assert [db.get(b"k%d" % i) for i in range(6)] == [b"v"] * 6
        db.close()
    except BaseException:
        db._simulate_crash()
        raise
