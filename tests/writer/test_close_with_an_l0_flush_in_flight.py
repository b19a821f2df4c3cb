"""A clean close while the background L0 flush's upload is slower than the close's join.

From review54 (session 54) of 381989a. ``close()`` flushes the WAL, then stops the background
threads, joining each for at most 30 s (``WalFlusher.shut_down``), then commits the update that
drops the writer checkpoint. An L0 flush whose upload outlasts that join goes on after
``close()`` returned: it commits its L0 SST with the writer checkpoint (``l0_flush_change``
always re-establishes it), so a "clean" close leaves the checkpoint 381989a drops, and the
closed writer commits a manifest after its close reported success."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest

from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultyStore
from slatedb_core.writer.db import Db


@pytest.mark.slow
def test_no_commit_after_a_clean_close(tmp_path: Path) -> None:
    inner = open_store(f"file://{tmp_path}/lake")
    faulty = FaultyStore(inner, pause_timeout_s=120)
    opts = DbOptions(
        flush_interval=timedelta(milliseconds=10),
        l0_sst_size_bytes=1024,
        manifest_poll_interval=timedelta(hours=1),
    )
    db = Db.open("db", faulty, opts)
    hold = faulty.pause("l0 upload", "put_if_absent", "db/compacted/*")
    for i in range(40):  # past l0_sst_size_bytes: the background L0 flusher takes it
        db.put(b"k%03d" % i, b"v" * 64, await_durable=False)
    assert hold.wait_reached(20), "no background L0 flush started"
    ms = ManifestStore(inner, "db")
    db.close()
    closed_at = ms.read_latest().id
    hold.release()
    time.sleep(3)  # the held flush's upload and commit, if it goes on
    latest = ms.read_latest()
    assert [c for c in latest.manifest.checkpoints if c.writer_epoch is not None] == []
    assert latest.id == closed_at, "the closed writer committed a manifest after close()"
