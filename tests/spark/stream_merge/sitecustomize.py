"""Loaded (as ``sitecustomize``) by every Python process of a streaming test's driver, when this
directory is on PYTHONPATH (tests/spark/test_stream_after_merge.py): with
``SLATEDB_TEST_MERGE_AFTER_SHARD_COMMIT`` set (a marker file) and the marker absent, the stream
writer's shard commits run one at a time, and right after the first one returns, shards 0 and 1
of the table ``SLATEDB_TEST_MERGE_TABLE`` at ``SLATEDB_TEST_MERGE_URL`` are merged, as the
Dagster rescaling asset merges small shards on its own. Before issue 37's fix the merge went
through, the batch's other shard commit was refused with ``ShardMapConflict`` and the query
failed (hole 1); now the merge is refused with ``MergeBlockedByBatch`` (the batch reached one
shard only), which the hook, like the asset, notes in the marker ("blocked") and lets go."""

from __future__ import annotations

import os
import threading

_MARKER = os.environ.get("SLATEDB_TEST_MERGE_AFTER_SHARD_COMMIT")

if _MARKER:
    from typing import Any

    import spark_jobs.datasource_write as _write
    from slatedb_core import Table, open_store
    from slatedb_core.errors import MergeBlockedByBatch

    _marker: str = _MARKER
    _real = _write.commit_shard  # type: ignore[attr-defined]
    _lock = threading.Lock()

    def _commit_then_merge(*args: Any, **kwargs: Any) -> Any:
        with _lock:
            result = _real(*args, **kwargs)
            if not os.path.exists(_marker):
                store = open_store(os.environ["SLATEDB_TEST_MERGE_URL"])
                with Table.open(os.environ["SLATEDB_TEST_MERGE_TABLE"], store) as t:
                    try:
                        t.merge(0)
                        outcome = "merged"
                    except MergeBlockedByBatch:
                        outcome = "blocked"
                with open(_marker, "w") as f:
                    f.write(f"{outcome} after shard {result.shard_index}\n")
            return result

    _write.commit_shard = _commit_then_merge  # type: ignore[attr-defined]
