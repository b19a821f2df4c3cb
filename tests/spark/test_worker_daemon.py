"""What a Python worker forked by our daemon (spark_jobs.worker_daemon) starts with: every module a
read's task imports already loaded, and a collector that walks only the worker's own objects (a
reused worker runs a full ``gc.collect()`` after each task; it used to walk the ~100k objects of
the preloaded modules, ~110 ms of CPU per task)."""

from __future__ import annotations

import json
import subprocess
import sys

# Runs the daemon module as Spark does (``python -m``) with pyspark's fork loop replaced by a probe:
# what the probe sees is what every worker the loop would fork starts with.
PROBE = """
import gc, json, runpy, sys
import pyspark.daemon

def probe() -> None:
    before = set(sys.modules)
    import numpy as np
    import pyarrow as pa
    pa.array(np.arange(3))  # a scan's first Arrow array from numpy: pyarrow imports pandas then
    gc.collect()
    print("PROBE " + json.dumps({
        "tracked": len(gc.get_objects()),
        "imported": sorted(m for m in set(sys.modules) - before if "." not in m),
    }))

pyspark.daemon.manager = probe
runpy.run_module("spark_jobs.worker_daemon", run_name="__main__")
"""


def test_a_forked_worker_starts_with_its_modules_loaded_and_the_collector_frozen() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    got = json.loads(next(ln for ln in out.splitlines() if ln.startswith("PROBE "))[6:])
    assert got["imported"] == []
    assert got["tracked"] < 10_000  # ~100k before the freeze
