"""Fixtures of the cross-engine tests: one directory per test that SlateDB 0.17's own engine (the
``slatedb`` wheel, driven through :mod:`tests.interop.oracle`) and ours both open, the wheel with
its ``LOCAL`` object store rooted there, ours with ``open_store(root)``; the database is ``db``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from tests.interop.oracle import Oracle


@pytest.fixture
def root(tmp_path: Path) -> Path:
    d = tmp_path / "store"
    d.mkdir()
    return d


@pytest.fixture
def oracle(root: Path) -> Iterator[Oracle]:
    o = Oracle(root)
    try:
        yield o
    finally:
        o.close()


@pytest.fixture
def store(root: Path) -> ObjectStore:
    return open_store(root)
