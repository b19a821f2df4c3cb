"""``import slatedb_core`` stays lean: every Dagster run worker and Spark Python worker pays it.
pandas (about a third of a second of CPU) is not imported by it: pyarrow imports pandas the first
time a scalar, array or table is built, so none is built at import time."""

from __future__ import annotations

import subprocess
import sys


def test_importing_slatedb_core_does_not_import_pandas() -> None:
    code = "import sys, slatedb_core; print('pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
