"""Point lookups through raw cached blocks answer what a scan reads, over whole databases.

Issue 42, goal 1: ``get`` and ``get_many`` search cached raw blocks (slatedb_core/sst/raw_block.py)
and probe bloom filters before searching (a key's hash shared across SSTs). Random databases
with overlapping L0 SSTs, many versions of a key, tombstones, tiny and large blocks, before and
after a compaction, read by ``Db`` and by a ``DbReader``: every key's ``get``, its ``get_many``
and the scan agree with a model, warm (second pass) and cold (fresh cache)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slatedb_core.compactor.compactor import run_compaction_once
from slatedb_core.options import CompactorOptions, DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db

_KEY = st.lists(st.sampled_from([0, 1, 0x61, 0xFF]), min_size=1, max_size=6).map(bytes)
_OP = st.tuples(
    st.sampled_from(["put", "put", "put", "delete", "flush"]), _KEY, st.binary(max_size=40)
)


@pytest.mark.slow  # 25 random databases written, compacted and read: ~8 s (issue 42, goal 1)
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    ops=st.lists(_OP, min_size=1, max_size=120),
    block_size=st.sampled_from([1, 64, 4096, 65536]),
    compact=st.booleans(),
    extra=st.lists(_KEY, max_size=10),
)
def test_get_and_get_many_answer_what_the_scan_reads(
    tmp_path_factory: pytest.TempPathFactory,
    ops: list[tuple[str, bytes, bytes]],
    block_size: int,
    compact: bool,
    extra: list[bytes],
) -> None:
    root = tmp_path_factory.mktemp("db")
    store = open_store(f"file://{root}")
    options = DbOptions(block_size=block_size)
    model: dict[bytes, bytes | None] = {}
    with Db.open("db", store, options=options) as db:
        for op, key, value in ops:
            if op == "put":
                db.put(key, value, await_durable=False)
                model[key] = value
            elif op == "delete":
                db.delete(key, await_durable=False)
                model[key] = None
            else:
                db.flush_memtable()
        db.flush_memtable()
    if compact:
        run_compaction_once(
            "db", store, CompactorOptions(l0_trigger=1, poll_interval=timedelta(seconds=1))
        )
    asked = sorted(set(model) | set(extra) | {k + b"\x00" for k in model})
    want = [model.get(k) for k in asked]
    live = {k: v for k, v in model.items() if v is not None}
    for _ in range(2):  # each with a fresh cache: cold, then warm
        with Db.open("db", store, options=options) as db:
            assert dict(db.scan()) == live
            for _warm in range(2):
                assert [db.get(k) for k in asked] == want
                assert db.get_many(asked) == want
                assert db.get_many(asked[::-1]) == want[::-1]
