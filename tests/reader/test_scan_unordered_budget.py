"""``DbReader.scan_arrow``'s ``ordered=False`` and ``read_budget`` (issue 42, goal 4: what a
Spark partition's read asks for).

``ordered=False`` returns the rows of the scan in no particular order, skipping the merge's
gather in key order where a round's keys are each in one source; ``read_budget`` shares a number
of bytes of SST reads among the scan's sources from the first GET on, instead of each source's
GETs doubling from READAHEAD_START (a Spark task scanned its partition in steps, each starting its
16 sources small again). Random databases with overlapping L0 SSTs, tombstones and many versions
of a key, tiny and large blocks, whole and partial ranges: the unordered scan holds the ordered
scan's rows, each once."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slatedb_core import DbReader
from slatedb_core.options import DbOptions
from slatedb_core.sst import fetch
from slatedb_core.sst import reader as sst_reader
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db

_KEY = st.lists(st.sampled_from([0, 1, 0x61, 0xFF]), min_size=1, max_size=6).map(bytes)
_OP = st.tuples(
    st.sampled_from(["put", "put", "put", "delete", "flush"]), _KEY, st.binary(max_size=40)
)


def _rows(reader: pa.RecordBatchReader) -> list[tuple[bytes, bytes]]:
    out: list[tuple[bytes, bytes]] = []
    for b in reader:
        out.extend(zip(b.column(0).to_pylist(), b.column(1).to_pylist(), strict=True))
    return out


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    ops=st.lists(_OP, min_size=1, max_size=120),
    block_size=st.sampled_from([1, 64, 4096]),
    budget=st.sampled_from([None, 1, 300, 1 << 20]),
    bounds=st.tuples(st.none() | _KEY, st.none() | _KEY),
)
def test_an_unordered_scan_holds_the_ordered_scans_rows(
    tmp_path_factory: pytest.TempPathFactory,
    ops: list[tuple[str, bytes, bytes]],
    block_size: int,
    budget: int | None,
    bounds: tuple[bytes | None, bytes | None],
) -> None:
    root = tmp_path_factory.mktemp("db")
    store = open_store(f"file://{root}")
    model: dict[bytes, bytes | None] = {}
    with Db.open("db", store, options=DbOptions(block_size=block_size)) as db:
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
    start, end = bounds
    if start is not None and end is not None and end < start:
        start, end = end, start
    live = sorted(
        (k, v)
        for k, v in model.items()
        if v is not None and (start is None or k >= start) and (end is None or k < end)
    )
    with DbReader.open("db", store) as reader:
        assert _rows(reader.scan_arrow(start, end, read_budget=budget)) == live
        got = _rows(reader.scan_arrow(start, end, 7, read_budget=budget, ordered=False))
    assert sorted(got) == live


def test_a_read_budget_sets_every_get_from_the_first(tmp_path: Path) -> None:
    """Four overlapping L0 SSTs of ~1 MB in 4 KiB blocks, a 2 MiB budget: each source's GETs
    are ~512 KiB from the first on (without a budget they start at READAHEAD_START)."""
    store = open_store(tmp_path.as_uri())
    with Db.open("db", store, options=DbOptions(block_size=4096)) as db:
        for r in range(4):
            for i in range(r, 40_000, 4):
                db.put(b"k%08d" % i, b"v" * 100, await_durable=False)
            db.flush_memtable()
    sizes: list[int] = []
    real = fetch.get_range

    def spy(store: object, path: str, start: int, end: int, **kw: object) -> pa.Buffer:
        if not kw.get("opening"):  # an SST's open reads its footer and index: not the scan's
            sizes.append(end - start)
        return real(store, path, start, end, **kw)  # type: ignore[arg-type]

    budget = 2 << 20
    with DbReader.open("db", store) as reader, mock.patch("slatedb_core.sst.reader.get_range", spy):
        rows = sum(b.num_rows for b in reader.scan_arrow(read_budget=budget, ordered=False))
    assert rows == 40_000
    share = budget // 4
    assert len(sizes) >= 4
    assert all(s <= share for s in sizes)
    assert sum(s > share // 2 for s in sizes) >= len(sizes) - 4  # only each source's last
    assert sum(s > sst_reader.READAHEAD_START for s in sizes) >= 4

    sizes.clear()
    with DbReader.open("db", store) as reader, mock.patch("slatedb_core.sst.reader.get_range", spy):
        assert sum(b.num_rows for b in reader.scan_arrow()) == 40_000
    assert min(sizes) <= sst_reader.READAHEAD_START  # the ramp starts small


def test_the_budget_is_checked(tmp_path: Path) -> None:
    store = open_store(tmp_path.as_uri())
    with Db.open("db", store) as db:
        db.put(b"a", b"1")
    with DbReader.open("db", store) as reader, pytest.raises(Exception, match="read_budget"):
        reader.scan_arrow(read_budget=0)
