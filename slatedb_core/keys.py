"""Key ranges and the helpers that turn the manifest's bound kinds into half-open ranges.

The public API speaks half-open ranges (``start`` inclusive, ``end`` exclusive, None unbounded).
The manifest's ``BytesRange`` has explicit included/excluded/unbounded bounds; because byte strings
order lexicographically, "after k" is exactly "at or after k + b'\\x00'", so every BytesRange maps
onto a half-open range without loss.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from slatedb_core.errors import InvalidArgument


# ---- the manifest's bounds (SlateDB RFC 0004, ``BytesRange`` of a view's visible range) ----------
class BoundKind(enum.IntEnum):
    UNBOUNDED = 0
    INCLUDED = 1
    EXCLUDED = 2


@dataclass(frozen=True, slots=True)
class BytesBound:
    kind: BoundKind = BoundKind.UNBOUNDED
    key: bytes | None = None

    def __post_init__(self) -> None:
        if (self.kind == BoundKind.UNBOUNDED) != (self.key is None):
            raise ValueError("an UNBOUNDED bound has no key; INCLUDED/EXCLUDED bounds need one")

    @staticmethod
    def unbounded() -> BytesBound:
        return BytesBound(BoundKind.UNBOUNDED, None)

    @staticmethod
    def included(key: bytes) -> BytesBound:
        return BytesBound(BoundKind.INCLUDED, bytes(key))

    @staticmethod
    def excluded(key: bytes) -> BytesBound:
        return BytesBound(BoundKind.EXCLUDED, bytes(key))


@dataclass(frozen=True, slots=True)
class BytesRange:
    """A key range with explicit bound kinds (the manifest's ``visible_range``)."""

    start: BytesBound = field(default_factory=BytesBound.unbounded)
    end: BytesBound = field(default_factory=BytesBound.unbounded)


# ---- half-open ranges, the public API's --------------------------------------------------
@dataclass(frozen=True, slots=True)
class KeyRange:
    """``start`` inclusive, ``end`` exclusive; None is unbounded."""

    start: bytes | None = None
    end: bytes | None = None

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, bytes):
                raise InvalidArgument(f"KeyRange.{name} must be bytes or None")
        if self.start is not None and self.end is not None and self.end < self.start:
            raise InvalidArgument(f"KeyRange end {self.end!r} is before start {self.start!r}")

    def contains(self, key: bytes) -> bool:
        """Whether ``key`` lies in ``[start, end)`` (a missing bound is unbounded)."""
        return (self.start is None or key >= self.start) and (self.end is None or key < self.end)

    def is_empty(self) -> bool:
        """Whether the range holds no key (``start >= end``)."""
        return self.start is not None and self.end is not None and self.start >= self.end

    def intersect(self, other: KeyRange) -> KeyRange:
        """The keys in both ranges (an empty range when they do not overlap)."""
        start = _max_start(self.start, other.start)
        end = _min_end(self.end, other.end)
        if start is not None and end is not None and end < start:
            end = start
        return KeyRange(start, end)

    def to_bytes_range(self) -> BytesRange:
        """The same range as the manifest's ``BytesRange`` (start included, end excluded)."""
        return BytesRange(
            BytesBound.unbounded() if self.start is None else BytesBound.included(self.start),
            BytesBound.unbounded() if self.end is None else BytesBound.excluded(self.end),
        )

    @staticmethod
    def of(r: BytesRange | None) -> KeyRange:
        """A manifest ``BytesRange`` (None: everything) as a half-open KeyRange."""
        if r is None:
            return KeyRange()
        if r.start.kind == BoundKind.UNBOUNDED:
            start = None
        elif r.start.kind == BoundKind.INCLUDED:
            start = r.start.key
        else:
            start = (r.start.key or b"") + b"\x00"
        if r.end.kind == BoundKind.UNBOUNDED:
            end = None
        elif r.end.kind == BoundKind.EXCLUDED:
            end = r.end.key
        else:
            end = (r.end.key or b"") + b"\x00"
        if start is not None and end is not None and end < start:
            end = start
        return KeyRange(start, end)


def _max_start(a: bytes | None, b: bytes | None) -> bytes | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def _min_end(a: bytes | None, b: bytes | None) -> bytes | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


# ---- a projected database's range (SlateDB RFC 0004, "Projection": reads and writes wholly outside the
# visible range fail; a scan that partly overlaps it is clipped). One check, shared by the writer
# (Db) and DbReader, so the CLI's get/scan (which read through DbReader) answer as Db does.
def outside_range(key: bytes, rng: KeyRange) -> InvalidArgument:
    """The error for ``key`` outside a projected database's range ``rng``."""
    return InvalidArgument(
        f"key {key[:64]!r} is outside this database's range {rng} (a projected "
        "database only holds the keys of its projection)"
    )


def check_in_range(rng: KeyRange | None, keys: Iterable[bytes]) -> None:
    """InvalidArgument for the first of ``keys`` outside ``rng`` (None: every key is in)."""
    if rng is None:
        return
    for k in keys:
        if not rng.contains(k):
            raise outside_range(k, rng)


def clip_scan(
    rng: KeyRange | None, start: bytes | None, end: bytes | None
) -> tuple[bytes | None, bytes | None]:
    """Validated scan bounds clipped to ``rng``; InvalidArgument when the (non-empty) scan lies
    wholly outside it. An empty scan stays empty wherever it is."""
    if rng is None:
        return start, end
    clipped = rng.intersect(KeyRange(start, end))
    if clipped.is_empty() and not KeyRange(start, end).is_empty():
        raise InvalidArgument(
            f"scan [{start!r}, {end!r}) is wholly outside this database's range {rng}"
        )
    return clipped.start, clipped.end
