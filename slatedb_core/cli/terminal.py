"""Terminal output of the ``slatedb`` CLI: the only module that writes to stdout or stderr.

Every CLI module prints through :func:`echo` (a line of text), :func:`echo_row` (tab-separated
fields), :func:`echo_json` /
:func:`echo_json_text` (``--json`` documents) or :func:`console` (Rich tables), and each of them
passes every string through :func:`slatedb_core.printable.printable` on its way out, so a
checkpoint name, an external database's path, a shard's database or an error message quoting one
of them, written into the store by anyone, reaches the operator's terminal with its control and
format characters (ESC, CR, backspace, C1 controls, bidi overrides) as visible escapes. Rich
markup (``[link=...]``) and emoji codes in such strings are shown as text, never interpreted.
The library's warnings during a command go through :func:`capture_library_logs`.
JSON is written with ``ensure_ascii``: valid JSON whose strings decode to the exact stored value.
``tests/cli/test_terminal_injection.py`` checks no other CLI module prints (SECURITY.md).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import click
from rich.console import Console
from rich.text import Text

from slatedb_core.printable import printable


def echo(text: str, *, err: bool = False) -> None:
    """Print one line (stderr with ``err``); a newline inside ``text`` is shown as ``\\n``."""
    click.echo(printable(text), err=err)


def echo_row(*fields: str) -> None:
    """Print one line of tab-separated fields (``scan``'s ``KEY<TAB>VALUE``); a tab inside a
    field is shown as ``\\t``, so the columns stay unambiguous."""
    click.echo("\t".join(printable(f) for f in fields))


def echo_json_text(text: str) -> None:
    """Print a JSON document already serialised with ``ensure_ascii`` (only its layout's
    newlines are kept: the escaping is a no-op on such text, and a guard on any other)."""
    click.echo("\n".join(printable(line) for line in text.split("\n")))


def echo_json(doc: Any, *, indent: int | None = 2) -> None:
    """Print ``doc`` as JSON (non-ASCII and control characters as ``\\uNNNN`` escapes)."""
    echo_json_text(json.dumps(doc, indent=indent, ensure_ascii=True))


class _SafeConsole(Console):
    """A Rich console whose strings (table cells, titles, printed text) are escaped and never
    read as markup or emoji: Rich turns every ``str`` it renders into ``Text`` here."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        kwargs.update(markup=False, emoji=False, highlight=False)
        return super().render_str(printable(text), **kwargs)


class _EscapingLogHandler(logging.Handler):
    """The library's warnings during a command (what Python's last-resort handler would print
    raw): the message escaped into one line, a traceback line by line."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = printable(record.getMessage())
            if record.exc_info:
                trace = logging.Formatter().formatException(record.exc_info)
                text += "\n" + "\n".join(printable(line) for line in trace.split("\n"))
            click.echo(text, err=True)
        except Exception:
            self.handleError(record)


def capture_library_logs(ctx: click.Context) -> None:
    """Until ``ctx`` closes, print ``slatedb_core``'s warnings through the escaping handler
    (they quote paths and errors: a stored name in one would reach the terminal raw)."""
    logger = logging.getLogger("slatedb_core")
    handler = _EscapingLogHandler(logging.WARNING)
    logger.addHandler(handler)
    ctx.call_on_close(lambda: logger.removeHandler(handler))


def console(*, piped_width: int | None = 200) -> Console:
    """The console for Rich output. Rich folds tables to 80 columns when output is not a
    terminal, which splits UUIDs across lines in piped output: piped output gets
    ``piped_width`` columns instead (None: Rich's default)."""
    c = _SafeConsole(markup=False, emoji=False, highlight=False)
    if c.is_terminal or piped_width is None:
        return c
    return _SafeConsole(width=piped_width, markup=False, emoji=False, highlight=False)


__all__ = ["capture_library_logs", "console", "echo", "echo_json", "echo_json_text", "echo_row"]
