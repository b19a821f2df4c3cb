"""Benchmark data shared by the engine benches: ``n`` rows of random 16-byte keys and 100-byte
values as one Arrow table, built from two numpy buffers (no Python loop over the rows)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

KEY_LEN = 16
VALUE_LEN = 100


def make_table(n: int, rng: np.random.Generator) -> pa.Table:
    kbuf = rng.integers(0, 256, n * KEY_LEN, dtype=np.uint8)
    vbuf = rng.integers(0, 256, n * VALUE_LEN, dtype=np.uint8)
    koffs = np.arange(n + 1, dtype=np.int32) * KEY_LEN
    voffs = np.arange(n + 1, dtype=np.int32) * VALUE_LEN
    keys = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(koffs), pa.py_buffer(kbuf)])
    vals = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(voffs), pa.py_buffer(vbuf)])
    return pa.table({"key": keys, "value": vals})
