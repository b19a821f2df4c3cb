"""Adversarial review of issue 39's fixes: each test is an attack that got through, as a script
would run it against main (issue 39, "send an adversarial helper at the same surfaces").
"""

from __future__ import annotations

import html
import re
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


@pytest.mark.xfail(
    strict=True,
    reason="review of issue 39, reported not fixed: create-bucket runs `mc alias set ... "
    '"$MINIO_ROOT_PASSWORD"`, so the expanded password is in mc\'s argv, which every local user '
    "of the Docker host reads in ps (/proc/<pid>/cmdline) while it runs; needs a Docker run to "
    "check a replacement (mc alias import from stdin, or MC_HOST_lake with an encoded URL)",
)
def test_no_compose_command_expands_a_secret_into_argv() -> None:
    """A shell command of a Compose service that expands a secret variable as an argument puts
    the secret on a command line (SECURITY.md: "No secret appears on a command line")."""
    compose = yaml.safe_load((INFRA / "docker-compose.yml").read_text())
    found = []
    for name, svc in compose["services"].items():
        for field in ("command", "entrypoint"):
            value = svc.get(field) or []
            for arg in [value] if isinstance(value, str) else value:
                found += [f"{name}.{field}: ${v}" for v in _SECRET_VAR.findall(str(arg))]
    assert not found, found
