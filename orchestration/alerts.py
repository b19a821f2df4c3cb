"""Errors an operator must not scroll past: a fenced maintenance job (another process took over
the database) and corruption (a manifest, SST or boundary that does not decode, a boundary that
went backwards or vanished). Assets re-raise them as ``dg.Failure`` with the error class in the
metadata; the run-failure sensor tags the run so the runs list shows them at a glance."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg
from dagster_shared.error import SerializableErrorInfo

from slatedb_core.errors import BoundaryMissing, CorruptionError, Fenced

ALERT_ERRORS: tuple[type[Exception], ...] = (Fenced, CorruptionError, BoundaryMissing)
ALERT_NAMES = frozenset(e.__name__ for e in ALERT_ERRORS)
ALERT_TAG = "slatedb/alert"
"""Run tag set by the run-failure sensor: the error class (Fenced, CorruptionError, ...)."""
DATABASE_TAG = "slatedb/database"


@contextmanager
def surface_alerts(database: str) -> Iterator[None]:
    """Turn an alert-worthy slatedb error into a ``dg.Failure`` naming it and the database."""
    try:
        yield
    except ALERT_ERRORS as e:
        kind = type(e).__name__
        raise dg.Failure(
            description=f"SLATEDB ALERT {kind} on database {database!r}: {e}",
            metadata={"slatedb_error": kind, "database": database, "message": str(e)},
        ) from e


def alert_in(error: SerializableErrorInfo | None) -> str | None:
    """The first alert-worthy error class in an error chain (its cause and context), or None."""
    seen = 0
    while error is not None and seen < 20:
        if error.cls_name in ALERT_NAMES:
            return error.cls_name
        if error.cls_name == "Failure" and "SLATEDB ALERT " in error.message:
            return error.message.split("SLATEDB ALERT ", 1)[1].split(" ", 1)[0]
        error = error.cause or error.context
        seen += 1
    return None
