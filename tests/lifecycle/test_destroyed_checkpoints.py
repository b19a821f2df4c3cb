"""No checkpoint of a soft-destroyed database can be refreshed (issue 37, item 8b).

SlateDB RFC 0004 (seed 003), "Deleting a Database" and "Garbage Collector": a soft destroy only
marks the manifest; the GC deletes the database once ``db_delete_grace`` has passed *and every
checkpoint has expired or been deleted*. Its checkpoint procedures refuse a destroyed database
("If destroyed_at_s is set, exit with error"), and a reader's upkeep re-runs the establishing
procedure, which refuses one too. Extending an expiry on a destroyed database would let any
client keep it (and every object it pins) alive for ever, so every path that moves an expiry
(the admin API, the ``refresh-checkpoint`` CLI command, a table snapshot's refresh, a MANAGED
reader's upkeep) refuses with :class:`DatabaseDestroyed` through one check. Deleting a
checkpoint stays allowed: that is how the GC gets unblocked.
"""

from __future__ import annotations

import dataclasses
import time
import types
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

import slatedb_core.reader.refresh as refresh_mod
from slatedb_core.checkpoints import (
    create_checkpoint,
    delete_checkpoint,
    extend_pins_change,
    refresh_change,
    refresh_checkpoint,
)
from slatedb_core.cli.main import cli
from slatedb_core.errors import DatabaseDestroyed
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.manifest.model import Checkpoint, Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CheckpointOptions, DbOptions, DbReaderOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db

DB = "db"
HOUR = timedelta(hours=1)


def _written(store: ObjectStore) -> None:
    with Db.open(DB, store, DbOptions(flush_interval=timedelta(milliseconds=5))) as db:
        db.put(b"k", b"v")


def _expiry(store: ObjectStore, cid: uuid.UUID) -> int | None:
    cp = ManifestStore(store, DB).read_latest().manifest.checkpoint(cid)
    assert cp is not None
    return cp.expire_time_s


def test_refresh_checkpoint_on_a_soft_destroyed_database_is_refused(store: ObjectStore) -> None:
    _written(store)
    cp = create_checkpoint(DB, store, CheckpointOptions(lifetime=HOUR))
    before = _expiry(store, cp.id)
    destroy(DB, store, soft=True)
    for lifetime in (timedelta(days=7), None):  # None would make it never expire
        with pytest.raises(DatabaseDestroyed):
            refresh_checkpoint(DB, store, cp.id, lifetime)
    assert _expiry(store, cp.id) == before
    delete_checkpoint(DB, store, cp.id)  # deleting stays allowed: it unblocks the GC
    assert ManifestStore(store, DB).read_latest().manifest.checkpoint(cp.id) is None


def test_refresh_checkpoint_cli_on_a_soft_destroyed_database_exits_1(tmp_path: Path) -> None:
    url = (tmp_path / "lake").as_uri()
    store = open_store(url)
    _written(store)
    cp = create_checkpoint(DB, store, CheckpointOptions(lifetime=HOUR))
    before = _expiry(store, cp.id)
    destroy(DB, store, soft=True)
    r = CliRunner().invoke(
        cli, ["--url", url, "--path", DB, "refresh-checkpoint", "-i", str(cp.id), "-l", "7days"]
    )
    assert r.exit_code == 1, r.output
    assert "DatabaseDestroyed" in r.stderr
    assert _expiry(store, cp.id) == before


def test_a_managed_reader_does_not_extend_its_checkpoint_on_a_destroyed_database(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _written(store)
    options = DbReaderOptions(manifest_poll_interval=HOUR, checkpoint_lifetime=3 * HOUR)
    with DbReader.open(DB, store, options=options) as reader:
        cid = reader.checkpoint_id
        assert cid is not None
        before = _expiry(store, cid)
        destroy(DB, store, soft=True)
        # two hours later less than half the lifetime is left: the reader would extend it
        later = time.time() + 2 * HOUR.total_seconds()
        monkeypatch.setattr(refresh_mod, "time", types.SimpleNamespace(time=lambda: later))
        with pytest.raises(DatabaseDestroyed):
            reader.refresh()
        assert _expiry(store, cid) == before
        assert reader.get(b"k") == b"v"  # it still serves the last state it had


def _cp(expire: int | None) -> Checkpoint:
    return Checkpoint(uuid.uuid4(), 1, 0, expire_time_s=expire)


def test_the_refresh_edits_refuse_a_destroyed_manifest() -> None:
    ours, retired = _cp(100), _cp(100)
    live = dataclasses.replace(Manifest(), checkpoints=(ours, retired))
    dead = dataclasses.replace(live, destroyed_at_s=1)
    with pytest.raises(DatabaseDestroyed):
        refresh_change(ours.id, 50, HOUR)(dead)
    with pytest.raises(DatabaseDestroyed):
        extend_pins_change(ours.id, set(), {ours.id}, 200)(dead, 2)
    # a reader dropping a retired pin, extending nothing, is a deletion: still allowed
    out = extend_pins_change(ours.id, {retired.id}, set(), 200)(dead, 2)
    assert [c.id for c in out.checkpoints] == [ours.id]
