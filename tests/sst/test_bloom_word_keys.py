"""SipHash-1-3 of keys whose width is a multiple of 8 (16-byte ids, 8-byte integers) reads the
message words straight from the key bytes, with the final word (the length alone) as a
constant: it must equal the single-key hash, across hashing chunks and wherever the keys start
in their buffer."""

from __future__ import annotations

import numpy as np
import pytest

from slatedb_core.sst import bloom
from slatedb_core.sst.bloom import hash_key, hash_keys


@pytest.mark.parametrize("width", [8, 16, 24, 64, 256])
@pytest.mark.parametrize("start", [0, 5])
def test_word_keys_hash_as_single_keys(
    width: int, start: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bloom, "_CHUNK", 40 * width)  # 40 keys per chunk: several chunks
    rng = np.random.default_rng(width + start)
    n = 173
    data = rng.integers(0, 256, start + n * width, dtype=np.uint8)
    offs = start + np.arange(n + 1, dtype=np.int64) * width
    keys = [data[int(offs[i]) : int(offs[i + 1])].tobytes() for i in range(n)]
    assert hash_keys(data, offs).tolist() == [hash_key(k) for k in keys]
