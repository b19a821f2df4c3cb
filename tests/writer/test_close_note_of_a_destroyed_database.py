"""What ``close()`` says when dropping the writer checkpoint fails because the database was
destroyed under the writer.

From review55 (session 55), attacking 8ec0e51's note on that error: "Every write this writer
acknowledged is durable ... GC keeps the SSTs the checkpoint pins until the next writer to open
the database replaces it". After a destroy (here a soft destroy whose objects GC then deleted)
the writes are gone with the database and no writer can open it again, so the note told the
caller the opposite of what happened. ``DatabaseDestroyed`` (and ``DatabaseDeleted``) now raise
without it."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest

from slatedb_core.errors import DatabaseDestroyed
from slatedb_core.gc import run_gc_once
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.options import DbOptions, GarbageCollectorOptions
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db

QUIET = DbOptions(manifest_poll_interval=timedelta(hours=1), flush_interval=timedelta(hours=1))
NO_AGE = GarbageCollectorOptions(min_age=timedelta(0))


def a_month_later() -> float:
    return time.time() + 30 * 86400


@pytest.mark.parametrize("soft", [True, False])
def test_closing_a_writer_of_a_deleted_database_does_not_say_its_writes_are_durable(
    tmp_path: Path, soft: bool
) -> None:
    store = open_store(f"file://{tmp_path}/lake")
    db = Db.open("db", store, QUIET)
    db.put(b"acked", b"v")
    db.flush_memtable()
    destroy("db", store, soft=soft)
    if soft:  # past the grace period: GC deletes the database's objects
        for _ in range(3):
            run_gc_once("db", store, NO_AGE, now=a_month_later)
    assert [m.path for m in store.list("db/") if "/gc/" not in m.path] == []

    with pytest.raises(DatabaseDestroyed) as closed:
        db.close()

    notes = " ".join(getattr(closed.value, "__notes__", []))
    assert "durable" not in notes, notes
