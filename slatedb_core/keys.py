"""Key ranges and the helpers that turn the manifest's bound kinds into half-open ranges.

The public API speaks half-open ranges (``start`` inclusive, ``end`` exclusive, None unbounded).
The manifest's ``BytesRange`` has explicit included/excluded/unbounded bounds; because byte strings
order lexicographically, "after k" is exactly "at or after k + b'\\x00'", so every BytesRange maps
onto a half-open range without loss.
"""

from __future__ import annotations

from dataclasses import dataclass

from slatedb_core.errors import InvalidArgument
from slatedb_core.manifest.model import BoundKind, BytesBound, BytesRange


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
        return (self.start is None or key >= self.start) and (self.end is None or key < self.end)

    def is_empty(self) -> bool:
        return self.start is not None and self.end is not None and self.start >= self.end

    def intersect(self, other: KeyRange) -> KeyRange:
        start = _max_start(self.start, other.start)
        end = _min_end(self.end, other.end)
        if start is not None and end is not None and end < start:
            end = start
        return KeyRange(start, end)

    def to_bytes_range(self) -> BytesRange:
        return BytesRange(
            BytesBound.unbounded() if self.start is None else BytesBound.included(self.start),
            BytesBound.unbounded() if self.end is None else BytesBound.excluded(self.end),
        )

    @staticmethod
    def of(r: BytesRange | None) -> KeyRange:
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
