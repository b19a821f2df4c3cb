"""``python -m spark_jobs.ingest`` refuses what it can see is wrong with one line that says what
to do, before Spark starts (issue 40, item 6): a missing table (pass --create), --create on an
existing table, a key column the input does not have, a --url folder that does not exist.
Before the fix each was a Python traceback, after Spark had started (the key column, the
missing table), or after the table was created (--create on an existing one wrote nothing but
raised ObjectAlreadyExists). Run as users run it: a subprocess of the module."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slatedb_core import Table, open_store

SPARK_STARTED = "log4j"  # Spark's first line on stderr when its JVM starts


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    # as a user runs it: without the test suite's SLATEDB_FILE_SYNC=false (and its warning)
    env = {k: v for k, v in os.environ.items() if k != "SLATEDB_FILE_SYNC"}
    return subprocess.run(
        [sys.executable, "-m", "spark_jobs.ingest", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parents[2],
        env=env,
    )


@pytest.fixture
def src(tmp_path: Path) -> str:
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "v": ["1", "2"]}), path)
    return str(path)


def _one_line_error(r: subprocess.CompletedProcess[str], kind: str, *needles: str) -> str:
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr[-2000:]
    assert SPARK_STARTED not in r.stderr and "Traceback" not in r.stderr
    assert lines[0].startswith(f"error: {kind}: "), lines[0]
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def test_missing_table_says_pass_create(tmp_path: Path, src: str) -> None:
    url = (tmp_path / "lake").as_uri()
    open_store(url)
    r = _run("--input", src, "--url", url, "--path", "t", "--key-column", "id")
    _one_line_error(r, "TableNotFound", "--create")


def test_create_on_existing_table_says_it_exists(tmp_path: Path, src: str) -> None:
    url = (tmp_path / "lake").as_uri()
    Table.create("t", open_store(url)).close()
    r = _run("--input", src, "--url", url, "--path", "t", "--key-column", "id", "--create", "")
    _one_line_error(r, "TableAlreadyExists", "without --create")


def test_wrong_key_column_refused_before_spark(tmp_path: Path, src: str) -> None:
    url = (tmp_path / "lake").as_uri()
    Table.create("t", open_store(url)).close()
    r = _run("--input", src, "--url", url, "--path", "t", "--key-column", "nope")
    _one_line_error(r, "InputColumnMissing", "'nope'", "id, v", "--key-column")


def test_missing_url_folder_is_named(tmp_path: Path, src: str) -> None:
    missing = tmp_path / "no" / "such" / "lake"
    r = _run("--input", src, "--url", missing.as_uri(), "--path", "t", "--key-column", "id")
    line = _one_line_error(r, "StoreDirectoryMissing", str(missing), "does not exist")
    assert "create it" in line
    assert not missing.exists()  # nothing was created on the way
