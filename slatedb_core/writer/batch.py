"""``WriteBatch``: several puts and deletes applied atomically by ``Db.write``."""

from __future__ import annotations

from slatedb_core.errors import InvalidArgument


def _as_bytes(v: object, what: str) -> bytes:
    if isinstance(v, bytearray | memoryview):
        return bytes(v)
    raise InvalidArgument(f"{what} must be bytes, got {type(v).__name__}")


class WriteBatch:
    """An ordered list of operations; a later operation on the same key wins.

    Kept as two parallel lists (not a list of pairs) so ``Db.write`` hands them to the memtable and
    the WAL buffer without re-packing: batched writes are a hot path.
    """

    __slots__ = ("keys", "values")

    def __init__(self) -> None:
        self.keys: list[bytes] = []
        self.values: list[bytes | None] = []

    def put(self, key: bytes, value: bytes) -> WriteBatch:
        if type(key) is not bytes:
            key = _as_bytes(key, "key")
        if type(value) is not bytes:
            value = _as_bytes(value, "value")
        self.keys.append(key)
        self.values.append(value)
        return self

    def delete(self, key: bytes) -> WriteBatch:
        if type(key) is not bytes:
            key = _as_bytes(key, "key")
        self.keys.append(key)
        self.values.append(None)
        return self

    @property
    def ops(self) -> list[tuple[bytes, bytes | None]]:
        return list(zip(self.keys, self.values, strict=True))

    def __len__(self) -> int:
        return len(self.keys)

    def __repr__(self) -> str:
        return f"WriteBatch({len(self.keys)} ops)"
