"""A put with ``await_durable=False`` acknowledged while ``close()`` runs.

From review55 (session 55), looking at ``Db.close`` after 8ec0e51 added its note "every write
this writer acknowledged is durable". ``WriterEngine.close`` flushes the WAL buffer, then
``WalFlusher.shut_down`` marks the writer closed; a put in between passes ``check_usable``, is
acknowledged into the buffer and is never flushed, and ``close()`` returns as if every buffered
write were durable ("none is dropped silently", its docstring). The test puts in that window
deterministically, from inside the close's WAL flush. Fixed: the close refuses writes
(``WalFlusher.refuse_writes``) before its last flush, so the put is either refused
(``DbClosed``) or in that flush."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from slatedb_core.errors import DbClosed
from slatedb_core.options import DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db

QUIET = DbOptions(manifest_poll_interval=timedelta(hours=1), flush_interval=timedelta(hours=1))


def test_a_buffered_put_acknowledged_during_close_is_durable_or_close_raises(
    tmp_path: Path,
) -> None:
    store = open_store(f"file://{tmp_path}/lake")
    db = Db.open("db", store, QUIET)
    db.put(b"before", b"v")
    flusher = db._engine._flusher
    flush = flusher.flush_wal
    acked: list[bytes] = []

    def flush_then_put() -> None:
        flush()
        try:  # another thread's put, at the instant after close()'s WAL flush
            db.put(b"during", b"close", await_durable=False)
            acked.append(b"during")
        except DbClosed:
            pass

    flusher.flush_wal = flush_then_put  # type: ignore[method-assign]
    close_error: BaseException | None = None
    try:
        db.close()
    except Exception as e:
        close_error = e
    with Db.open("db", store, QUIET) as again:
        durable = again.get(b"during") == b"close"
        assert again.get(b"before") == b"v"
    assert not acked or durable or close_error is not None, (
        "an acknowledged buffered write was lost and close() succeeded"
    )
