"""The ``slatedb`` CLI cases of RELIABILITY.md (items 15, 17, 18), in the style of
``test_bad_arguments``: exit 1 with ``error: <Type>: ...`` on stderr for a typed error, exit 2 for
what click rejects, never a traceback, and the store untouched.

* 18: ``scan --json`` that failed midway left ``[`` (and the rows read so far) on stdout, a
  truncated JSON document; ``gc`` on a missing database exited 0 while ``compact`` exited 1;
* 17: a ``--path`` with a control character or an undecodable byte gave a retryable StoreError;
* 15: durations longer than a year are refused before any request."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result

from slatedb_core import CompactorOptions, Db, ObjectStore, admin, open_store, run_compaction_once
from slatedb_core.cli.main import cli


@pytest.fixture
def lake() -> Iterator[tuple[str, ObjectStore]]:
    url = f"memory://bad-cli-review-{uuid.uuid4().hex}"
    store = open_store(url)
    with Db.open("good", store) as db:
        db.put(b"k", b"v")
        db.flush_memtable()
    yield url, store


def snapshot(store: ObjectStore) -> dict[str, bytes]:
    return {m.path: store.get(m.path).data for m in store.list("")}


def _invoke(url: str, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--url", url, *args])


def _assert_typed_error(result: Result, error_type: str) -> None:
    assert isinstance(result.exception, SystemExit), f"raised {result.exception!r}"
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(f"error: {error_type}: "), result.stderr
    assert "Traceback" not in result.output


# ---- item 18: scan --json that fails midway --------------------------------------------------
ROWS = 66_000  # more than one 65536-row read batch: the failure comes after rows were read


def _damaged_run(store: ObjectStore) -> None:
    """``d`` with one sorted run of several SSTs, the last of which has a damaged block."""
    with Db.open("d", store) as db:
        for i in range(ROWS):
            db.put(b"k%05d" % i, b"v", await_durable=False)
        db.flush_memtable()
    run_compaction_once("d", store, CompactorOptions(l0_trigger=1, max_sst_size_bytes=256 * 1024))
    m = admin.read_manifest(store, "d").manifest
    assert not m.l0 and len(m.compacted) == 1 and len(m.compacted[0].views) > 2
    last = m.compacted[0].views[-1].sst_id
    path = f"d/compacted/{last}.sst"
    data = bytearray(store.get(path).data)
    data[len(data) // 3] ^= 0xFF  # a data block, read only once the scan gets there
    store.put(path, bytes(data))


# ---- item 17: control characters and undecodable bytes in --path -----------------------------
PATHS = ["a\tb", "a\x01b", "a\udcffb", "good\n"]


COMMANDS = [
    ["read-manifest"],
    ["list-manifests"],
    ["list-checkpoints"],
    ["create-checkpoint"],
    ["get", "k"],
    ["scan"],
    ["gc"],
    ["compact"],
    ["destroy", "--hard", "-y"],
    ["clone", "--parent", "good"],
    ["table", "show"],
]


# ---- item 18: gc on a missing database ------------------------------------------------------
@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_gc_of_a_missing_database_fails_like_compact(
    lake: tuple[str, ObjectStore], json_flag: list[str]
) -> None:
    """Found by the review of RELIABILITY.md, items 15, 17, 18 (was test_bad_input_cli_review.py)."""
    url, store = lake
    before = snapshot(store)
    compact = _invoke(url, "--path", "missing", "compact", *json_flag)
    gc = _invoke(url, "--path", "missing", "gc", "--min-age", "0s", *json_flag)
    _assert_typed_error(compact, "DatabaseNotFound")
    _assert_typed_error(gc, "DatabaseNotFound")
    assert gc.stderr == compact.stderr  # the same message, naming the path and the store
    assert "'missing'" in gc.stderr and gc.stdout == ""
    assert snapshot(store) == before


def test_gc_of_a_database_it_deletes_still_succeeds(lake: tuple[str, ObjectStore]) -> None:
    """The pass that deletes a soft-destroyed database reports it (exit 0); only the next pass
    finds nothing there.

    Found by the review of RELIABILITY.md, items 15, 17, 18 (was test_bad_input_cli_review.py)."""
    url, _ = lake
    assert _invoke(url, "--path", "good", "destroy", "--soft", "-y").exit_code == 0
    args = ["--path", "good", "gc", "--min-age", "0s", "--db-delete-grace", "0s"]
    first = _invoke(url, *args)
    assert first.exit_code == 0 and "soft-destroyed database deleted" in first.stdout, first.output
    _assert_typed_error(_invoke(url, *args), "DatabaseNotFound")


def test_scan_json_that_fails_midway_prints_no_partial_document(
    lake: tuple[str, ObjectStore],
) -> None:
    """Found by the review of RELIABILITY.md, items 15, 17, 18 (was test_bad_input_cli_review.py)."""
    url, store = lake
    _damaged_run(store)
    text = _invoke(url, "--path", "d", "scan")
    _assert_typed_error(text, "CorruptionError")
    lines = text.stdout.splitlines()
    assert 0 < len(lines) < ROWS  # the failure really is midway: rows were read before it
    assert all(line.count("\t") == 1 for line in lines)  # text output: complete lines only

    as_json = _invoke(url, "--path", "d", "scan", "--json")
    _assert_typed_error(as_json, "CorruptionError")
    assert as_json.stdout == "", as_json.stdout[:80]


def test_scan_json_output_is_unchanged_when_it_succeeds(lake: tuple[str, ObjectStore]) -> None:
    """Found by the review of RELIABILITY.md, items 15, 17, 18 (was test_bad_input_cli_review.py)."""
    url, store = lake
    with Db.open("good", store) as db:
        db.put(b"k2", b"tab\there")
    result = _invoke(url, "--path", "good", "scan", "--json")
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        '[\n  {"key": "k", "value": "v"},\n  {"key": "k2", "value": "tab\\\\there"}\n]\n'
    )
    assert json.loads(result.stdout)[1] == {"key": "k2", "value": "tab\\there"}
    empty = _invoke(url, "--path", "good", "scan", "--json", "--prefix", "zz")
    assert empty.exit_code == 0 and empty.stdout == "[]\n"


@pytest.mark.parametrize("path", PATHS)
def test_paths_with_control_characters_are_invalid_argument(
    lake: tuple[str, ObjectStore], path: str
) -> None:
    """Found by the review of RELIABILITY.md, items 15, 17, 18 (was test_bad_input_cli_review.py)."""
    url, store = lake
    before = snapshot(store)
    for command in COMMANDS:
        result = _invoke(url, "--path", path, *command)
        _assert_typed_error(result, "InvalidArgument")
    _assert_typed_error(_invoke(url, "--path", "c", "clone", "--parent", path), "InvalidArgument")
    _assert_typed_error(_invoke(url, "--path", "u", "union", "--source", path), "InvalidArgument")
    assert snapshot(store) == before


# ---- item 15: durations over a year -----------------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [
        ["create-checkpoint", "--lifetime", "366d"],
        ["create-checkpoint", "--lifetime", "1y 1us"],
        ["refresh-checkpoint", "--id", "01740ee5-6459-44af-9a45-85deb6e468e3", "--lifetime", "2y"],
        ["gc", "--min-age", "400d"],
        ["gc", "--db-delete-grace", "53w"],
    ],
)
def test_durations_over_a_year_are_usage_errors(
    lake: tuple[str, ObjectStore], args: list[str]
) -> None:
    """Found by the review of RELIABILITY.md, items 15, 17, 18 (was test_bad_input_cli_review.py)."""
    url, store = lake
    before = snapshot(store)
    result = _invoke(url, "--path", "good", *args)
    assert isinstance(result.exception, SystemExit), f"raised {result.exception!r}"
    assert result.exit_code == 2, result.output
    assert "too large (at most 1y)" in result.output and "Traceback" not in result.output
    assert snapshot(store) == before


def test_a_lifetime_of_exactly_a_year_is_accepted(lake: tuple[str, ObjectStore]) -> None:
    """Found by the review of RELIABILITY.md, items 15, 17, 18 (was test_bad_input_cli_review.py)."""
    url, _ = lake
    result = _invoke(url, "--path", "good", "create-checkpoint", "--lifetime", "1y", "--json")
    assert result.exit_code == 0, result.output
    cp = json.loads(result.stdout)
    assert cp["expire_time_s"] - cp["create_time_s"] in (365 * 86_400, 365 * 86_400 + 1)
