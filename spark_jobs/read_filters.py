"""Spark's pushed filters on the ``key`` column, folded into the keys a read must produce.

PySpark's Python data sources receive the conjuncts of a query's ``WHERE`` as
:class:`pyspark.sql.datasource.Filter` objects (``spark.sql.python.filterPushdown.enabled``).
Those on the key column (``=``, ``<``, ``<=``, ``>``, ``>=``, ``IN``, ``startswith``, and
``IS NOT NULL``, which every key satisfies) are folded into one :class:`KeySelection`: a half-open
key range and, when an ``=`` or ``IN`` was among them, the exact keys. The reader then plans only
the partitions overlapping the range and answers exact keys with point lookups (the SST index and
bloom filters, docs/format.md) instead of a scan. Every folded filter is applied exactly, so none
of them goes back to Spark; the others (value columns, ``NOT``, ``endswith``, ...) do.

A binary column's literals arrive as ``bytes`` (Spark 4.3: ``key == "k1"`` casts the string literal
to binary, and ``IN`` lists arrive as lists of bytes); a filter whose literal is of another type
is left to Spark. Spark 4.3 never pushes a prefix test on a binary column: ``startswith(key,
X'6B30')`` stays a Spark filter over a full read, and ``key LIKE 'k0%'`` compares
``cast(key as string)``; write ``key >= p AND key < p'`` (:func:`prefix_end`) for a narrowed scan.
:class:`StringStartsWith` is still folded when it comes with bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    StringStartsWith,
)

from slatedb_core import KeyRange

KEY_COLUMN = "key"

__all__ = ["KEY_COLUMN", "KeySelection", "prefix_end", "select_keys"]


def prefix_end(prefix: bytes) -> bytes | None:
    """The least key above every key starting with ``prefix`` (None: no such key, unbounded)."""
    p = prefix.rstrip(b"\xff")
    return None if not p else p[:-1] + bytes([p[-1] + 1])


@dataclass(frozen=True, slots=True)
class KeySelection:
    """The keys a read must produce: those in ``range`` and, if ``points`` is not None, among
    ``points`` (sorted, distinct, non-empty keys inside ``range``)."""

    range: KeyRange = field(default_factory=KeyRange)
    points: tuple[bytes, ...] | None = None

    @property
    def is_empty(self) -> bool:
        """Whether the filters contradict each other: nothing can match."""
        return self.points == () or self.range.is_empty()

    @property
    def is_everything(self) -> bool:
        return self.points is None and self.range == KeyRange()


def _literal(value: object) -> bytes | None:
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        # a key read as a string (read option key_type=string): Spark orders strings by their
        # UTF-8 bytes (the default UTF8_BINARY collation), as the keys are stored
        return value.encode("utf-8")
    return None


def _fold(
    f: Filter, rng: KeyRange, points: set[bytes] | None
) -> tuple[KeyRange, set[bytes] | None] | None:
    """``rng`` and ``points`` narrowed by ``f``, or None if ``f`` is not a key filter we apply."""
    attribute = getattr(f, "attribute", None)
    if attribute != (KEY_COLUMN,):
        return None
    if isinstance(f, IsNotNull):
        return rng, points  # keys are never null
    if isinstance(f, In):
        keys = [_literal(v) for v in f.value if v is not None]
        if any(k is None for k in keys):
            return None
        found = {k for k in keys if k}  # keys are non-empty: b"" matches nothing
        return rng, found if points is None else points & found
    value = _literal(getattr(f, "value", None))
    if value is None:
        return None
    if isinstance(f, EqualTo | EqualNullSafe):
        found = {value} if value else set()
        return rng, found if points is None else points & found
    bound: KeyRange
    if isinstance(f, GreaterThan):
        bound = KeyRange(value + b"\x00", None)
    elif isinstance(f, GreaterThanOrEqual):
        bound = KeyRange(value, None)
    elif isinstance(f, LessThan):
        bound = KeyRange(None, value)
    elif isinstance(f, LessThanOrEqual):
        bound = KeyRange(None, value + b"\x00")
    elif isinstance(f, StringStartsWith):
        bound = KeyRange(value or None, prefix_end(value))
    else:
        return None
    return rng.intersect(bound), points


def select_keys(filters: Sequence[Filter]) -> tuple[KeySelection, list[Filter]]:
    """The selection the key filters among ``filters`` (a conjunction) make, and the filters
    not applied (returned to Spark as they came: the same objects)."""
    rng = KeyRange()
    points: set[bytes] | None = None
    rest: list[Filter] = []
    for f in filters:
        folded = _fold(f, rng, points)
        if folded is None:
            rest.append(f)
        else:
            rng, points = folded
    chosen = None if points is None else tuple(sorted(k for k in points if rng.contains(k)))
    return KeySelection(rng, chosen), rest


def shard_points(points: Iterable[bytes], rng: KeyRange) -> tuple[bytes, ...]:
    """The keys of ``points`` inside ``rng``, in order."""
    return tuple(k for k in points if rng.contains(k))
