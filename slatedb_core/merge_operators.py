"""Merge operators by name: the operator protocol and the built-ins options, the CLI, Spark and
Dagster can name (SlateDB RFC 0006).

This module sits below ``options`` (it depends only on ``errors``) so typed options can validate
an operator's name where it is given; how operands fold on read and in compaction is
:mod:`slatedb_core.lsm.merge_operator`.
"""

from __future__ import annotations

from typing import Protocol

from slatedb_core.errors import InvalidArgument

__all__ = [
    "BUILTIN_MERGE_OPERATORS",
    "MergeOperator",
    "add_int64",
    "merge_operator_name",
    "resolve_merge_operator",
    "string_append",
]


class MergeOperator(Protocol):
    """SlateDB's ``MergeOperator::merge(key, existing_value, operand)``; must be associative:
    ``op(k, op(k, a, b), c) == op(k, a, op(k, b, c))`` for operands folded in any grouping."""

    def __call__(self, key: bytes, existing: bytes | None, operand: bytes) -> bytes: ...


_INT64 = 1 << 64


def add_int64(key: bytes, existing: bytes | None, operand: bytes) -> bytes:
    """Sum of 8-byte little-endian signed integers, wrapping at 64 bits (a missing value is 0).
    An operand or value of another length is refused (``ValueError``)."""
    if len(operand) != 8 or (existing is not None and len(existing) != 8):
        raise ValueError("add_int64 operands and values are 8-byte little-endian integers")
    base = int.from_bytes(existing, "little", signed=True) if existing is not None else 0
    total = (base + int.from_bytes(operand, "little", signed=True)) % _INT64
    return total.to_bytes(8, "little", signed=False)


def string_append(key: bytes, existing: bytes | None, operand: bytes) -> bytes:
    """``existing + operand`` (a missing value is empty)."""
    return operand if existing is None else existing + operand


BUILTIN_MERGE_OPERATORS: dict[str, MergeOperator] = {
    "add_int64": add_int64,
    "string_append": string_append,
}
"""The operators options, the CLI, Spark and Dagster can name (``merge_operator="add_int64"``)."""


def resolve_merge_operator(spec: str | MergeOperator | None) -> MergeOperator | None:
    """The operator ``spec`` names: a built-in's name, a callable, or None (no operator)."""
    if spec is None:
        return None
    if isinstance(spec, str):
        op = BUILTIN_MERGE_OPERATORS.get(spec)
        if op is None:
            raise InvalidArgument(
                f"unknown merge operator {spec!r}: use one of "
                f"{sorted(BUILTIN_MERGE_OPERATORS)} or pass a callable (key, existing, operand)"
            )
        return op
    if not callable(spec):
        raise InvalidArgument(
            f"merge_operator must be a built-in name or a callable, got {type(spec).__name__}"
        )
    return spec


def merge_operator_name(op: MergeOperator | None) -> str | None:
    """The built-in name of ``op``, None for no operator or an application's own."""
    for name, builtin in BUILTIN_MERGE_OPERATORS.items():
        if op is builtin:
            return name
    return None
