"""Review of issue 38 (items 1 and 2): SlateDB 0.17 refuses a write batch in which the merge
operands of one key cannot fold into one row because their ``expire_ts`` differ from each other
or from the key's put or delete before them in the batch (``IncompatibleMergeTtls``, an
``Invalid`` error; a later put or delete of the key replaces what came before). Ours accepted
such a batch and reported success for a write SlateDB refuses. Each case is checked against the
wheel in the same run."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import slatedb.uniffi as sdb  # type: ignore[import-untyped]

from slatedb_core.errors import InvalidArgument
from slatedb_core.options import DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db
from tests.interop.oracle import Oracle
from tests.interop.oracle_merge import Op, ours_write, slatedb_write
from tests.interop.oracle_merge_read import StringAppend, open_merge_db

pytestmark = pytest.mark.slatedb


A, B = 3_600_000, 7_200_000


CASES: dict[str, tuple[list[Op], bool]] = {
    "two operand ttls": ([("merge", b"k", b"1", A), ("merge", b"k", b"2", B)], False),
    "put then ttl operand": ([("put", b"k", b"1", None), ("merge", b"k", b"2", A)], False),
    "delete then ttl operand": ([("delete", b"k", None, None), ("merge", b"k", b"2", A)], False),
    "ttl put then operand": ([("put", b"k", b"1", A), ("merge", b"k", b"2", None)], False),
    "operand then put": ([("merge", b"k", b"1", A), ("put", b"k", b"2", None)], True),
    "operands, then delete": (
        [("merge", b"k", b"1", A), ("merge", b"k", b"2", B), ("delete", b"k", None, None)],
        True,
    ),
    "same ttl": ([("put", b"k", b"1", A), ("merge", b"k", b"2", A)], True),
    "two keys": ([("merge", b"k", b"1", A), ("merge", b"j", b"2", B)], True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_batch_slatedb_refuses_is_refused(oracle: Oracle, tmp_path: Path, case: str) -> None:
    """Found by the review of issue 38 (was review/test_issue38_batch_ttls.py)."""
    ops, accepted = CASES[case]
    w = open_merge_db(oracle, StringAppend(), path="theirs")
    if accepted:
        slatedb_write(w, ops)
    else:
        with pytest.raises(sdb.Error.Invalid, match="only one merge TTL per-key"):
            slatedb_write(w, ops)
    want = {k: w.get(k) for k in (b"k", b"j")}
    options = DbOptions(flush_interval=timedelta(milliseconds=10), merge_operator="string_append")
    with Db.open("ours", open_store(tmp_path.as_uri()), options) as db:
        if accepted:
            ours_write(db, ops)
        else:
            with pytest.raises(InvalidArgument, match="merge operands of one key"):
                ours_write(db, ops)
        assert {k: db.get(k) for k in (b"k", b"j")} == want
