"""``DbReader.open(on_destroyed=...)`` (e03e54c, the hook a live table handle uses) checked and
contained: adversarial review of issue 37 hole 2's reader side. A hook that is not callable
was accepted and failed only in the poll thread; a hook that raised ended the poll thread (it
was called from an ``except`` clause whose sibling handlers do not catch it), so the reader
stopped its upkeep for good: on a destroyed database it no longer deleted its retired
checkpoints, which keep the GC off the database until they expire (never, without a
lifetime)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest

from slatedb_core.errors import InvalidArgument
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.options import DbOptions, DbReaderOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db

POLL = DbReaderOptions(manifest_poll_interval=timedelta(milliseconds=20), checkpoint_lifetime=None)


@pytest.fixture
def store() -> ObjectStore:
    s = open_store("memory://")
    with Db.open("db", s, DbOptions(flush_interval=timedelta(milliseconds=5))) as db:
        db.put(b"a", b"1")
    return s


@pytest.mark.parametrize("hook", [123, "f", object()])
def test_a_hook_that_is_not_callable_is_refused_at_open(store: ObjectStore, hook: object) -> None:
    with pytest.raises(InvalidArgument, match="on_destroyed"):
        DbReader.open("db", store, None, POLL, on_destroyed=hook)  # type: ignore[arg-type]


def _poll_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "slatedb-reader-db"]


def test_a_hook_that_raises_does_not_end_the_poll_thread(store: ObjectStore) -> None:
    called = threading.Event()

    def hook() -> None:
        called.set()
        raise RuntimeError("the hook failed")

    others = set(_poll_threads())
    with DbReader.open("db", store, None, POLL, on_destroyed=hook) as r:
        assert r.get(b"a") == b"1"
        destroy("db", store, soft=True)
        assert called.wait(5)
        time.sleep(0.2)  # several polls after the hook raised
        assert set(_poll_threads()) - others, "the reader's poll thread died with its hook's error"
        assert r.get(b"a") == b"1"
