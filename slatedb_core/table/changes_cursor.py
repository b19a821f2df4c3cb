"""A sharded table's change-feed cursor: the shard map version and each shard database's
state, encoded as one opaque ASCII string a consumer persists (docs/changes.md, "Tables"; issue
43, item 2).

The encoding is ``t1.`` and the URL-safe base64 of a JSON object ``{"m": map id, "s": [[db path
relative to the table, state], ...], "d": {db path: identity}}``, a state being the shard's
:class:`~slatedb_core.feed.Cursor`, null (from its start), :data:`DONE` (a retired shard read
to its end), ``x<hex>`` (an overwritten shard: deletes delivered up to a key, :data:`CLEARING`)
or ``s<id>.<hex>`` (an overwrite's new shard: its build's rows, manifest ``id``, delivered up to
a key, :data:`SEEDING`). :mod:`slatedb_core.table.changes` reads the feed these cursors resume.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import TypeGuard

from slatedb_core.errors import CursorInvalid, InvalidArgument
from slatedb_core.feed import Cursor
from slatedb_core.store.objects import validate_relative_path

DONE = "done"
"""A retired shard's entry once its feed was read to its end."""
CLEARING = "x"
"""An overwritten shard's entry while the deletes of its keys are delivered: ``x`` and the hex
of the last key deleted (none yet: ``x`` alone)."""
_CLEARING = re.compile(r"^x(?:[0-9a-f]{2})*\Z")
SEEDING = "s"
"""An overwrite's new shard's entry while the rows of its build are delivered: ``s`` alone
before the first, then ``s<manifest id>.<hex of the last key delivered>`` (the manifest read,
so that a resumed read goes on in that one)."""
_SEEDING = re.compile(r"^s(?:([0-9]{1,19})\.((?:[0-9a-f]{2})*))?\Z")
DB_ID = re.compile(r"^[0-9a-f]{32}\Z")
"""A shard database's change-feed identity: 32 lowercase hex digits."""
_PREFIX = "t1."
MAX_ENCODED = 1 << 20
"""The longest encoded cursor :meth:`TableCursor.decode` accepts, in characters."""


@dataclass(frozen=True, slots=True)
class TableCursor:
    """Where a table's change feed resumes: the shard map version it last planned on and, per
    database (path relative to the table), the shard's cursor (None: from its start; ``DONE``:
    a retired shard read to its end). Persist :meth:`encode`, pass it back as ``since``."""

    map_id: int
    shards: tuple[tuple[str, Cursor | str | None], ...]
    ids: tuple[tuple[str, str], ...] = ()
    """The change-feed identity of each shard database whose entry is an overwrite's state
    (``x<key>``, ``s...``: no :class:`Cursor` carries it), so that another table's cursor
    (one created again at the path) is CursorInvalid there too (review43). None in a cursor
    of an earlier build, which is read as before."""

    def encode(self) -> str:
        """The cursor as an opaque ASCII string, what a consumer persists."""
        items = [[p, c.encode() if isinstance(c, Cursor) else c] for p, c in self.shards]
        body: dict[str, object] = {"m": self.map_id, "s": items}
        if self.ids:
            body["d"] = dict(self.ids)
        doc = json.dumps(body, separators=(",", ":"))
        return _PREFIX + base64.urlsafe_b64encode(doc.encode()).decode().rstrip("=")

    def __str__(self) -> str:
        return self.encode()

    @classmethod
    def decode(cls, text: str | bytes) -> TableCursor:
        """The cursor :meth:`encode` made; CursorInvalid for anything else."""
        if isinstance(text, bytes | bytearray | memoryview):
            text = bytes(text).decode("ascii", "replace")
        if not isinstance(text, str) or not text.startswith(_PREFIX):
            raise CursorInvalid("not a table change-feed cursor (t1.<base64 JSON>)")
        if len(text) > MAX_ENCODED:
            raise CursorInvalid(f"a table change-feed cursor is at most {MAX_ENCODED} characters")
        body = text[len(_PREFIX) :]
        try:
            doc = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
            map_id = doc["m"]
            items = doc["s"]
            if type(map_id) is not int or map_id < 0 or not isinstance(items, list):
                raise ValueError("bad map id or shards")
            shards: list[tuple[str, Cursor | str | None]] = []
            named: set[str] = set()
            for p, c in items:
                if _check_path(p) and p in named:
                    raise ValueError(f"shard path {p!r} named twice")
                named.add(p)
                if c is None or c == DONE or (isinstance(c, str) and _phase(c)):
                    shards.append((p, c))
                elif isinstance(c, str):
                    shards.append((p, Cursor.decode(c)))
                else:
                    raise ValueError(f"bad shard cursor {c!r}")
            ids = doc.get("d", {})
            if not isinstance(ids, dict) or not all(
                isinstance(i, str) and DB_ID.match(i) and _check_path(p) for p, i in ids.items()
            ):
                raise ValueError("bad shard identities")
        except CursorInvalid:
            raise
        except RecursionError:  # JSON nested deeper than the parser recurses
            raise CursorInvalid("not a table change-feed cursor: nested too deep") from None
        except (ValueError, TypeError, KeyError, binascii.Error, UnicodeDecodeError) as e:
            raise CursorInvalid(f"not a table change-feed cursor: {e}") from None
        return cls(map_id, tuple(shards), tuple(sorted(ids.items())))

    @classmethod
    def of(cls, since: TableCursor | str | bytes | None) -> TableCursor | None:
        """``since`` as a cursor: decoded when it is a string or bytes, as given otherwise."""
        if since is None or isinstance(since, TableCursor):
            return since
        return cls.decode(since)


def _check_path(p: object) -> bool:
    """True when ``p`` is a path a shard database can have relative to its table (no empty,
    ``.`` or ``..`` segment, no control character or lone surrogate); ValueError otherwise: an
    entry no encoded cursor holds, whose path would otherwise fail later as InvalidArgument."""
    try:
        validate_relative_path(p, what="shard path")  # type: ignore[arg-type]  # checked there
    except InvalidArgument as e:
        raise ValueError(str(e)) from None
    return True


def is_clearing(c: Cursor | str | None) -> bool:
    """Whether ``c`` is an overwritten shard's clearing state (``x<hex>``)."""
    return isinstance(c, str) and c != DONE and _CLEARING.match(c) is not None


def is_seeding(c: Cursor | str | None) -> TypeGuard[str]:
    """Whether ``c`` is an overwrite's new shard's seeding state (``s``, ``s<id>.<hex>``)."""
    return isinstance(c, str) and _SEEDING.match(c) is not None


def _phase(c: str) -> bool:
    """Whether ``c`` is an entry's clearing or seeding state (not a shard's cursor)."""
    return _CLEARING.match(c) is not None or _SEEDING.match(c) is not None


def seeding_state(state: str) -> tuple[int, bytes] | None:
    """A seeding state's manifest id and last key delivered (``s<id>.<hex>``); None for ``s``
    alone (before the first row). ``state`` must be a seeding state (:func:`is_seeding`)."""
    found = _SEEDING.match(state)
    if found is None:
        raise ValueError(f"not a seeding state: {state!r}")
    if found.group(1) is None:
        return None
    return int(found.group(1)), bytes.fromhex(found.group(2))


__all__ = [
    "CLEARING",
    "DB_ID",
    "DONE",
    "MAX_ENCODED",
    "SEEDING",
    "TableCursor",
    "is_clearing",
    "is_seeding",
    "seeding_state",
]
