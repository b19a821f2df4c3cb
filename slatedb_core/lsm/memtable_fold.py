"""Folding a merge operand onto a key's memtable entry, so that the memtable keeps one entry per
key for reads and still flushes the rows SlateDB's own flush would write (SlateDB RFC 0006).

SlateDB's memtable keeps every version of a key; ours keeps one entry per key (the dict or a run,
:mod:`slatedb_core.lsm.memtable`). A put or a delete replaces the entry, as it hides every older
version for a SlateDB read too. A merge operand is folded onto the entry at write time, which
gives the same answers, because of how SlateDB 0.17 treats the versions it keeps:

* **Reads** fold every operand of a key onto its newest value or tombstone, whatever their
  ``expire_ts`` (``MergeOperatorIterator`` with ``merge_different_expire_ts`` true in
  ``db_iter.rs``; reads ignore ``expire_ts``, see :mod:`slatedb_core.lsm.merge_operator`). The
  entry a read sees is that fold: :func:`fold_pair` of the old entry and the operand, with
  SlateDB's ``MergeTracker`` metadata (seq and ``create_ts`` the newest, ``expire_ts`` the
  earliest set one). An operand folded onto a value or a tombstone is a value, onto an operand an
  operand: ``op(op(None, older), newer)``, as SlateDB's ``merge_batch`` combines operands; the
  operator is associative (RFC 0006), so a later fold onto a base equals folding one by one.
* **The memtable flush** folds only neighbouring versions with the *same* ``expire_ts``
  (``merge_different_expire_ts`` false in ``flush.rs``), because its retention then drops an
  expired operand alone, or turns an expired value into a tombstone, while the others live on.
  So when the operand's ``expire_ts`` differs from the entry's, the versions the flush would
  write are kept beside the entry, newest first (*parts*): the same stack SlateDB's flush builds,
  equal-``expire_ts`` neighbours folded into one. A memtable flush writes the parts instead of
  the entry (:meth:`~slatedb_core.lsm.memtable.ImmutableMemtable.l0_batch`); reads never look at
  them. A put or delete of the key drops them.

Without a merge operator (a WAL replayed by a writer opened without one) nothing is folded: the
entry is the newest operand (a read of the key raises ``MergeOperatorMissing``, as SlateDB's
does) and the parts hold every version as written.

WAL replay folds with :class:`ReplayOperator`: an operand the operator raises on (a different or
changed operator than the one it was written with) does not fail the open, whose writer has
fenced the old one already. SlateDB 0.17 never calls the operator at replay (``wal_replay.rs``
inserts rows as they are): the key's entry becomes :class:`Unresolved`, holding every version
unfolded; each read of the key folds them again (``MergeOperatorFailed`` per read while the
operator refuses them, as SlateDB's read of such a key fails), and a flush writes them all, so a
writer with the right operator reads every acknowledged write. Later operands onto such a key
are stacked unfolded too, until a put or a delete replaces it.
"""

from __future__ import annotations

from dataclasses import dataclass

from slatedb_core.errors import MergeOperatorFailed
from slatedb_core.lsm.merge_operator import MergeOperator, Unresolved, fold
from slatedb_core.lsm.row_model import KIND_MERGE, KIND_TOMBSTONE, KIND_VALUE, Version

Entry = tuple[int, bytes | None] | Version
Parts = tuple[Version, ...]


def as_version(entry: Entry) -> Version:
    """A memtable entry as a :class:`Version` (a plain ``(seq, value)`` has no timestamps)."""
    if len(entry) != 2:
        assert isinstance(entry, Version)
        return entry
    seq, value = entry
    kind = KIND_TOMBSTONE if value is None else KIND_VALUE
    return Version(seq, kind, value, None, None)


def entry_value(entry: Entry) -> bytes | None:
    """The value bytes an entry holds (None for a tombstone), for size accounting."""
    return entry[1] if len(entry) == 2 else entry[2]


def _earliest(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _latest(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def fold_pair(key: bytes, older: Version, operand: Version, op: MergeOperator) -> Version:
    """``operand`` folded onto ``older`` (SlateDB's ``merge_with_older_entries`` of two
    versions): a value when ``older`` is a value or a tombstone, else one combined operand."""
    if older.kind == KIND_MERGE:
        kind, value = KIND_MERGE, fold(op, key, None, [older.value or b"", operand.value or b""])
    else:
        kind, value = KIND_VALUE, fold(op, key, older.value, [operand.value or b""])
    return Version(
        operand.seq,
        kind,
        value,
        _earliest(older.expire_ts, operand.expire_ts),
        _latest(older.create_ts, operand.create_ts),
    )


@dataclass(frozen=True)
class ReplayOperator:
    """``op`` as WAL replay folds with it: a fold it raises on leaves the key
    :class:`Unresolved` instead of failing the open (see module docstring)."""

    op: MergeOperator

    def __call__(self, key: bytes, existing: bytes | None, operand: bytes) -> bytes:
        return self.op(key, existing, operand)


def merge_onto(
    key: bytes, old: Entry, parts: Parts | None, operand: Version, op: MergeOperator | None
) -> tuple[Version, Parts | None]:
    """The entry and the parts of a key after ``operand`` is written onto its entry ``old``
    (whose parts are ``parts``, None when the entry is its one version; see module docstring)."""
    stack = parts if parts is not None else (as_version(old),)
    if op is None:
        return operand, (operand, *stack)
    if isinstance(old, Unresolved):
        return _unresolved((operand, *old.stack))
    top = stack[0]
    try:
        entry = fold_pair(key, as_version(old), operand, op)
        # the parts fold calls the operator too (onto an operand, with no base): a raise there
        # leaves the key Unresolved as well (issue 38 review 2, item 1)
        folded = (
            (fold_pair(key, top, operand, op), *stack[1:])
            if top.expire_ts == operand.expire_ts
            else (operand, *stack)
        )
    except MergeOperatorFailed:
        if not isinstance(op, ReplayOperator):
            raise  # a write: refused before anything changes
        return _unresolved((operand, *stack))
    return entry, (folded if len(folded) > 1 else None)


def _unresolved(stack: Parts) -> tuple[Version, Parts]:
    """The entry and parts of a key whose versions ``stack`` stay unfolded."""
    return Unresolved.of(stack), stack


__all__ = [
    "Entry",
    "Parts",
    "ReplayOperator",
    "as_version",
    "entry_value",
    "fold_pair",
    "merge_onto",
]
