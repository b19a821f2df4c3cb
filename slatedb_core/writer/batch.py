"""``WriteBatch``: several puts, deletes and merges applied atomically by ``Db.write``."""

from __future__ import annotations

from slatedb_core.errors import InvalidArgument
from slatedb_core.lsm.row_model import KIND_MERGE, KIND_VALUE
from slatedb_core.writer.ttl import NoExpiry, Ttl, check_ttl


def _as_bytes(v: object, what: str) -> bytes:
    if isinstance(v, bytearray | memoryview):
        return bytes(v)
    raise InvalidArgument(f"{what} must be bytes, got {type(v).__name__}")


Special = tuple[int, int | NoExpiry | None]
"""How ``Db.write`` stores one operation of a batch that is not a plain put or delete: its
kind (KIND_VALUE or KIND_MERGE) and its checked ``ttl`` (:mod:`slatedb_core.writer.ttl`)."""


class WriteBatch:
    """An ordered list of operations; a later put or delete of a key wins, a later merge folds
    onto what the operations before it left (SlateDB RFC 0006).

    Kept as two parallel lists (not a list of pairs) so ``Db.write`` hands them to the memtable and
    the WAL buffer without re-packing: batched writes are a hot path. Operations with a ``ttl``
    or merges are noted in ``specials`` (operation index -> kind and ttl), None while there is
    none, so a batch of plain puts and deletes takes the same path as before them.
    """

    __slots__ = ("keys", "specials", "values")

    def __init__(self) -> None:
        self.keys: list[bytes] = []
        self.values: list[bytes | None] = []
        self.specials: dict[int, Special] | None = None

    def put(self, key: bytes, value: bytes, *, ttl: Ttl = None) -> WriteBatch:
        """Put ``key``; ``ttl``: None (the database's ``default_ttl``), ``NO_EXPIRY``, or ms
        / a timedelta after the write (SlateDB's ``PutOptions.ttl``)."""
        if type(key) is not bytes:
            key = _as_bytes(key, "key")
        if type(value) is not bytes:
            value = _as_bytes(value, "value")
        if ttl is not None:
            self._special(KIND_VALUE, check_ttl("ttl", ttl))
        self.keys.append(key)
        self.values.append(value)
        return self

    def merge(self, key: bytes, operand: bytes, *, ttl: Ttl = None) -> WriteBatch:
        """A merge operand for ``key`` (SlateDB's ``WriteBatch::merge``), folded onto its value by
        the database's merge operator; ``ttl`` as for :meth:`put`."""
        if type(key) is not bytes:
            key = _as_bytes(key, "key")
        if type(operand) is not bytes:
            operand = _as_bytes(operand, "operand")
        self._special(KIND_MERGE, check_ttl("ttl", ttl))
        self.keys.append(key)
        self.values.append(operand)
        return self

    def _special(self, kind: int, ttl: int | NoExpiry | None) -> None:
        if self.specials is None:
            self.specials = {}
        self.specials[len(self.keys)] = (kind, ttl)

    def delete(self, key: bytes) -> WriteBatch:
        """Add a delete of ``key`` to the batch; returns the batch."""
        if type(key) is not bytes:
            key = _as_bytes(key, "key")
        self.keys.append(key)
        self.values.append(None)
        return self

    @property
    def has_merges(self) -> bool:
        return self.specials is not None and any(
            kind == KIND_MERGE for kind, _ in self.specials.values()
        )

    @property
    def ops(self) -> list[tuple[bytes, bytes | None]]:
        """(key, value) of each operation (a merge's value is its operand)."""
        return list(zip(self.keys, self.values, strict=True))

    def __len__(self) -> int:
        return len(self.keys)

    def __repr__(self) -> str:
        return f"WriteBatch({len(self.keys)} ops)"
