"""Bad arguments to the ``slatedb`` CLI: a clear message, the documented exit code, no traceback,
and the store untouched.

Exit codes (``slatedb_core.cli.main``): 2 for what click rejects while parsing (missing or unknown
options, malformed ids, durations, keys, ranges), 1 for a typed SlateDB error raised by the
library (``error: InvalidArgument: ...`` for a bad --path or --url, ``CheckpointNotFound``, ...).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from slatedb_core import Db, ObjectStore, open_store
from slatedb_core.cli.main import cli

UNKNOWN = "01740ee5-6459-44af-9a45-85deb6e468e3"


@pytest.fixture
def lake() -> Iterator[tuple[str, ObjectStore]]:
    url = f"memory://bad-cli-{uuid.uuid4().hex}"
    store = open_store(url)
    db = Db.open("good", store)
    db.put(b"k", b"v")
    db.flush_memtable()
    db.close()
    yield url, store


def snapshot(store: ObjectStore) -> dict[str, bytes]:
    return {m.path: store.get(m.path).data for m in store.list("")}


USAGE_ERRORS: list[tuple[list[str], str]] = [
    ([], "Usage"),
    (["read-manifest"], "Missing option '--url'"),
    (["--url", "{url}", "read-manifest"], "Missing option '--path'"),
    (["--url", "{url}", "--path", "good"], "Missing command"),
    (["--url", "{url}", "--path", "good", "no-such-command"], "No such command"),
    (["--url", "{url}", "--path", "good", "read-manifest", "--id", "0"], "--id"),
    (["--url", "{url}", "--path", "good", "read-manifest", "--id", "one"], "--id"),
    (["--url", "{url}", "--path", "good", "read-manifest", "--bogus"], "No such option"),
    (["--url", "{url}", "--path", "good", "list-manifests", "--start", "5", "--end", "2"], "--end"),
    (["--url", "{url}", "--path", "good", "list-manifests", "--start", "-1"], "--start"),
    (["--url", "{url}", "--path", "good", "delete-checkpoint"], "Missing option"),
    (["--url", "{url}", "--path", "good", "delete-checkpoint", "--id", "nope"], "not a valid UUID"),
    (
        ["--url", "{url}", "--path", "good", "refresh-checkpoint", "--id", "1234"],
        "not a valid UUID",
    ),
    (["--url", "{url}", "--path", "good", "create-checkpoint", "--lifetime", "soon"], "--lifetime"),
    (["--url", "{url}", "--path", "good", "create-checkpoint", "--lifetime", "-5s"], "--lifetime"),
    (["--url", "{url}", "--path", "good", "create-checkpoint", "--lifetime", "0s"], "--lifetime"),
    (["--url", "{url}", "--path", "good", "create-checkpoint", "--source", "x"], "--source"),
    (
        ["--url", "{url}", "--path", "good", "create-checkpoint", "--lifetime", "99999999999999d"],
        "too large",
    ),
    (["--url", "{url}", "--path", "good", "get"], "Missing argument"),
    (["--url", "{url}", "--path", "good", "get", ""], "KEY"),
    (["--url", "{url}", "--path", "good", "get", "zz", "--format", "hex"], "KEY"),
    (["--url", "{url}", "--path", "good", "get", "k", "--format", "base64"], "--format"),
    (["--url", "{url}", "--path", "good", "scan", "--max-keys", "0"], "--max-keys"),
    (["--url", "{url}", "--path", "good", "scan", "--from", "b", "--to", "a"], "--to"),
    (["--url", "{url}", "--path", "good", "scan", "--prefix", "a", "--from", "b"], "--prefix"),
    (["--url", "{url}", "--path", "good", "gc", "--min-age", "later"], "--min-age"),
    (["--url", "{url}", "--path", "good", "destroy"], "--soft"),
    (["--url", "{url}", "--path", "good", "destroy", "--soft", "--hard", "-y"], "--soft"),
    (["--url", "{url}", "--path", "c", "clone"], "Missing option '--parent'"),
    (["--url", "{url}", "--path", "c", "clone", "--parent", "good", "--checkpoint", "zz"], "UUID"),
    (
        ["--url", "{url}", "--path", "c", "clone", "--parent", "good", "--from", "b", "--to", "a"],
        "empty",
    ),
    (["--url", "{url}", "--path", "c", "clone", "--parent", "good", "--from", "0xzz"], "hex"),
    (["--url", "{url}", "--path", "u", "union"], "Missing option '--source'"),
    (["--url", "{url}", "--path", "u", "union", "--source", ""], "PATH"),
    (["--url", "{url}", "--path", "u", "union", "--source", "good:nope"], "UUID"),
    (["--url", "{url}", "--path", "u", "union", "--source", "good@zz"], "FROM..TO"),
    (
        [
            "--url",
            "{url}",
            "--path",
            "p",
            "project",
            "--source",
            "good",
            "--from",
            "z",
            "--to",
            "a",
        ],
        "empty",
    ),
]

TYPED_ERRORS: list[tuple[list[str], str]] = [
    (["--url", "{url}", "--path", "..", "read-manifest"], "InvalidArgument"),
    (["--url", "{url}", "--path", "", "list-manifests"], "InvalidArgument"),
    (["--url", "{url}", "--path", "/good", "list-checkpoints"], "InvalidArgument"),
    (["--url", "{url}", "--path", "good/", "create-checkpoint"], "InvalidArgument"),
    (["--url", "{url}", "--path", "a\\b", "gc"], "InvalidArgument"),
    (["--url", "{url}", "--path", "good/../good", "compact"], "InvalidArgument"),
    (["--url", "{url}", "--path", "../x", "destroy", "--hard", "-y"], "InvalidArgument"),
    (["--url", "{url}", "--path", "..", "clone", "--parent", "good"], "InvalidArgument"),
    (["--url", "{url}", "--path", "c", "clone", "--parent", "../good"], "InvalidArgument"),
    (["--url", "{url}", "--path", "good", "clone", "--parent", "good"], "InvalidArgument"),
    (["--url", "{url}", "--path", "u", "union", "--source", "../x"], "InvalidArgument"),
    (["--url", "ftp://host/x", "--path", "good", "read-manifest"], "InvalidArgument"),
    (["--url", "s3://", "--path", "good", "read-manifest"], "InvalidArgument"),
    (["--url", "s3://bad bucket", "--path", "good", "read-manifest"], "InvalidArgument"),
    (["--url", "file://host/x", "--path", "good", "read-manifest"], "InvalidArgument"),
    (["--url", "   ", "--path", "good", "read-manifest"], "InvalidArgument"),
    (["--url", "{url}", "--path", "good", "read-manifest", "--id", "99"], "ObjectNotFound"),
    # argv bytes that are not UTF-8 reach click as surrogate escapes; a name must be text
    (
        ["--url", "{url}", "--path", "good", "create-checkpoint", "--name", "\udcff"],
        "InvalidArgument",
    ),
    (["--url", "{url}", "--path", "missing", "read-manifest"], "DatabaseNotFound"),
    (["--url", "{url}", "--path", "missing", "destroy", "--soft", "-y"], "DatabaseNotFound"),
    (
        ["--url", "{url}", "--path", "good", "delete-checkpoint", "--id", UNKNOWN],
        "CheckpointNotFound",
    ),
    (
        ["--url", "{url}", "--path", "good", "refresh-checkpoint", "--id", UNKNOWN],
        "CheckpointNotFound",
    ),
    (
        ["--url", "{url}", "--path", "good", "create-checkpoint", "--source", UNKNOWN],
        "CheckpointNotFound",
    ),
    (
        ["--url", "{url}", "--path", "good", "get", "k", "--checkpoint", UNKNOWN],
        "CheckpointNotFound",
    ),
    (["--url", "{url}", "--path", "good", "scan", "--checkpoint", UNKNOWN], "CheckpointNotFound"),
    (
        ["--url", "{url}", "--path", "c", "clone", "--parent", "good", "--checkpoint", UNKNOWN],
        "SourceCheckpointLost",
    ),  # a CheckpointNotFound that says how to recover
]


def _invoke(args: list[str], url: str) -> tuple[int, str, BaseException | None]:
    result = CliRunner().invoke(cli, [a.replace("{url}", url) for a in args])
    return result.exit_code, result.output, result.exception


@pytest.mark.parametrize(("args", "expected"), USAGE_ERRORS)
def test_usage_errors_exit_2_with_a_message_and_write_nothing(
    lake: tuple[str, ObjectStore], args: list[str], expected: str
) -> None:
    url, store = lake
    before = snapshot(store)
    code, output, exc = _invoke(args, url)
    assert isinstance(exc, SystemExit), f"raised {exc!r} instead of exiting"
    assert code == 2, output
    assert expected in output and "Traceback" not in output
    assert snapshot(store) == before


@pytest.mark.parametrize(("args", "error_type"), TYPED_ERRORS)
def test_typed_errors_exit_1_naming_the_error_and_write_nothing(
    lake: tuple[str, ObjectStore], args: list[str], error_type: str
) -> None:
    url, store = lake
    before = snapshot(store)
    code, output, exc = _invoke(args, url)
    assert isinstance(exc, SystemExit), f"raised {exc!r} instead of exiting"
    assert code == 1, output
    assert output.startswith(f"error: {error_type}: "), output
    assert "Traceback" not in output
    assert snapshot(store) == before


@pytest.mark.parametrize(
    "args",
    [
        ["--path", "c", "clone", "--parent", "good", "--from", "\udcff"],
        ["--path", "p", "project", "--source", "good", "--to", "\udcff"],
        ["--path", "u", "union", "--source", "good@\udcff.."],
        ["--path", "good", "scan", "--from", "\udcff"],
    ],
)
def test_keys_with_bytes_that_are_not_utf8_are_taken_as_given(
    lake: tuple[str, ObjectStore], args: list[str]
) -> None:
    """Before the fix, clone/project/union crashed with a UnicodeEncodeError traceback."""
    url, _ = lake
    code, output, exc = _invoke(["--url", url, *args], url)
    assert isinstance(exc, SystemExit) or exc is None, f"raised {exc!r}"
    assert code == 0, output
