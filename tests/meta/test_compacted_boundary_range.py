"""A ``gc/compacted.boundary`` beyond a ULID's 48-bit time is corruption naming it (it made
``Db.open`` raise ValueError), 2^48-1 is valid, and a corrupt boundary is not cached."""

from __future__ import annotations

from datetime import timedelta

import pytest

from slatedb_core import Db, GarbageCollectorOptions, ObjectStore, run_gc_once
from slatedb_core.errors import CorruptionError
from slatedb_core.meta.compacted_boundary import compacted_boundary
from slatedb_core.store.url import open_store
from tests.core.bad_input_steps import GOOD

ULID_MS_MAX = 2**48 - 1  # the largest time a ULID carries: 48 bits of milliseconds


# ---- item 16: a compacted boundary beyond a ULID's time ---------------------------------------
def _with_boundary(store: ObjectStore, value: int) -> str:
    store.put(f"{GOOD}/gc/compacted.boundary", str(value).encode())
    return f"{GOOD}/gc/compacted.boundary"


@pytest.fixture
def store(store_url: str) -> ObjectStore:
    """Memory, local and S3, as where these tests were found: the folder's ``store`` adds
    two-phase CAS."""
    return open_store(store_url)


@pytest.mark.parametrize("value", [2**48, 2**48 + 1, 2**64 - 1])
def test_a_compacted_boundary_past_48_bits_is_corruption_naming_it(
    store: ObjectStore, value: int
) -> None:
    """Found by the review of RELIABILITY.md, items 14-17 (was test_bad_input_review.py)."""
    with Db.open(GOOD, store) as db:
        db.put(b"k1", b"v1")
        db.flush_memtable()
        db.put(b"k2", b"v2")
    name = _with_boundary(store, value)
    with pytest.raises(CorruptionError) as info:
        compacted_boundary(store, GOOD).read()
    assert info.value.name == name and str(value) in str(info.value)
    # a writer: its open, or its first L0 SST (secured against the boundary), fails typed
    with pytest.raises(CorruptionError, match=r"compacted\.boundary"):
        with Db.open(GOOD, store) as db:
            db.put(b"k3", b"v3")
            db.flush_memtable()
    # GC with min_age 0 must not take the value as leave to delete every unreferenced SST
    store.put(f"{GOOD}/compacted/01ARZ3NDEKTSV4RRFFQ69G5FAV.sst", b"an old unreferenced SST")
    with pytest.raises(CorruptionError, match=r"compacted\.boundary"):
        run_gc_once(GOOD, store, GarbageCollectorOptions(min_age=timedelta(0)))
    assert store.get(f"{GOOD}/compacted/01ARZ3NDEKTSV4RRFFQ69G5FAV.sst").data
    assert store.get(name).data == str(value).encode()


def test_the_largest_ulid_time_is_a_valid_compacted_boundary(store: ObjectStore) -> None:
    """2^48-1 covers every SST id there can be (destroy's tombstone): valid, not corruption.

    Found by the review of RELIABILITY.md, items 14-17 (was test_bad_input_review.py)."""
    from slatedb_core.meta.compacted_boundary import ULID_MS_MAX as documented

    assert documented == ULID_MS_MAX
    with Db.open(GOOD, store) as db:
        db.put(b"k1", b"v1")
    _with_boundary(store, ULID_MS_MAX)
    boundary = compacted_boundary(store, GOOD)
    assert boundary.read() == ULID_MS_MAX
    assert boundary.cached == ULID_MS_MAX


def test_a_corrupt_boundary_is_not_cached(store: ObjectStore) -> None:
    """Repairing the object (restoring the value GC wrote) makes the same process read it again,
    rather than reporting the repaired value as a boundary that moved backwards.

    Found by the review of RELIABILITY.md, items 14-17 (was test_bad_input_review.py)."""
    _with_boundary(store, 1_000)
    boundary = compacted_boundary(store, GOOD)
    assert boundary.read() == 1_000
    _with_boundary(store, 2**50)
    for _ in range(2):
        with pytest.raises(CorruptionError):
            boundary.read()
    assert boundary.cached == 1_000
    _with_boundary(store, 2_000)
    assert boundary.read() == 2_000
