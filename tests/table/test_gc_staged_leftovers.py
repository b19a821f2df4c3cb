"""The table GC sweeps the staged files crashed local-disk creates left in the table's own
folders (shard maps, ingest staging, snapshot records), which no listing shows and no shard's
GC walks; once untouched for an hour and ``min_age``, never a younger one (review51, session 51:
"staged files in a table's own folders are outside any database folder")."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

from slatedb_core import Table
from slatedb_core.store.url import open_store


def _leftover(root: Path, key: str, *, age_s: float) -> Path:
    path = root / f"{key}#{12345}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * 1000)
    when = time.time() - age_s
    os.utime(path, (when, when))
    return path


def test_the_table_gc_sweeps_its_own_folders_staged_files(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    store = open_store(root.as_uri())
    with Table.create("t", store, [b"m"]) as table:
        old = [
            _leftover(root, "t/shardmap/00000000000000000009.shardmap", age_s=7200),
            _leftover(root, "t/_ingest/job/staged/r/p-0-n/r-0-0.sst", age_s=7200),
            _leftover(root, "t/snapshots/nightly/record/00000000000000000002.snapshot", age_s=7200),
        ]
        young = _leftover(root, "t/_ingest/job/staged/r/p-1-n/r-0-1.sst", age_s=60)
        stats = table.collect_garbage(min_age=timedelta(0))
        assert stats.staged_files == 3 and stats.staged_bytes == 3000
        assert not any(p.exists() for p in old) and young.exists()
        patient = table.collect_garbage(min_age=timedelta(hours=3))
        assert patient.staged_files == 0 and young.exists()
        assert len(table.shards) == 2  # the table itself untouched
