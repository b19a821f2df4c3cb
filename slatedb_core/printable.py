"""Printable text: a string with every character that a terminal or a renderer would act on
written as a visible escape, so stored strings can be shown to an operator.

Names, paths and messages in a database's objects are written by whoever can write the bucket (a
SlateDB writer, a clone's parent, an attacker); shown raw, an ESC sequence in one clears the
operator's screen or plants a hyperlink, a carriage return or backspace hides text, a bidi
override (U+202E) reverses it. :func:`printable` keeps every printable character (``str.
isprintable``: letters, marks, punctuation, symbols, the space) and writes the others (C0/C1
controls, format characters such as the bidi overrides and zero-width space, separators other
than the space, surrogates, private-use and unassigned code points) as ``\\t``, ``\\n``, ``\\r``,
``\\xNN``, ``\\uNNNN`` or ``\\UNNNNNNNN``; a lone surrogate from an undecodable byte
(``surrogateescape``) as that byte, ``\\xNN``. Its output is printable, so applying it again
changes nothing (unless ``backslash`` doubles the backslashes).

The CLI's output (:mod:`slatedb_core.cli.terminal`) and the Dagster UI's Markdown
(``orchestration.markdown``) are both built on it (SECURITY.md).
"""

from __future__ import annotations

_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def printable(text: str, *, backslash: bool = False) -> str:
    """``text`` with each non-printable character escaped (see the module docstring).

    ``backslash``: also double each backslash, so the escaped text is unambiguous (a literal
    ``\\x1b`` and an ESC print differently); ``slatedb get``/``scan`` use it for keys and values.
    """
    if text.isprintable() and not (backslash and "\\" in text):
        return text  # the common case: one C-level scan, no copy
    out: list[str] = []
    for ch in text:
        o = ord(ch)
        if ch == "\\":
            out.append("\\\\" if backslash else ch)
        elif 0xDC80 <= o <= 0xDCFF:  # an undecodable byte (surrogateescape)
            out.append(f"\\x{o - 0xDC00:02x}")
        elif ch in _NAMED:
            out.append(_NAMED[ch])
        elif ch.isprintable():
            out.append(ch)
        elif o < 0x100:
            out.append(f"\\x{o:02x}")
        elif o < 0x10000:
            out.append(f"\\u{o:04x}")
        else:
            out.append(f"\\U{o:08x}")
    return "".join(out)


__all__ = ["printable"]
