"""A standalone MANAGED ``DbReader`` on a soft-destroyed database never extends its checkpoint
(follow-up of issue 37 item 8b, commit bf570f4; SlateDB RFC 0004 via seed 003: a destroyed
database's checkpoints are not refreshed, and its GC waits for every checkpoint to expire).

The worry: the first poll after the destroy sees a new manifest and reports DatabaseDestroyed;
later polls see the same manifest (``_read_latest_if_changed`` returns None) and go on to the
reader's upkeep, which extended its checkpoint every half lifetime, pinning the destroyed
database for ever. The upkeep's edit (``extend_pins_change``) refuses a destroyed manifest, and
re-establishing (after the expired checkpoint is removed) refuses it too, so this cannot happen:
here the real poll thread runs for longer than the checkpoint's lifetime after the destroy, and
no checkpoint of the database outlives the expiry it had at the destroy. (Seen failing with the
check of ``extend_pins_change`` taken out.) Meanwhile reads keep serving the reader's last
state (docs/checkpoints-and-readers.md, "A destroyed database")."""

from __future__ import annotations

import random
import threading
import time
import uuid
from datetime import timedelta

import pytest

from slatedb_core.checkpoints import delete_checkpoint
from slatedb_core.errors import DatabaseDestroyed
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions, DbReaderOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db

DB = "db"
LIFETIME = timedelta(seconds=1)
OPTIONS = DbReaderOptions(
    manifest_poll_interval=timedelta(milliseconds=50), checkpoint_lifetime=LIFETIME
)


def _expiries(store: ObjectStore) -> dict[uuid.UUID, int | None]:
    m = ManifestStore(store, DB).read_latest().manifest
    return {c.id: c.expire_time_s for c in m.checkpoints}


def _wait_for(cond: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def test_a_managed_reader_never_extends_or_renews_its_checkpoint_after_a_soft_destroy() -> None:
    store = open_store(f"memory://reader-{random.getrandbits(64):x}")
    with Db.open(DB, store, DbOptions(flush_interval=timedelta(milliseconds=5))) as db:
        db.put(b"k", b"v")
    told = threading.Event()
    with DbReader.open(DB, store, options=OPTIONS, on_destroyed=told.set) as reader:
        cid = reader.checkpoint_id
        assert cid is not None
        first = _expiries(store)[cid]
        assert first is not None
        # the upkeep works: it extends the checkpoint before it expires
        assert _wait_for(lambda: (_expiries(store).get(cid) or 0) > first, 3)
        destroy(DB, store, soft=True)
        at_destroy = _expiries(store)
        limit = max(e for e in at_destroy.values() if e is not None)
        assert told.wait(2)  # a poll reported the destroy
        # polls for longer than the lifetime: every half lifetime the upkeep would extend
        end = limit + 0.3
        while time.time() < end:
            now = _expiries(store)
            assert set(now) <= set(at_destroy), "a new checkpoint on a destroyed database"
            assert all(e is not None and e <= limit for e in now.values()), (now, limit)
            time.sleep(0.05)
        assert reader.get(b"k") == b"v"  # it serves its last state meanwhile
        # the GC removes an expired checkpoint: the reader would establish a new one
        for c in list(_expiries(store)):
            delete_checkpoint(DB, store, c)
        time.sleep(10 * OPTIONS.manifest_poll_interval.total_seconds())
        assert _expiries(store) == {}
        assert reader.get(b"k") == b"v"


def test_once_a_destroyed_databases_objects_are_gone_every_read_says_destroyed() -> None:
    """What the reader serves after the destroy lasts until the database's objects go (its
    checkpoint expired or was deleted, then the GC or a hard destroy): a read that finds an SST
    gone then raises DatabaseDestroyed, a scan as well as a get (a scan said SstMissing, which
    names damage, not a destroyed database), and closing the reader raises nothing (it raised
    DatabaseDeleted deleting a checkpoint that went with the database). Both seen failing."""
    store = open_store(f"memory://reader-{random.getrandbits(64):x}")
    with Db.open(DB, store, DbOptions(flush_interval=timedelta(milliseconds=5))) as db:
        db.put(b"k", b"v")
        db.flush_memtable()
    options = DbReaderOptions(
        manifest_poll_interval=timedelta(hours=1), checkpoint_lifetime=None, block_cache_bytes=0
    )
    with DbReader.open(DB, store, options=options) as reader:
        assert reader.get(b"k") == b"v"
        destroy(DB, store, soft=True)
        for c in list(_expiries(store)):
            delete_checkpoint(DB, store, c)
        destroy(DB, store, soft=False)  # what the GC does once no checkpoint is left
        with pytest.raises(DatabaseDestroyed):
            reader.get(b"k")
        with pytest.raises(DatabaseDestroyed):
            list(reader.scan())
