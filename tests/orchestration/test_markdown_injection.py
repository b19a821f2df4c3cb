"""Stored names reach the Dagster UI's Markdown only as literal text (issue 39, item 7).

Database paths (discovered from the bucket: anyone who can write an object there makes one),
checkpoint names and error messages quoting them go into Markdown the UI renders: the fleet
headline (``MetadataValue.md`` and the materialization's description) and the descriptions of
check evaluations (rendered by react-markdown with remark-gfm). A backtick closed the headline's
code span, so ``![x](http://evil/p.png)`` in a path rendered an image from any host and
``[a](http://evil)`` a link. Rendered here with markdown-it-py (CommonMark plus GFM tables and
strikethrough); GFM's bare-URL autolinks, which it lacks, are checked on the source.
"""

from __future__ import annotations

import ast
import html
import re
from pathlib import Path

import dagster as dg
import pytest
from markdown_it import MarkdownIt

from orchestration.assets import ASSETS
from orchestration.checks import CHECKS, health_check_job
from orchestration.fleet_report import CheckResult, evaluation
from orchestration.fleet_state import INTACT, L0
from orchestration.fleet_view import FleetRow, fleet_metadata, headline
from slatedb_core.printable import printable
from tests.orchestration.conftest import add_partitions

MD_EVIL = [
    "![x](http://evil/p.png)",
    "[a](javascript:alert(1))",
    "a` ![x](http://evil/p.png) `b",  # closes the code span the headline puts names in
    "``a`` [b](http://evil) ```",
    "<img src=http://evil/p.png>",
    "<script>alert(1)</script>",
    "<http://evil.example>",
    "![x](data:image/png;base64,AAAA)",
    "http://evil.example/x",
    "HTTPS://evil.example/x",
    "www.evil.example",
    "mail@evil.example",
    "[ref]\n\n[ref]: http://evil",
    "[x][1] [1]: http://evil",
    "\u202egnp.exe",
    "\x1b]8;;http://evil\x07x",
    "| a | b |\n|---|---|",
    "# heading",
    "1. item",
    "- item",
    "> quote",
    "**bold** _em_ ~~strike~~ \\*",
    "&lt;img src=x&gt; &#x6A;",
]

_MD = MarkdownIt("commonmark").enable("table").enable("strikethrough")
_ALLOWED_TAGS = {"p", "code", "strong"}


def assert_literal(md: str, *names: str) -> None:
    """``md`` renders with no link, image or raw HTML, no GFM autolink, and shows each name
    as its printable text."""
    out = _MD.render(md)
    tags = set(re.findall(r"</?([a-zA-Z0-9]+)", out))
    assert tags <= _ALLOWED_TAGS, f"markup {tags - _ALLOWED_TAGS} rendered from {md!r}"
    # GFM autolink literals (remark-gfm; markdown-it-py has no linkify here): a protocol URL,
    # a www. domain or an e-mail address left unescaped in the source becomes a link
    outside_code = re.sub(r"(?<!`)(`+)(?!`).*?(?<!`)\1(?!`)", "", md)  # spans are literal
    assert not re.search(r"(?i)(https?|ftp)://|www\.|(?<!\\)@", outside_code), f"autolink in {md!r}"
    text = html.unescape(re.sub(r"<[^>]+>", "", out))
    for name in names:
        assert printable(name) in text, f"{name!r} not shown literally in {text!r}"


def _row(name: str) -> FleetRow:
    return FleetRow(
        database=name,
        state="missing",
        severity=2,
        attention=f"DatabaseNotFound: no manifest under {name}",
        l0_ssts=None,
        wal_backlog=None,
        manifest_lag=None,
        pinned_by=f"{name} at manifest 3",
        last_compaction="never",
        last_gc="never",
        boundary_advanced="",
        latest_alert="",
        manifests=None,
        sst_bytes=None,
    )


@pytest.mark.parametrize("name", MD_EVIL)
def test_fleet_headline_shows_database_names_literally(name: str) -> None:
    rows = [_row(name), _row("tidy")]
    assert_literal(headline(rows), name, f"no manifest under {name}", "tidy")
    md = fleet_metadata(rows, l0_max=4, wal_max=4, lag_max=4, table_rows=10, trend_dbs=[])
    value = md["headline"]
    assert isinstance(value, dg.MarkdownMetadataValue) and value.md_str is not None
    assert_literal(value.md_str, name)


@pytest.mark.parametrize("name", MD_EVIL)
def test_check_evaluation_descriptions_are_literal(name: str) -> None:
    """fleet_sensor's results, recorded by fleet_report_job: the UI renders their descriptions
    as Markdown (asset check pages)."""
    r = CheckResult(
        database=name,
        check=L0,
        passed=False,
        severity="WARN",
        description=f"{name}: 6 L0 SSTs (threshold 4): over",
    )
    ev = evaluation(r)
    assert ev.description is not None
    assert_literal(ev.description, f"{name}: 6 L0 SSTs (threshold 4): over")


@pytest.mark.parametrize(
    "name",
    # valid database paths (no '//'): an image from a data: URL (the UI allows it), a link
    ["![x](data:image/png;base64,AAAA)", "a` [l](https:evil.example) `b", "<img src=x/p.png>"],
)
def test_health_check_job_descriptions_are_literal(
    resources: dict[str, object], instance: dg.DagsterInstance, name: str
) -> None:
    """The on-demand checks (health_check_job) on a partition whose name is crafted: no
    database there, and each description naming it renders it as text."""
    add_partitions(instance, name)
    defs = dg.Definitions(
        assets=ASSETS, asset_checks=CHECKS, jobs=[health_check_job], resources=resources
    )
    result = defs.resolve_job_def("health_check_job").execute_in_process(
        tags={"dagster/partition": name}, instance=instance, raise_on_error=False
    )
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert INTACT in evaluations, result.all_events
    for ev in evaluations.values():
        assert ev.description is not None
        assert_literal(ev.description, name)


_EVENTS = {
    "AssetCheckResult",
    "AssetCheckEvaluation",
    "AssetMaterialization",
    "AssetObservation",
    "MaterializeResult",
    "ObserveResult",
}
_SAFE_BUILDERS = {"markdown_literal", "headline"}


def _callee(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def test_every_markdown_surface_goes_through_markdown_literal() -> None:
    """By construction: in orchestration/, a description of an event or check result and every
    ``MetadataValue.md`` is a constant or built by ``markdown_literal`` / ``headline``."""
    root = Path(__file__).resolve().parents[2] / "orchestration"
    offenders: list[str] = []
    for f in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = _callee(node.func)
            values: list[ast.expr] = []
            if name in _EVENTS:
                values = [k.value for k in node.keywords if k.arg == "description"]
            elif (
                name == "md" and _callee(getattr(node.func, "value", node.func)) == "MetadataValue"
            ):
                values = list(node.args) + [k.value for k in node.keywords]
            for v in values:
                safe = (isinstance(v, ast.Constant) and isinstance(v.value, str)) or (
                    isinstance(v, ast.Call) and _callee(v.func) in _SAFE_BUILDERS
                )
                if not safe:
                    offenders.append(f"{f.name}:{node.lineno} {name}({ast.unparse(v)[:60]})")
    assert not offenders, "Markdown built from stored strings without markdown_literal:\n" + (
        "\n".join(offenders)
    )
