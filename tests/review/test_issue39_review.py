"""Adversarial review of issue 39's fixes: each test is an attack that got through, as a script
would run it against main (issue 39, "send an adversarial helper at the same surfaces").
"""

from __future__ import annotations

import html
import re
import shlex
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]
from markdown_it import MarkdownIt

from lakehouse_demo.cluster.settings import INFRA
from orchestration.fleet_report import CheckResult, evaluation
from orchestration.fleet_state import L0
from orchestration.markdown import markdown_literal
from slatedb_core.errors import CorruptionError
from slatedb_core.lifecycle.origin import MAGIC as ORIGIN_MAGIC
from slatedb_core.lifecycle.origin import VERSION as ORIGIN_VERSION
from slatedb_core.lifecycle.origin import origin_path, read_origin
from slatedb_core.meta.envelope import seal
from slatedb_core.store.url import open_store
from slatedb_core.table.ingest import _read_marker
from slatedb_core.table.shardmap import SHARDMAP_MAGIC, SUPPORTED_VERSIONS, decode_shard_map

_MD = MarkdownIt("commonmark").enable("table").enable("strikethrough")

# CommonMark lets a block marker sit after up to three spaces of indentation (4.2, 5.1, 5.2,
# 4.1); a database path may start with spaces (validate_relative_path allows them)
INDENTED_BLOCKS = [
    "  # big heading",
    " ## heading",
    "   ---",
    "  - item",
    "   + item",
    "  1. item",
    " 2) item",
    "   > quote",
]


@pytest.mark.parametrize("name", INDENTED_BLOCKS)
def test_a_name_indented_by_spaces_renders_no_block_markup(name: str) -> None:
    """Review item: markdown_literal escaped a heading, list, rule or quote marker only in the
    first column, so a database path starting with one to three spaces rendered as a heading,
    a list or a horizontal rule in a check description (the UI renders it as Markdown)."""
    ev = evaluation(
        CheckResult(
            database=name,
            check=L0,
            passed=False,
            severity="WARN",
            description=f"{name}: 6 L0 SSTs (threshold 4): over",
        )
    )
    assert ev.description is not None
    out = _MD.render(ev.description)
    tags = set(re.findall(r"</?([a-zA-Z0-9]+)", out))
    assert tags <= {"p"}, f"block markup {tags - {'p'}} rendered from {name!r}"
    assert name.strip() in html.unescape(out)


@pytest.mark.parametrize("name", INDENTED_BLOCKS)
def test_markdown_literal_of_an_indented_marker_is_a_paragraph(name: str) -> None:
    out = _MD.render(markdown_literal(name))
    assert out.startswith("<p>") and out.count("<") == 2, out


# ---- stored JSON documents: bounded like every other decoder ---------------------------------
JSON_PEAK_FACTOR = 16
JSON_PEAK_SLACK = 16 << 20


def _peak(fn: Callable[[], object]) -> tuple[int, BaseException | None]:
    tracemalloc.start()
    try:
        try:
            fn()
            error: BaseException | None = None
        except Exception as e:
            error = e
        return tracemalloc.get_traced_memory()[1], error
    finally:
        tracemalloc.stop()


def _dicts(n: int) -> bytes:
    """A JSON object whose ``x`` is ``n`` one-key dicts: 7 bytes each, ~184 decoded."""
    return b'{"x":[' + b",".join([b'{"":0}'] * n) + b"]}"


def test_a_crafted_shard_map_is_refused_within_bounds() -> None:
    """Review item: json.loads of a stored shard map built a Python object per value, 29x the
    object (a 6 MiB map of small dicts peaked at 196 MiB) before the decoder saw it was no map;
    every Table.open, the CLI's table commands and the discovery sensor read the latest map."""
    data = seal(SHARDMAP_MAGIC, max(SUPPORTED_VERSIONS), _dicts(1_000_000))
    peak, error = _peak(lambda: decode_shard_map(data, map_id=1, table_path="t", name="m"))
    assert isinstance(error, CorruptionError), error
    bound = JSON_PEAK_FACTOR * len(data) + JSON_PEAK_SLACK
    assert peak <= bound, f"peak {peak >> 20} MiB for {len(data) >> 20} MiB (bound {bound >> 20})"


def test_a_crafted_origin_record_is_refused_within_bounds(tmp_path: Path) -> None:
    """The same through a clone's origin record (read by every clone/union re-run)."""
    store = open_store(tmp_path)
    store.put(origin_path("db"), seal(ORIGIN_MAGIC, ORIGIN_VERSION, _dicts(1_000_000)))
    peak, error = _peak(lambda: read_origin(store, "db"))
    assert isinstance(error, CorruptionError), error
    size = store.head(origin_path("db")).size
    bound = JSON_PEAK_FACTOR * size + JSON_PEAK_SLACK
    assert peak <= bound, f"peak {peak >> 20} MiB for {size >> 20} MiB (bound {bound >> 20})"


def test_a_deeply_nested_origin_record_is_corruption(tmp_path: Path) -> None:
    """Review item: origin records caught no RecursionError, so 100,000 nested brackets in one
    escaped as a RecursionError (a traceback in the CLI, not a CorruptionError)."""
    store = open_store(tmp_path)
    store.put(origin_path("db"), seal(ORIGIN_MAGIC, ORIGIN_VERSION, b"[" * 100_000))
    with pytest.raises(CorruptionError):
        read_origin(store, "db")


