"""A ``writeStream.format("slatedb")`` query whose micro-batch has committed one shard when a
merge of that shard and the next is tried (as the Dagster rescaling asset merges small shards on
its own) loses no row of the batch (issue 37, hole 1). Before the fix the merge went through, the
merged shard recorded the batch as applied, the other shard's commit was refused and the query
restarted on its checkpoint skipped the batch: success with 50 of 100 rows. Now the merge is
refused (``MergeBlockedByBatch``: the batch reached one shard only), the batch completes, and
the merge goes through afterwards. The merge runs inside the driver's commit, right after the
first shard's (tests/spark/stream_merge/sitecustomize.py); the driver is
tests/spark/stream_crash/driver.py."""

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
    env["PYTHONPATH"] = os.pathsep.join([*hook, str(HERE.parents[1]), env.get("PYTHONPATH", "")])
    for name in ("SLATEDB_TEST_MERGE_AFTER_SHARD_COMMIT", "SLATEDB_TEST_KILL_AFTER_SHARD_COMMITS"):
        env.pop(name, None)
    if marker is not None:
        env["SLATEDB_TEST_MERGE_AFTER_SHARD_COMMIT"] = str(marker)
        env["SLATEDB_TEST_MERGE_URL"] = url
        env["SLATEDB_TEST_MERGE_TABLE"] = TABLE
    return subprocess.run(
        [
            sys.executable,
            str(HERE / "stream_crash" / "driver.py"),
            str(source),
            url,
            TABLE,
            str(checkpoint),
        ],
        env=env,
        start_new_session=True,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_merge_between_a_batchs_shard_commits_is_refused_and_loses_no_row(
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
    want = {k: json.dumps({"v": v}, separators=(",", ":")).encode() for k, v in ROWS.items()}

    # 1. batch 0 commits one shard; the merge tried then is refused; the batch completes
    ran = run_driver(source, url, checkpoint, marker)
    assert marker.exists(), f"no shard committed ({ran.returncode}):\n{ran.stderr[-3000:]}"
    assert marker.read_text().startswith("blocked"), marker.read_text()
    assert ran.returncode == 0, ran.stderr[-4000:]
    with Table.open(TABLE, store) as t:
        assert len(t.shards) == 2
        assert {k.decode(): v for k, v in t.scan()} == want

    # 2. with the batch on both shards, the merge goes through and keeps it applied
    with Table.open(TABLE, store) as t:
        t.merge(0)
        (merged,) = t.shards
    (record,) = ManifestStore(store, merged.db_path).read_latest().manifest.transactions
    assert record.app_id.startswith("stream:") and record.version == 0

    # 3. restarted on the same checkpoint: nothing is applied twice, nothing lost
    done = run_driver(source, url, checkpoint, None)
    assert done.returncode == 0, done.stderr[-4000:]
    with Table.open(TABLE, store) as t:
        assert {k.decode(): v for k, v in t.scan()} == want
    assert ManifestStore(store, merged.db_path).read_latest().manifest.transactions == (record,)
