"""A fenced writer says so: ``close()`` of a writer fenced by a newer one raises ``Fenced`` whether it
learned of the fencing from a commit, from its poller or not at all, and never drops buffered
writes silently; a clean close is idempotent."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest

from slatedb_core.errors import Fenced
from slatedb_core.options import CheckpointScope, DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db

# the background WAL flusher never runs on its own: every WAL SST is a durable put's
QUIET = timedelta(hours=1)


@pytest.fixture
def store(tmp_path: Path) -> ObjectStore:
    """The local filesystem, where the review reproduced these."""
    return open_store(f"file://{tmp_path}/lake")


def opts(window: int = 1, **kw: object) -> DbOptions:
    return DbOptions(flush_interval=QUIET, max_parallel_writes=window, **kw)  # type: ignore[arg-type]


# ---- item 8: close() of a fenced writer -----------------------------------------------------
def quiet_writer(store: ObjectStore, poll: timedelta = QUIET) -> Db:
    """A writer whose background threads do nothing by themselves."""
    return Db.open("db", store, DbOptions(flush_interval=QUIET, manifest_poll_interval=poll))


def test_close_of_a_fenced_writer_that_had_not_learned_it_raises_fenced_every_time(
    store: ObjectStore,
) -> None:
    """Found by the review of RELIABILITY.md, findings 7, 8, 15 (was test_review_wal_writer.py)."""
    old = quiet_writer(store)
    old.put(b"k", b"buffered", await_durable=False)
    Db.open("db", store, opts()).close()  # fences old
    with pytest.raises(Fenced) as first:
        old.close()  # its flush finds the fence: the buffered write is not durable
    with pytest.raises(Fenced) as second:
        old.close()  # the outcome of closing does not change
    assert second.value is first.value
    with Db.open("db", store, opts()) as db:
        assert db.get(b"k") is None


def test_close_of_a_fenced_writer_that_learned_it_from_a_commit_raises_fenced(
    store: ObjectStore,
) -> None:
    """The review's case: the writer learned of the fencing (here from a checkpoint commit)
    with a write still buffered; the old close() returned normally and dropped it.

    Found by the review of RELIABILITY.md, findings 7, 8, 15 (was test_review_wal_writer.py)."""
    old = quiet_writer(store)
    old.put(b"k", b"buffered", await_durable=False)
    Db.open("db", store, opts()).close()
    with pytest.raises(Fenced) as learned:
        old.create_checkpoint(CheckpointScope.DURABLE)
    with pytest.raises(Fenced) as closing:
        old.close()
    assert closing.value is learned.value
    with pytest.raises(Fenced):
        old.close()
    with Db.open("db", store, opts()) as db:
        assert db.get(b"k") is None


def test_close_of_a_writer_whose_poller_learned_the_fencing_raises_fenced(
    store: ObjectStore,
) -> None:
    """Found by the review of RELIABILITY.md, findings 7, 8, 15 (was test_review_wal_writer.py)."""
    old = quiet_writer(store, poll=timedelta(milliseconds=20))
    Db.open("db", store, opts()).close()
    deadline = time.monotonic() + 10
    while True:  # until the manifest poller has seen the newer epoch
        try:
            old.flush()
        except Fenced:
            break
        assert time.monotonic() < deadline, "the poller never learned of the fencing"
        time.sleep(0.02)
    with pytest.raises(Fenced):
        old.close()


def test_a_with_block_ending_in_fenced_raises_that_fenced(store: ObjectStore) -> None:
    """Found by the review of RELIABILITY.md, findings 7, 8, 15 (was test_review_wal_writer.py)."""
    with pytest.raises(Fenced) as ei:
        with quiet_writer(store) as old:
            Db.open("db", store, opts()).close()
            try:
                old.put(b"k", b"v")
            except Fenced as e:
                raised = e
                raise
    assert ei.value is raised
    with pytest.raises(Fenced):
        old.close()


def test_a_clean_close_is_idempotent(store: ObjectStore) -> None:
    """Found by the review of RELIABILITY.md, findings 7, 8, 15 (was test_review_wal_writer.py)."""
    db = quiet_writer(store)
    db.put(b"k", b"v", await_durable=False)
    db.close()
    db.close()
    with Db.open("db", store, opts()) as again:
        assert again.get(b"k") == b"v"