def test_a_deeply_nested_ingest_marker_reads_as_unreadable(tmp_path: Path) -> None:
    """An ingest done marker is read leniently ({} when unreadable): 100,000 nested brackets
    raised RecursionError instead."""
    store = open_store(tmp_path)
    store.put("t/_ingest/done", b"[" * 100_000)
    assert _read_marker(store, "t/_ingest/done") == {}


# ---- deployment: no credential on a command line ---------------------------------------------
_SECRET_VAR = re.compile(r"\$\$?\{?([A-Z0-9_]*(?:PASSWORD|SECRET|TOKEN)[A-Z0-9_]*)")
# builtins of every POSIX sh (bash, dash, busybox ash): their arguments start no process, so they
# are on no command line; `printf ... | mc` hands a secret to mc on its stdin
_NO_PROCESS = frozenset({"printf", "echo", "export", "read", ":"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SHELLS = frozenset({"sh", "/bin/sh", "bash", "/bin/bash", "ash", "/bin/ash", "dash"})


def _shell_argv_secrets(script: str) -> list[str]:
    """The secret variables ``script`` expands into a new process's argv: a word of a simple
    command that is not a no-process builtin (assignments before the command name go to its
    environment, not its argv)."""
    lexer = shlex.shlex(script.replace("\n", " ; "), posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    found: list[str] = []
    command: list[str] = []
    for word in [*lexer, ";"]:
        if word and set(word) <= set(";&|()<>"):  # an operator ends a simple command
            while command and _ASSIGNMENT.match(command[0]):
                command.pop(0)
            if command and command[0] not in _NO_PROCESS:
                found += [v for w in command for v in _SECRET_VAR.findall(w)]
            command = []
        else:
            command.append(word)
    return found


def _argv_secrets(value: str | list[str] | None, shell_entrypoint: bool) -> list[str]:
    """The secret variables a Compose ``command``/``entrypoint``/healthcheck expands into argv:
    an exec-form argument is argv itself; a shell script is parsed (``sh -c SCRIPT``,
    ``CMD-SHELL``, or a command under an ``["/bin/sh", "-c"]`` entrypoint)."""
    if value is None:
        return []
    args = [value] if isinstance(value, str) else list(value)
    if isinstance(value, str) or shell_entrypoint:
        return [v for script in args for v in _shell_argv_secrets(script)]
    if args[:1] == ["CMD-SHELL"]:
        return [v for script in args[1:] for v in _shell_argv_secrets(script)]
    if len(args) >= 3 and args[0] in _SHELLS and args[1] == "-c":
        return [v for a in args[:2] for v in _SECRET_VAR.findall(a)] + [
            v for script in args[2:] for v in _shell_argv_secrets(script)
        ]
    return [v for a in args for v in _SECRET_VAR.findall(a)]


def test_no_compose_command_expands_a_secret_into_argv() -> None:
    """A Compose service's command, entrypoint or healthcheck that expands a secret variable as
    a process's argument puts the secret on a command line, which every local user of the Docker
    host reads in ps (SECURITY.md: "No secret appears on a command line"). Review of issue 39:
    create-bucket ran `mc alias set lake URL "$MINIO_ROOT_USER" "$MINIO_ROOT_PASSWORD"`; it now
    pipes the keys to mc's stdin with the printf builtin."""
    compose = yaml.safe_load((INFRA / "docker-compose.yml").read_text())
    found = []
    for name, svc in compose["services"].items():
        entry = svc.get("entrypoint")
        shell_entry = isinstance(entry, list) and entry[:1] != [] and entry[0] in _SHELLS
        found += [f"{name}.entrypoint: ${v}" for v in _argv_secrets(entry, False)]
        found += [f"{name}.command: ${v}" for v in _argv_secrets(svc.get("command"), shell_entry)]
        test = (svc.get("healthcheck") or {}).get("test")
        found += [f"{name}.healthcheck: ${v}" for v in _argv_secrets(test, False)]
    assert not found, found


@pytest.mark.parametrize(
    ("value", "shell_entrypoint", "leaks"),
    [
        # the form the review found (create-bucket before the fix)
        (['mc alias set lake http://minio:9000 "$$U" "$$MINIO_ROOT_PASSWORD" && mc mb x'], True, 1),
        (["mc", "alias", "set", "lake", "http://m", "u", "${MINIO_ROOT_PASSWORD}"], False, 1),
        (["sh", "-c", "echo ok; psql -W $$PGPASSWORD"], False, 1),
        (["CMD-SHELL", "curl -u x:$${API_TOKEN} http://h"], False, 1),
        ("mc mb x && X=1 tool --key=$$AWS_SECRET_ACCESS_KEY", False, 1),
        ("FOO=1 export A=$$SPARK_SECRET || (run $$SPARK_SECRET)", False, 1),
        # no process gets it in argv
        (['printf \'%s\\n%s\\n\' "$$U" "$$MINIO_ROOT_PASSWORD" | mc alias set lake h'], True, 0),
        ("MC_SECRET=$$DB_PASSWORD mc mb x; export T=$$TOKEN_X", False, 0),
        (["CMD-SHELL", "pg_isready -U $${POSTGRES_USER}"], False, 0),
    ],
)
def test_the_argv_check_tells_argv_from_stdin_and_environment(
    value: str | list[str], shell_entrypoint: bool, leaks: int
) -> None:
    """The check above finds the form the review reported and the usual variants, and lets a
    builtin's arguments or an assignment (environment) through."""
    assert len(_argv_secrets(value, shell_entrypoint)) == leaks
