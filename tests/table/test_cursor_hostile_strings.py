"""A table change-feed cursor string that :meth:`TableCursor.encode` never makes is refused by
:meth:`TableCursor.decode` with CursorInvalid, and nothing else: JSON nested deep enough to
exhaust the parser's recursion (RecursionError escaped), shard paths no database has (a lone
surrogate, NUL, ``.`` or empty segments: later InvalidArgument from the store, not
CursorInvalid), a shard named twice (the later entry silently won: a live shard could be taken
for read to its end), identities and overwrite states with a trailing newline (``$`` matched
before it). Adversarial review of 56634ca (review51, session 51)."""

from __future__ import annotations

import base64

import pytest

from slatedb_core.errors import CursorInvalid
from slatedb_core.table.changes_cursor import TableCursor


def _enc(doc: bytes) -> str:
    return "t1." + base64.urlsafe_b64encode(doc).decode().rstrip("=")


ID = b"0" * 32
HOSTILE = {
    "deep array": b"[" * 200_000,
    "deep inside": b'{"m":0,"s":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "lone surrogate path": b'{"m":0,"s":[["\\ud800",null]]}',
    "NUL in path": b'{"m":0,"s":[["a\\u0000b",null]]}',
    "control character in path": b'{"m":0,"s":[["a\\u0001b",null]]}',
    "dot path": b'{"m":0,"s":[[".",null]]}',
    "empty segment": b'{"m":0,"s":[["a//b",null]]}',
    "dot segment": b'{"m":0,"s":[["a/./b",null]]}',
    "backslash": b'{"m":0,"s":[["a\\\\b",null]]}',
    "shard named twice": b'{"m":0,"s":[["a",null],["a","done"]]}',
    "identity with a newline": b'{"m":0,"s":[],"d":{"a":"' + ID + b'\\n"}}',
    "seeding with a newline": b'{"m":0,"s":[["a","s1.00\\n"]]}',
    "clearing with a newline": b'{"m":0,"s":[["a","x00\\n"]]}',
    "identity of a bad path": b'{"m":0,"s":[],"d":{"a//b":"' + ID + b'"}}',
}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_cursor_is_cursor_invalid(name: str) -> None:
    with pytest.raises(CursorInvalid):
        TableCursor.decode(_enc(HOSTILE[name]))


def test_what_encode_makes_still_decodes() -> None:
    c = TableCursor(
        7,
        (("shards/a", None), ("shards/b", "done"), ("s/c", "x0aff"), ("s/d", "s12.00ff")),
        (("s/c", "f" * 32), ("s/d", "0" * 32)),
    )
    assert TableCursor.decode(c.encode()) == c
