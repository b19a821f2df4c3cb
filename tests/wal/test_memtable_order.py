"""A frozen memtable's sorted batch (what a memtable flush encodes into an L0 SST): keys in byte
order whether or not their first 8 bytes tell them apart, and whatever their widths."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from slatedb_core.lsm.entries import sortable_keys
from slatedb_core.lsm.memtable import Memtable, unique_key_order


def _check(keys: list[bytes]) -> None:
    skeys = sortable_keys([pa.array(keys, pa.binary())])
    assert skeys is not None
    assert [keys[i] for i in unique_key_order(skeys)] == sorted(keys)
    memtable = Memtable()
    for seq, key in enumerate(keys, 1):
        memtable.put(key, seq, None if seq % 7 == 0 else key[::-1])
    batch = memtable.freeze().batch
    assert batch.column(0).to_pylist() == sorted(keys)
    by_key = {k: s for s, k in enumerate(keys, 1)}
    assert batch.column(1).to_pylist() == [by_key[k] for k in sorted(keys)]


def test_random_keys_sort_by_their_first_8_bytes() -> None:
    rng = np.random.default_rng(5)
    _check(sorted({rng.bytes(16) for _ in range(5000)}, key=lambda k: k[::-1]))


def test_keys_sharing_their_first_8_bytes() -> None:
    _check([b"user:000%05d" % i for i in range(3000, 0, -7)] + [b"user:000"])
    _check([b"\xff" * 8 + bytes([i]) for i in range(200, 0, -1)] + [b"\x00" * 9])


@settings(max_examples=200, deadline=None)
@given(st.sets(st.binary(min_size=1, max_size=20), min_size=1, max_size=300))
def test_any_distinct_keys(keys: set[bytes]) -> None:
    _check(list(keys))
