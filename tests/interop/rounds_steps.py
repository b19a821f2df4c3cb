"""Steps of the interop tests: rounds of writes through SlateDB 0.17 (``slate_rounds``,
``slate_tail``) and through ours (``our_rounds``, ``arrow``) over the same key ranges, mirrored in
a ``Model``, and the writer and reader options those tests share."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa

from slatedb_core.options import DbOptions, DbReaderOptions
from slatedb_core.writer.batch import WriteBatch
from slatedb_core.writer.db import Db
from tests.interop.expect import Model, rows
from tests.interop.oracle import SlateWriter

FAST = DbOptions(
    flush_interval=timedelta(milliseconds=10), manifest_poll_interval=timedelta(milliseconds=100)
)


READER = DbReaderOptions(manifest_poll_interval=timedelta(milliseconds=100))


def slate_rounds(w: SlateWriter, model: Model, rounds: int, *, first: int = 0) -> None:
    """Each round: 1200 puts over a range overlapping the previous round's (overwrites), 40
    deletes spread over it, then a memtable flush (one L0 SST of > 1000 keys, so SlateDB writes
    its bloom filter)."""
    for r in range(first, first + rounds):
        w.write(model.apply(rows(r, 1200, start=r * 300)))
        w.write(model.apply((k, None) for k, _ in rows(r, 40, step=29, start=r * 300 + 5)))
        w.flush_memtable()


def slate_tail(w: SlateWriter, model: Model) -> None:
    """Durable writes that stay in SlateDB's WAL (no memtable flush after them): puts, an
    overwrite of a flushed key, deletes of flushed keys, a delete of a never-written key."""
    for key, value in [(b"k/00002", b"tail-overwrite"), (b"t/new", b"tail"), (b"t/empty", b"")]:
        w.put(key, value)
        model.put(key, value)
    for key in (b"k/00003", b"k/00600", b"t/never"):
        w.delete(key)
        model.delete(key)


def arrow(ops: list[tuple[bytes, bytes | None]]) -> pa.Table:
    """key/value columns; a null value deletes its key (put_arrow, bulk_ingest)."""
    return pa.table(
        {
            "key": pa.array([k for k, _ in ops], pa.binary()),
            "value": pa.array([v for _, v in ops], pa.binary()),
        }
    )


def our_rounds(db: Db, model: Model, rounds: int, *, first: int = 0) -> None:
    """Each round: puts over a range overlapping the last round's, in a WriteBatch, deletes,
    single puts, then a memtable flush (an L0 SST)."""
    for r in range(first, first + rounds):
        batch = WriteBatch()
        for key, value in model.apply(rows(r, 1200, start=r * 300)):
            assert value is not None
            batch.put(key, value)
        db.write(batch)
        for key, _ in rows(r, 40, step=29, start=r * 300 + 5):
            db.delete(key)
            model.delete(key)
        db.put(b"single/%d" % r, b"s")
        model.put(b"single/%d" % r, b"s")
        db.flush_memtable()
