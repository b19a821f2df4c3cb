"""Review of issue 38 (item 2): a merge operator is the application's code, and what it returns
is stored as the key's value. ``fold`` coerced any result with ``bytes(...)``, so an operator
returning an int (``3``) silently stored three zero bytes, and one returning a list of ints
stored those bytes: a value nobody wrote, flushed to L0 like any other. Only bytes-like results
(bytes, bytearray, memoryview) are values; anything else is ``MergeOperatorFailed`` naming the
key, as for an operator that raises."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from slatedb_core.errors import MergeOperatorFailed
from slatedb_core.lsm.merge_operator import fold
from slatedb_core.options import DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db


@pytest.mark.parametrize("result", [3, 0, [65, 66], "ab", None, 1.5])
def test_a_result_that_is_not_bytes_is_a_failure(result: object) -> None:
    """Found by the review of issue 38 (was review/test_issue38_operator_results.py)."""
    with pytest.raises(MergeOperatorFailed) as e:
        fold(lambda k, old, operand: result, b"k", b"v", [b"x"])  # type: ignore[arg-type]
    assert e.value.key == b"k"


@pytest.mark.parametrize("result", [b"ok", bytearray(b"ok"), memoryview(b"ok")])
def test_bytes_like_results_are_values(result: object) -> None:
    """Found by the review of issue 38 (was review/test_issue38_operator_results.py)."""
    assert fold(lambda k, old, operand: result, b"k", None, [b"x"]) == b"ok"  # type: ignore[arg-type]


def test_the_writer_refuses_an_int_result_and_keeps_the_value(tmp_path: Path) -> None:
    """Found by the review of issue 38 (was review/test_issue38_operator_results.py)."""
    options = DbOptions(flush_interval=timedelta(hours=1), merge_operator=lambda k, e, o: 3)
    with Db.open("db", open_store(tmp_path.as_uri()), options) as db:
        db.put(b"k", b"v")
        with pytest.raises(MergeOperatorFailed):
            db.merge(b"k", b"x")
        assert db.get(b"k") == b"v"
