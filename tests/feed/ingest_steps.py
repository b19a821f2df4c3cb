"""An ingest held in flight, as the change-feed tests stage it around a ``tail()`` or a read:
its seqs reserved above every write before it, its SST write paused, nothing committed
(issue 43; the race review43 and review84 found their cases in)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import pyarrow as pa

from slatedb_core.testing import FaultyStore
from slatedb_core.writer.db import Db


@contextmanager
def ingest_held(
    db: Db, faulty: FaultyStore, pattern: str, rows: Mapping[bytes, bytes]
) -> Iterator[None]:
    """``db.bulk_ingest(rows)`` in flight for the body: ``db`` is opened on ``faulty``, and the
    ingest is held at its SST write (``pattern``: where it goes, e.g. ``db/compacted/*``), so
    writes in the body land in the WAL above its reserved seqs. On exit it is released and
    joined; an error it raised is raised here."""
    held = faulty.pause("ingest", "put_if_absent", pattern)
    errors: list[BaseException] = []

    def ingest() -> None:
        try:
            db.bulk_ingest(pa.table({"key": list(rows), "value": list(rows.values())}))
        except BaseException as e:  # raised on exit
            errors.append(e)

    t = threading.Thread(target=ingest)
    t.start()
    try:
        assert held.wait_reached()
        yield
    finally:
        held.release()
        t.join()
    if errors:
        raise errors[0]
