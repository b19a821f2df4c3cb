"""Stored JSON documents decoded within a memory bound: the one ``json.loads`` of bytes read
from a store (shard maps, table snapshot names, origins, ingest markers).

Whoever can write the bucket can write such a document, and ``json.loads`` builds a Python
object per value: 3 bytes of ``{},`` become a 64-byte dict and its 8-byte slot, so a 6 MiB
shard map of empty dicts took 196 MiB (29x) before its decoder noticed that it was not a map,
and nesting ``{"":`` reaches ~46x (the issue 39 review; SECURITY.md, "Crafted objects stay
bounded"). :func:`load_stored_json` first charges every construct that can start a Python
object its CPython cost (:func:`json_cost`, counted on the raw bytes, an upper estimate: a
brace, bracket, comma or quote inside a string is charged too) and refuses a document whose
cost exceeds :data:`JSON_FACTOR` times its length plus :data:`JSON_SLACK` with
``CorruptionError``, before parsing. What our writers write costs about 12 times its length
(dicts of a few short strings and numbers), so no document they write is refused.
"""

from __future__ import annotations

import json
from typing import Any

from slatedb_core.errors import CorruptionError

JSON_FACTOR = 16
"""The estimated peak, in times the document's length, a stored JSON document may cost."""
JSON_SLACK = 16 << 20
"""Estimated bytes any stored JSON document may cost on top of ``JSON_FACTOR`` times its size."""

_DICT = 184  # a dict of up to five keys (CPython 3.11 ``sys.getsizeof``); longer ones add < 32
_LIST = 96  # an empty list, its slot in its container and append's over-allocation
_ITEM = 32  # a slot in a list or a dict, and a float or int object behind it
_STRING = 56  # a str object of a short ASCII string (each string has two quotes)


def json_cost(data: bytes) -> int:
    """An upper estimate of the bytes ``json.loads(data)`` allocates (module doc)."""
    return (
        _DICT * data.count(b"{")
        + _LIST * data.count(b"[")
        + _ITEM * (data.count(b",") + data.count(b":"))
        + _STRING * (data.count(b'"') // 2)
    )


def load_stored_json(data: bytes, name: str) -> Any:
    """``json.loads(data)`` of the stored object ``name``; ``CorruptionError`` for a document
    that is not JSON (nesting too deep included) or would cost more than its bound."""
    bound = JSON_FACTOR * len(data) + JSON_SLACK
    if json_cost(data) > bound:
        raise CorruptionError(
            name,
            f"a JSON document of {len(data)} bytes holds more values than its size allows "
            f"(estimated {json_cost(data)} bytes decoded, more than {bound})",
        )
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:
        raise CorruptionError(name, f"not a JSON document: {type(e).__name__}: {e}") from None


__all__ = ["JSON_FACTOR", "JSON_SLACK", "json_cost", "load_stored_json"]
