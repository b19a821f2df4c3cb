"""``DbOptions.glibc_malloc_threshold_bytes`` (issue 42, goal 3): off by default, validated,
and, where asked for, applied through glibc's ``mallopt`` when the writer opens.

From bench/results/db_ingest_memory.txt (session 52): at the peak of a 10M-row ingest ~180 MiB
of glibc's heaps were free but resident; fixing glibc's thresholds returns it, for CPU, so it is
an explicit, process-wide opt-in."""

from __future__ import annotations

import subprocess
import sys

import pytest

from slatedb_core.errors import InvalidArgument
from slatedb_core.options import DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.writer import malloc_tuning
from slatedb_core.writer.db import Db


def test_off_by_default() -> None:
    assert DbOptions().glibc_malloc_threshold_bytes is None


@pytest.mark.parametrize("bad", [0, 1024, 64 * 1024 * 1024, -1, 1.5, "1M", True])
def test_out_of_range_or_not_an_int_is_refused(bad: object) -> None:
    with pytest.raises(InvalidArgument):
        DbOptions(glibc_malloc_threshold_bytes=bad)  # type: ignore[arg-type]


def test_open_applies_it_and_only_when_asked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(malloc_tuning, "apply_glibc_malloc_threshold", calls.append)
    store = open_store(f"file://{tmp_path}")
    Db.open("a", store, DbOptions()).close()
    assert calls == []
    Db.open("b", store, DbOptions(glibc_malloc_threshold_bytes=1 << 20)).close()
    assert calls == [1 << 20]


_PROBE = """
import ctypes, sys
import numpy as np
from slatedb_core.writer import malloc_tuning
if malloc_tuning._glibc() is None:
    print("not glibc"); sys.exit(0)
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
big = np.ones(16 << 20, dtype=np.uint8)
del big  # a freed 16 MiB block: glibc's dynamic mmap threshold rises to 16 MiB
def mapped_for(n):
    a = np.ones(n, dtype=np.uint8)
    del a  # freed next to the heap's top: returned past the trim threshold
    before = libc.mallinfo2().hblkhd
    a = np.ones(n, dtype=np.uint8)
    return libc.mallinfo2().hblkhd - before >= n
print("before", mapped_for(4 << 20))
assert malloc_tuning.apply_glibc_malloc_threshold(1 << 20)
assert malloc_tuning.apply_glibc_malloc_threshold(1 << 20)  # idempotent
print("after", mapped_for(4 << 20))
"""


def test_apply_sets_glibcs_mmap_threshold_in_the_process() -> None:
    """In a child process (the setting is process-wide): a 4 MiB block comes from a heap under
    glibc's raised dynamic threshold, and is mapped on its own once the threshold is 1 MiB."""
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    if out[0] == "not glibc":
        pytest.skip("not glibc")
    assert out[:2] == ["before False", "after True"]
