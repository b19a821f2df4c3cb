"""Merge operators: how a key's merge operands fold into its value (SlateDB RFC 0006).

A merge operand is a row of kind ``KIND_MERGE`` (:mod:`slatedb_core.lsm.row_model`): instead of a
read-modify-write, the application writes the operand and the engine folds it, on read and in
compaction, onto the key's older value with the application's associative operator
``op(key, existing, operand) -> value``. A read of a key walks its versions newest first,
collecting operands until a value or a tombstone (the *base*) or the end of the key's history,
then folds the operands oldest first onto the base's value (``None`` for a tombstone or no base).

SlateDB 0.17 reads do not look at ``expire_ts``: an expired row reads as it was written until a
compaction turns it into a tombstone (checked against the wheel: a 300 ms TTL row still reads
after 500 ms, from the memtable and from L0). :func:`resolve` therefore ignores timestamps;
:mod:`slatedb_core.lsm.retention` applies them when rows are rewritten.

The operator is the application's code: an exception from it becomes :class:`MergeOperatorFailed`
naming the key, and operands met without an operator raise :class:`MergeOperatorMissing` for that
key only, as SlateDB's ``MergeOperatorRequiredIterator`` does.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from slatedb_core.errors import MergeOperatorFailed, MergeOperatorMissing
from slatedb_core.lsm.row_model import KIND_MERGE, KIND_TOMBSTONE, Version
from slatedb_core.merge_operators import (
    BUILTIN_MERGE_OPERATORS,
    MergeOperator,
    add_int64,
    merge_operator_name,
    resolve_merge_operator,
    string_append,
)

__all__ = [
    "BUILTIN_MERGE_OPERATORS",
    "MergeOperator",
    "Unresolved",
    "add_int64",
    "fold",
    "merge_operator_name",
    "needs_older",
    "resolve",
    "resolve_merge_operator",
    "string_append",
]


def fold(
    op: MergeOperator | None, key: bytes, base: bytes | None, operands: Sequence[bytes]
) -> bytes:
    """``operands`` (oldest first) folded onto ``base``: ``op(op(base, o1), o2)...``."""
    if op is None:
        raise MergeOperatorMissing(key)
    value = base
    try:
        for operand in operands:
            value = op(key, value, operand)
            if not isinstance(value, bytes):
                # a bytearray or memoryview from the application; never ``bytes(3)`` (three
                # zero bytes) or a list of ints: a value nobody wrote
                if not isinstance(value, bytearray | memoryview):
                    raise TypeError(
                        f"a merge operator must return bytes, got {type(value).__name__}"
                    )
                value = bytes(value)
    except (MergeOperatorMissing, MergeOperatorFailed):
        raise
    except Exception as e:
        raise MergeOperatorFailed(key, e) from e
    if value is None:  # no operands and no base: nothing to fold (callers check first)
        raise MergeOperatorFailed(key, ValueError("nothing to fold"))
    return value


class Unresolved(Version):
    """A memtable entry whose operands could not be folded when a writer replayed its WAL (the
    operator raised on them): the newest operand, with ``stack``, every version of the key in the
    memtable as written, newest first. Acknowledged rows are never dropped for the operator's
    failure: :func:`resolve` folds ``stack`` at each read (raising ``MergeOperatorFailed`` per read
    of the key while the operator refuses them), and a flush writes ``stack`` as it is, as
    SlateDB 0.17 keeps every replayed row in its memtable unfolded (``wal_replay.rs``)."""

    stack: tuple[Version, ...]

    @classmethod
    def of(cls, stack: tuple[Version, ...]) -> Unresolved:
        u = cls(*stack[0])
        u.stack = stack
        return u


def _expanded(versions: Iterable[Version]) -> Iterator[Version]:
    """``versions`` with each :class:`Unresolved` entry replaced by its stack."""
    for v in versions:
        if isinstance(v, Unresolved):
            yield from v.stack
        else:
            yield v


def needs_older(version: Version | tuple[int, bytes | None]) -> bool:
    """Whether a read that found ``version`` as the newest one of its source must look at older
    versions too: it is a merge operand. A plain ``(seq, value)`` memtable entry never is."""
    return len(version) != 2 and version[1] == KIND_MERGE


def resolve(
    key: bytes,
    versions_newest_first: Iterable[Version],
    op: MergeOperator | None,
) -> bytes | None:
    """The value a read of ``key`` returns, from its versions newest first (as many as the read
    needs: the iteration stops at the first value or tombstone). None: deleted or absent."""
    operands: list[bytes] = []
    base: bytes | None = None
    for v in _expanded(versions_newest_first):
        if v.kind == KIND_MERGE:
            operands.append(v.value or b"")
            continue
        base = None if v.kind == KIND_TOMBSTONE else (v.value or b"")
        break
    if not operands:
        return base
    operands.reverse()
    return fold(op, key, base, operands)
