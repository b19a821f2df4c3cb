"""GC also runs over two-phase CAS (see ``store_or_two_phase`` in tests/conftest.py)."""

from __future__ import annotations

import pytest

from slatedb_core.store.objectstore import ObjectStore


@pytest.fixture
def store(store_or_two_phase: ObjectStore) -> ObjectStore:
    return store_or_two_phase
