"""What every ``slatedb`` subcommand shares: the group's context (URL, database path, the store
opened once), error handling with its exit codes, JSON output and the duration parameter.

Subcommand modules import this one and never ``cli.main``, which imports them to register their
commands (``register(cli)``).

Exit codes: 0 success; 1 a SlateDB error (``error: <Type>: <message>`` on stderr) or a key that is
not there (``not found: KEY``); 2 bad usage (click's own).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import timedelta
from functools import wraps
from typing import Any, TypeVar

import click

from slatedb_core.cli.terminal import echo, echo_json
from slatedb_core.durations import MAX_DURATION, parse_duration
from slatedb_core.errors import (
    DatabaseNotFound,
    InvalidArgument,
    MergeOperatorMissing,
    NotADatabase,
    NotATable,
    SlateDBError,
)
from slatedb_core.lsm.merge_operator import BUILTIN_MERGE_OPERATORS
from slatedb_core.path_kind import refuse_database, refuse_table
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store

F = TypeVar("F", bound=Callable[..., Any])


class Ctx:
    """What the ``slatedb`` group puts in ``ctx.obj``: the store is opened on first use."""

    def __init__(
        self,
        url: str,
        path: str,
        wal_url: str | None = None,
        merge_operator: str | None = None,
    ) -> None:
        self.url = url
        self.path = path
        self.wal_url = wal_url
        """``--wal-url``: the database's separate WAL store (SlateDB RFC 0009); never shown."""
        self.merge_operator = merge_operator
        """``--merge-operator``: a built-in merge operator's name (SlateDB RFC 0006), or None."""
        self._store: ObjectStore | None = None

    @property
    def store(self) -> ObjectStore:
        if self._store is None:
            self._store = open_store(self.url)
        return self._store


class NotFound(Exception):
    """A key asked for is not there: ``not found: KEY`` on stderr, exit 1."""


def handle_errors(fn: F) -> F:
    """Turn a :class:`SlateDBError` or :class:`NotFound` into a one-line message and exit 1."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except NotFound as e:
            echo(f"not found: {e}", err=True)
            sys.exit(1)
        except SlateDBError as e:
            e = _named_kind(e)
            echo(f"error: {type(e).__name__}: {e}{_hint(e)}", err=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def _named_kind(e: SlateDBError) -> SlateDBError:
    """A bare "no manifest" or "no shard map" under ``--path``, from whichever command, said as
    what the path is instead (:mod:`slatedb_core.path_kind`): a table given to a database
    command, or a database given to ``slatedb table``. One extra LIST, on this failure only."""
    if type(e) is not DatabaseNotFound:
        return e
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_object(Ctx) if ctx is not None else None
    if obj is None:
        return e
    try:
        refuse_table(obj.store, obj.path)
        refuse_database(obj.store, obj.path)
    except (NotADatabase, NotATable) as kind:
        return kind
    except SlateDBError:
        pass  # the look did not work: the original error stands
    return e


def _hint(e: SlateDBError) -> str:
    """How to fix ``e`` from the command line, when the error's own text names the API only."""
    if isinstance(e, MergeOperatorMissing):
        names = ", ".join(sorted(BUILTIN_MERGE_OPERATORS))
        return f" (CLI: --merge-operator NAME or SLATEDB_MERGE_OPERATOR; built-ins: {names})"
    return ""


def emit_json(obj: Any) -> None:
    """``--json`` output (see :func:`slatedb_core.cli.terminal.echo_json`)."""
    echo_json(obj)


class DurationType(click.ParamType[timedelta]):
    """A ``--lifetime`` value; a bad one (or one over a year, ``MAX_DURATION``) is a usage error,
    reported before touching the store."""

    name = "LIFETIME"

    def __init__(self, *, allow_zero: bool = False) -> None:
        self.allow_zero = allow_zero
        if allow_zero:
            self.name = "DURATION"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> timedelta:
        if isinstance(value, timedelta):
            return value
        try:
            return parse_duration(str(value), allow_zero=self.allow_zero, maximum=MAX_DURATION)
        except InvalidArgument as e:
            self.fail(str(e), param, ctx)


DURATION = DurationType()
