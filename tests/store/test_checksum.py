"""The store's CRC-32 is zlib's, whichever implementation computes it."""

from __future__ import annotations

import zlib

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from slatedb_core.store.checksum import crc32


@given(data=st.binary(max_size=5000), start=st.integers(0, (1 << 32) - 1), cut=st.integers(0, 5000))
def test_same_values_as_zlib(data: bytes, start: int, cut: int) -> None:
    assert crc32(data) == zlib.crc32(data)
    assert crc32(data, start) == zlib.crc32(data, start)
    head, tail = data[:cut], data[cut:]
    assert crc32(tail, crc32(head)) == zlib.crc32(data)


def test_takes_any_buffer() -> None:
    arr = np.arange(1000, dtype=np.uint8)
    assert crc32(arr[100:900]) == zlib.crc32(arr[100:900].tobytes())
    assert crc32(memoryview(arr.tobytes())[5:50]) == zlib.crc32(arr.tobytes()[5:50])
    assert crc32(b"") == 0
