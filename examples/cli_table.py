"""The ``slatedb`` CLI on a sharded table, as an operator would type it, with the output.

Run it with the project's interpreter (no need to activate the venv)::

    .venv/bin/python examples/cli_table.py            # a temporary directory, deleted after

It creates a 3-shard table with ``slatedb table create``, fills it with 300 rows through the
engine API (the CLI reads and repairs; writes come from Spark jobs or the API), then shows the
shards, counts the keys (``table count``), prints the storage figures (``table stats``), scans a
key range, and ends with ``--json`` output for scripts. A few seconds on 2 cores.

Each command is printed as ``$ slatedb ...`` before its output. ``--url`` and ``--path`` come
from ``SLATEDB_URL`` and ``SLATEDB_PATH`` here, as an operator would export them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa

import slatedb_core as sc

# The CLI is installed next to this interpreter (.venv/bin/slatedb): found without PATH.
SLATEDB = str(Path(sys.executable).parent / "slatedb")


def slatedb(*args: str, env: dict[str, str]) -> str:
    """Run one CLI command, echo it and its output, and return the output (exit 0 required)."""
    print("$ slatedb", " ".join(args))
    done = subprocess.run([SLATEDB, *args], env=env, capture_output=True, text=True, check=False)
    print(done.stdout, end="")
    if done.returncode != 0:
        sys.exit(f"slatedb {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def fill(url: str, table_path: str, rows: int) -> None:
    """Write ``rows`` keys ``user-NNNN``, each shard's in one ``bulk_ingest`` (sorted straight
    into an L0 SST of the shard, one manifest update) through the shard's writer."""
    keys = [f"user-{i:04d}".encode() for i in range(rows)]
    with sc.Table.open(table_path, sc.open_store(url)) as table:
        for shard in table.shards:
            mine = [k for k in keys if shard.contains(k)]
            values = [json.dumps({"visits": int(k[-4:]) % 7}).encode() for k in mine]
            with table.writer(shard) as writer:  # a shard's writer is a Db (fences older ones)
                writer.bulk_ingest(pa.table({"key": mine, "value": values}))
    print(f"(wrote {rows} rows through the engine API)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="store directory (default: a temporary one, deleted after)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="slatedb-cli-") as tmp:
        root = Path(args.dir or tmp).resolve()
        root.mkdir(parents=True, exist_ok=True)
        # the store and the table for every command below (or pass --url/--path each time)
        env = {**os.environ, "SLATEDB_URL": str(root), "SLATEDB_PATH": "users", "COLUMNS": "100"}
        slatedb("table", "create", "--split", "user-0100", "--split", "user-0200", env=env)
        fill(root.as_uri(), "users", rows=300)
        slatedb("table", "shards", env=env)
        slatedb("table", "count", env=env)
        slatedb("table", "stats", env=env)
        slatedb("table", "scan", "--from", "user-0098", "--to", "user-0102", env=env)
        slatedb("table", "get", "user-0150", env=env)
        # --json belongs to the command (after it), never before it
        counted = json.loads(slatedb("table", "count", "--json", env=env))
        print("total from the JSON output:", counted["keys"])
        # one shard is a database of its own: the plain commands take its path
        shard0 = {**env, "SLATEDB_PATH": "users/shards/0000000001"}
        slatedb("count", env=shard0)
    print("cli_table: done")


if __name__ == "__main__":
    main()
