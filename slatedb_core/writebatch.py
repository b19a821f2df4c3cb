"""``WriteBatch``: several puts and deletes applied atomically by ``Db.write``."""

from __future__ import annotations

from slatedb_core.errors import InvalidArgument


def _as_bytes(v: object, what: str) -> bytes:
    if type(v) is bytes:
        return v
    if isinstance(v, bytearray | memoryview):
        return bytes(v)
    raise InvalidArgument(f"{what} must be bytes, got {type(v).__name__}")


class WriteBatch:
    """An ordered list of operations; a later operation on the same key wins."""

    __slots__ = ("ops",)

    def __init__(self) -> None:
        self.ops: list[tuple[bytes, bytes | None]] = []

    def put(self, key: bytes, value: bytes) -> WriteBatch:
        self.ops.append((_as_bytes(key, "key"), _as_bytes(value, "value")))
        return self

    def delete(self, key: bytes) -> WriteBatch:
        self.ops.append((_as_bytes(key, "key"), None))
        return self

    def __len__(self) -> int:
        return len(self.ops)

    def __repr__(self) -> str:
        return f"WriteBatch({len(self.ops)} ops)"
