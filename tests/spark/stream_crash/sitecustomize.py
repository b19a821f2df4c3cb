"""Loaded (as ``sitecustomize``) by every Python process of a streaming test's driver, when this
directory is on PYTHONPATH: with ``SLATEDB_TEST_KILL_AFTER_SHARD_COMMITS`` set and its marker file
absent, the stream writer's shard commits run one at a time, and right after the first one
returns, the driver's whole process group (driver, JVM, Python workers) is killed with SIGKILL:
a query killed between the commits of two shards."""

from __future__ import annotations

import os
import signal
import threading

_MARKER = os.environ.get("SLATEDB_TEST_KILL_AFTER_SHARD_COMMITS")

if _MARKER:
    from typing import Any

    import spark_jobs.datasource_write as _write

    _real = _write.commit_shard
    _lock = threading.Lock()

    def _commit_then_die(*args: Any, **kwargs: Any) -> Any:
        with _lock:
            result = _real(*args, **kwargs)
            if not os.path.exists(_MARKER):
                with open(_MARKER, "w") as f:
                    f.write(f"{result.shard_index}\n")
                os.killpg(os.getpgrp(), signal.SIGKILL)
            return result

    _write.commit_shard = _commit_then_die
