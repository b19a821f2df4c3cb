"""A whole or suffix read that walks afresh lets a held file go that its name no longer holds,
so the next point lookup's read (``read_range``) reads the file the walk found (review 52 of
a627206: the held read checks only the file's name in its held directory, and a folder moved
aside keeps the old file under that name; the module doc promised a fresh walk sees the swap,
but whole and suffix reads walked past the held files without looking)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slatedb_core.store.objectstore import ObstoreObjectStore
from slatedb_core.store.url import open_store

KEY = "out/a.sst"


@pytest.mark.parametrize("walk", ["whole", "suffix", "ranged"])
def test_a_point_lookups_read_after_a_fresh_walk_reads_the_file_found(
    tmp_path: Path, walk: str
) -> None:
    store = open_store(tmp_path.as_uri())
    assert isinstance(store, ObstoreObjectStore)
    store.put(KEY, b"0123456789")
    assert store.read_range(KEY, 2, 6) == b"2345"  # held
    os.rename(tmp_path / "out", tmp_path / "out.prev")
    (tmp_path / "out").mkdir()
    (tmp_path / KEY).write_bytes(b"abcdefghij")
    if walk == "whole":
        assert store.get(KEY).data == b"abcdefghij"
    elif walk == "suffix":
        assert store.get_suffix(KEY, 4).data == b"ghij"
    else:
        assert store.get(KEY, byte_range=(0, 2)).data == b"ab"
    assert store.read_range(KEY, 2, 6) == b"cdef"
