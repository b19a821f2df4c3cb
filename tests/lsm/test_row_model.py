"""The row model and merge operators (issue 38: one row model every read and rewrite carries;
SlateDB RFC 0006 read semantics for merge operands)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from slatedb_core.errors import InvalidArgument, MergeOperatorFailed, MergeOperatorMissing
from slatedb_core.lsm.entries import batch_from_lists
from slatedb_core.lsm.merge_operator import (
    add_int64,
    fold,
    merge_operator_name,
    needs_older,
    resolve,
    resolve_merge_operator,
    string_append,
)
from slatedb_core.lsm.row_model import (
    ENTRY_SCHEMA,
    KIND_MERGE,
    KIND_TOMBSTONE,
    KIND_VALUE,
    ROW_SCHEMA,
    Version,
    concat_rows,
    expired_mask,
    has_merges,
    narrow,
    version_at,
    widen,
)


def i64(n: int) -> bytes:
    return n.to_bytes(8, "little", signed=True)


def test_widen_narrow_and_concat_keep_the_timestamps() -> None:
    plain = batch_from_lists([b"a"], [1], [KIND_VALUE], [b"x"])
    wide = pa.RecordBatch.from_arrays(
        [
            *batch_from_lists([b"b"], [2], [KIND_MERGE], [b"y"]).columns,
            pa.array([5]),
            pa.array([3]),
        ],
        schema=ROW_SCHEMA,
    )
    assert widen(plain).schema == ROW_SCHEMA
    assert narrow(widen(plain)).schema == ENTRY_SCHEMA
    assert narrow(wide).schema == ROW_SCHEMA
    both = concat_rows([plain, wide])
    assert both.schema == ROW_SCHEMA
    assert both.column("expire_ts").to_pylist() == [None, 5]
    assert concat_rows([plain, plain]).schema == ENTRY_SCHEMA
    assert expired_mask(both, 5).tolist() == [False, True]
    assert expired_mask(both, 4).tolist() == [False, False]
    assert expired_mask(plain, 10**15).tolist() == [False]
    assert has_merges(both) and not has_merges(plain)
    assert version_at(both, 1) == Version(2, KIND_MERGE, b"y", 5, 3)


def test_resolve_folds_operands_oldest_first_onto_the_base() -> None:
    versions = [
        Version(5, KIND_MERGE, b"c", None, None),
        Version(4, KIND_MERGE, b"b", None, None),
        Version(3, KIND_VALUE, b"a", None, None),
        Version(2, KIND_MERGE, b"never", None, None),
    ]
    assert resolve(b"k", versions, string_append) == b"abc"
    tomb = [Version(5, KIND_MERGE, b"c", None, None), Version(3, KIND_TOMBSTONE, None, None, None)]
    assert resolve(b"k", tomb, string_append) == b"c"
    assert resolve(b"k", [Version(3, KIND_TOMBSTONE, None, None, None)], None) is None
    assert resolve(b"k", [Version(3, KIND_VALUE, b"v", 1, None)], None) == b"v"  # no expiry on read
    assert resolve(b"k", [], None) is None


def test_operands_without_an_operator_fail_for_that_key() -> None:
    with pytest.raises(MergeOperatorMissing) as e:
        resolve(b"counter", [Version(1, KIND_MERGE, i64(1), None, None)], None)
    assert e.value.key == b"counter"


def test_a_failing_operator_is_a_typed_error_naming_the_key() -> None:
    with pytest.raises(MergeOperatorFailed, match="b'k'"):
        fold(add_int64, b"k", None, [b"short"])


def test_builtins_by_name() -> None:
    op = resolve_merge_operator("add_int64")
    assert op is add_int64 and merge_operator_name(op) == "add_int64"
    assert fold(op, b"k", i64(-3), [i64(1), i64(5)]) == i64(3)
    assert fold(op, b"k", i64(2**63 - 1), [i64(1)]) == i64(-(2**63))  # wraps
    assert resolve_merge_operator(None) is None
    with pytest.raises(InvalidArgument, match="unknown merge operator"):
        resolve_merge_operator("sum")
    with pytest.raises(InvalidArgument):
        resolve_merge_operator(3)  # type: ignore[arg-type]


def test_needs_older() -> None:
    assert not needs_older((1, b"v"))
    assert not needs_older((1, None))
    assert needs_older(Version(1, KIND_MERGE, b"o", None, None))
    assert not needs_older(Version(1, KIND_VALUE, b"v", 9, None))
