"""Opening a SQLite transactional store while another connection holds its write lock
(issue 37, item 7g: a raw ``sqlite3.OperationalError: database is locked`` at open).

The open sets WAL mode and creates the tables. Changing the journal mode while another connection
holds a write lock fails at once, without SQLite's busy handler, and every statement of the open
used to raise the driver's own error. The open must wait for the lock within ``busy_timeout_s``
and then either succeed or raise a typed :class:`~slatedb_core.errors.StoreError` that says what
to do.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slatedb_core.errors import StoreError
from slatedb_core.store.txn import SqliteTxnStore


def _lock(path: Path, how: str) -> sqlite3.Connection:
    """Another connection holding ``path``'s write lock (``BEGIN IMMEDIATE`` or ``EXCLUSIVE``)."""
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute(f"BEGIN {how}")
    return other


@pytest.fixture(params=["fresh", "wal-without-tables"])
def db_file(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A database file nobody opened yet, or one already in WAL mode but without our tables."""
    path = tmp_path / "txn.db"
    if request.param == "wal-without-tables":
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.close()
    yield path


@pytest.mark.parametrize("how", ["IMMEDIATE", "EXCLUSIVE"])
def test_open_under_a_held_lock_waits_busy_timeout_then_raises_store_error(
    db_file: Path, how: str
) -> None:
    other = _lock(db_file, how)
    try:
        t0 = time.monotonic()
        with pytest.raises(StoreError, match="locked") as info:
            SqliteTxnStore(db_file, busy_timeout_s=0.4)
        waited = time.monotonic() - t0
    finally:
        other.close()
    # it waited (an open that did not would fail in ~1 ms); SQLite's busy handler counts its
    # planned sleeps, which under load ended at 0.31 s of a 0.4 s timeout once (session 51)
    assert 0.2 <= waited < 5, waited
    assert "busy_timeout_s" in str(info.value)
    assert info.value.retryable


@pytest.mark.parametrize("how", ["IMMEDIATE", "EXCLUSIVE"])
def test_open_succeeds_once_the_lock_is_released_within_busy_timeout(
    db_file: Path, how: str
) -> None:
    other = _lock(db_file, how)
    release = threading.Timer(0.3, other.rollback)
    release.start()
    try:
        store = SqliteTxnStore(db_file, busy_timeout_s=10)
    finally:
        release.join()
        other.close()
    try:
        assert store.insert_intent("ns", "dest", "src", 1)
        assert store.get_intent("ns", "dest") is not None
        mode = sqlite3.connect(db_file).execute("PRAGMA journal_mode").fetchone()[0]
        assert mode == "wal"
    finally:
        store.close()
