"""A ``writeStream.format("slatedb")`` query whose micro-batch committed one shard when a merge
of that shard and the next refused the other's commit (``ShardMapConflict``), restarted on the
same checkpoint, ends with every row of the batch (issue 37, hole 1: the merged shard recorded
the batch as applied, so the restarted query skipped it and reported success with 50 of 100
rows). The merge happens inside the driver's commit, right after the first shard's
(tests/spark/stream_merge/sitecustomize.py); the driver is tests/spark/stream_crash/driver.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slatedb_core import Table, open_store
from slatedb_core.manifest.store import ManifestStore

pytestmark = [pytest.mark.spark, pytest.mark.slow]

HERE = Path(__file__).parent
TABLE = "events"
ROWS = {f"k{i:03d}": f"v{i}" for i in range(100)}
MID = b"k050"


def run_driver(
    source: Path, url: str, checkpoint: Path, marker: Path | None
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    hook = [str(HERE / "stream_merge")] if marker is not None else []
    env["PYTHONPATH"] = os.pathsep.join(
        [*hook, str(HERE.parents[1]), env.get("PYTHONPATH", "")]
    )
    for name in ("SLATEDB_TEST_MERGE_AFTER_SHARD_COMMIT", "SLATEDB_TEST_KILL_AFTER_SHARD_COMMITS"):
        env.pop(name, None)
    if marker is not None:
        env["SLATEDB_TEST_MERGE_AFTER_SHARD_COMMIT"] = str(marker)
        env["SLATEDB_TEST_MERGE_URL"] = url
        env["SLATEDB_TEST_MERGE_TABLE"] = TABLE
    return subprocess.run(
        [sys.executable, str(HERE / "stream_crash" / "driver.py"), str(source), url, TABLE,
         str(checkpoint)],
        env=env, start_new_session=True, capture_output=True, text=True, timeout=600,
    )


def test_a_stream_restarted_after_a_merge_refused_its_batch_writes_every_row(
    tmp_path: Path,
) -> None:
    url = (tmp_path / "store").as_uri()
    store = open_store(url)
    Table.create(TABLE, store, split_points=[MID]).close()
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    (source / "batch-000.json").write_text(
        "".join(json.dumps({"id": k, "v": v}) + "\n" for k, v in ROWS.items())
    )
    marker = tmp_path / "merged"

    # 1. batch 0 commits one shard; the merge refuses the other; the query fails
    failed = run_driver(source, url, checkpoint, marker)
    assert marker.exists(), f"no shard committed ({failed.returncode}):\n{failed.stderr[-3000:]}"
    assert failed.returncode != 0, failed.stdout
    assert "ShardMapConflict" in failed.stderr
    with Table.open(TABLE, store) as t:
        assert len(t.shards) == 1
        assert len(dict(t.scan())) == 50
        (merged,) = t.shards
    # the merged shard does not record batch 0: only one of its two ranges had it
    assert ManifestStore(store, merged.db_path).read_latest().manifest.transactions == ()

    # 2. restarted on the same checkpoint: batch 0 again, on the merged shard
    done = run_driver(source, url, checkpoint, None)
    assert done.returncode == 0, done.stderr[-4000:]
    with Table.open(TABLE, store) as t:
        got = {k.decode(): v for k, v in t.scan()}
    assert got == {k: json.dumps({"v": v}, separators=(",", ":")).encode()
                   for k, v in ROWS.items()}
    (record,) = ManifestStore(store, merged.db_path).read_latest().manifest.transactions
    assert record.app_id.startswith("stream:") and record.version == 0
