"""Markdown-safe text: a stored string placed in Markdown the Dagster UI renders shows as exactly
that text, never as a link, an image, HTML or formatting.

The UI renders as Markdown (react-markdown with remark-gfm, HTML sanitised but links and images
from any host, ``data:`` images included, allowed): ``MetadataValue.md``, the description of a
materialization or observation, and the description of a check evaluation. Database paths
(discovered from the bucket, so chosen by whoever can write an object there), checkpoint names and
error messages quoting them reach those places; :func:`markdown_literal` is the one way they get
there (``tests/orchestration/test_markdown_injection.py`` checks every such call site). Plain-text
surfaces (``MetadataValue.text``, table records, tags, logs) are not Markdown and need nothing.
SECURITY.md says what this protects.
"""

from __future__ import annotations

import re

from slatedb_core.printable import printable

_INLINE = re.compile(r"[\\`*_\[\]<>!&|~@]|(?<=[wW]{3})\.|:(?=//)")
"""What can start a Markdown or GFM construct inside a line: escapes, code spans, emphasis,
links and images (``[``, ``]``, ``!``), HTML and autolinks (``<``), entities (``&``), tables
(``|``), strikethrough (``~``), GFM's bare autolinks (an e-mail's ``@``, ``www.``'s dot, a
protocol's ``://``). Backslash-escaping an ASCII punctuation character always makes it literal
(CommonMark 2.4)."""
_LINE_START = re.compile(r"^( {0,3})(?:[#>+=-]|\d{1,9}(?=[.)]))")
"""What starts a block at the beginning of a line: heading, quote, list, setext underline or
thematic break, after up to three spaces of indentation (CommonMark 4.1-5.2; four make an
indented code block, which is literal text)."""


def markdown_literal(text: str, *, code: bool = False) -> str:
    """Markdown that renders as ``text`` (its non-printable characters, such as ESC or a bidi
    override, written as escapes by :func:`slatedb_core.printable.printable`, so it is one line).

    ``code``: as an inline code span (monospace), fenced by more backticks than any run inside
    it, so no backtick in ``text`` can close it; else as plain text with every character that
    could start a construct backslash-escaped (database paths such as ``orders/eu-1`` and SST
    paths come out unchanged).
    """
    shown = printable(text)
    if code:
        longest = max((len(run) for run in re.findall(r"`+", shown)), default=0)
        fence = "`" * (longest + 1)
        pad = " " if not shown or shown[0] in "` " or shown[-1] in "` " else ""
        return f"{fence}{pad}{shown}{pad}{fence}"
    escaped = _INLINE.sub(lambda m: "\\" + m.group(0), shown)
    start = _LINE_START.match(escaped)
    if start is None:
        return escaped
    if start.group(0)[-1].isdigit():  # "1." / "1)": escape the delimiter after the number
        n = start.end()
        return escaped[:n] + "\\" + escaped[n:]
    n = len(start.group(1))  # the marker, after the indentation
    return escaped[:n] + "\\" + escaped[n:]


__all__ = ["markdown_literal"]
