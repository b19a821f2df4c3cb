"""``markdown_literal`` (orchestration/markdown.py) escapes block markup indented by spaces, so a
name renders as a paragraph, never a heading, list, rule or quote."""

from __future__ import annotations

import html
import re

import pytest
from markdown_it import MarkdownIt

from orchestration.fleet_report import CheckResult, evaluation
from orchestration.fleet_state import L0
from orchestration.markdown import markdown_literal

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
    a list or a horizontal rule in a check description (the UI renders it as Markdown).

    Found by the review of issue 39's fixes (was review/test_issue39_review.py)."""
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
    """Found by the review of issue 39's fixes (was review/test_issue39_review.py)."""
    out = _MD.render(markdown_literal(name))
    assert out.startswith("<p>") and out.count("<") == 2, out
