"""An immutable in-memory table that keeps every version a read may need: merge-operand chains.

A memtable keeps one entry per key; a merge operand (SlateDB RFC 0006) needs the key's older
versions too, down to its first value or tombstone, and SlateDB's WAL SSTs hold such chains (a
base and the operands written after it, in seq order). A :class:`VersionTable` holds the rows of
such WAL SSTs sorted by key, newest first within a key, pruned to what a read folds: each key's
newest row and, while that row and the ones after it are operands, the next one
(:func:`~slatedb_core.lsm.iterators.newest_versions` with ``keep_operands``). It answers the
calls :class:`~slatedb_core.lsm.dbstate.DbState` makes of an immutable memtable (``get``,
``get_many``, ``scan``) plus ``versions``, the whole chain of a key. Only WAL SSTs that hold
operands are kept so (``DbReader``'s replayed WAL, :mod:`slatedb_core.reader.wal_tables`); every
other one stays on the memtable's fast path.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core.lsm.iterators import newest_versions
from slatedb_core.lsm.row_model import ENTRY_SCHEMA, KIND_TOMBSTONE, Version


class VersionTable:
    """The rows of ``batch`` (any order, a key may repeat) as an immutable table of versions."""

    def __init__(self, batch: pa.RecordBatch) -> None:
        rows = pa.RecordBatch.from_arrays(batch.columns[:4], schema=ENTRY_SCHEMA)
        if rows.num_rows:
            order = pc.sort_indices(
                pa.Table.from_batches([rows]),
                sort_keys=[("key", "ascending"), ("seq", "descending")],
            )
            rows = rows.take(order)
            kept = list(newest_versions([rows], keep_operands=True))
            rows = pa.concat_batches(kept) if kept else rows.slice(0, 0)
        self.batch = rows
        keys: list[bytes] = rows.column(0).to_pylist()
        self._seqs: list[int] = rows.column(1).to_pylist()
        self._kinds: list[int] = rows.column(2).to_pylist()
        self._values: list[bytes | None] = rows.column(3).to_pylist()
        self._row_keys = keys
        self._keys = list(dict.fromkeys(keys))
        self._at: dict[bytes, tuple[int, int]] = {}
        for i, k in enumerate(keys):
            a, _ = self._at.get(k, (i, i))
            self._at[k] = (a, i + 1)
        self.size_bytes = rows.nbytes
        self.last_wal_id = 0

    def _version(self, i: int) -> Version:
        kind = self._kinds[i]
        value = None if kind == KIND_TOMBSTONE else (self._values[i] or b"")
        return Version(self._seqs[i], kind, value, None, None)

    @property
    def min_seq(self) -> int | None:
        return min(self._seqs) if self._seqs else None

    @property
    def entry_count(self) -> int:
        return len(self._keys)

    def is_empty(self) -> bool:
        return not self._keys

    def get(self, key: bytes) -> Version | None:
        span = self._at.get(key)
        return None if span is None else self._version(span[0])

    def get_many(self, keys: Sequence[bytes]) -> list[Version | None]:
        return [self.get(k) for k in keys]

    def versions(self, key: bytes) -> list[Version]:
        """Every version of ``key`` kept here, newest first."""
        span = self._at.get(key)
        return [] if span is None else [self._version(i) for i in range(*span)]

    def scan(self, start: bytes | None, end: bytes | None) -> Iterator[pa.RecordBatch]:
        """The rows with ``start <= key < end``, key-sorted, operand chains whole."""
        rows = self.batch
        if not rows.num_rows:
            return
        keys = self._row_keys
        lo = 0 if start is None else bisect.bisect_left(keys, start)
        hi = len(keys) if end is None else bisect.bisect_left(keys, end)
        if lo < hi:
            yield rows.slice(lo, hi - lo)

    def freeze(self) -> VersionTable:
        """Itself: it is immutable from the start (a memtable's ``freeze`` counterpart)."""
        return self

    def newer_than(self, seq: int) -> VersionTable:
        """The rows with a seq above ``seq``, as a new table (a flush moved the rest to L0)."""
        return VersionTable(self.batch.filter(pc.greater(self.batch.column(1), seq)))
