"""``slatedb changes``: print a database's committed changes after a cursor, in commit order
(issue 43; the feed is :mod:`slatedb_core.feed`, docs/changes.md).

It reads what is there when it runs and exits (run it again with the last cursor to poll), or
with ``--follow`` keeps polling (every ``--interval`` seconds) and prints each batch as it comes,
until interrupted (Ctrl-C: exit 0, the lines printed whole), ``--until`` is reached,
``--max-batches`` batches were printed or ``--timeout`` seconds passed. ``--until CURSOR`` (one
``--tail`` printed) stops at that cursor: only the changes it has delivered, the rows Python's
``Table.changes(until=)`` yields and a Spark micro-batch ending there reads
(:func:`~slatedb_core.table.changes.delivered_by`), the last cursor line being ``CURSOR``. Each
batch of changes is followed by the cursor to persist once the lines before it are applied:

* ``--json``: one JSON object per line. A change is ``{"key", "value", "op", "seq",
  "create_ts", "expire_ts", "wal_id", "snapshot"}`` with key and value in ``--encoding``
  (``base64``, the default, or ``hex``; ``value`` is null for a delete); after each batch a
  ``{"cursor": "c1..."}`` line. At least one cursor line is printed, so a script always has one
  to pass back as ``--since``. A failure midway exits 1 with the lines before it complete, so
  a script resuming from the last cursor line it read loses and repeats nothing.
* otherwise: one ``SEQ<TAB>OP<TAB>KEY<TAB>VALUE`` line per change (keys and values as ``scan``
  shows them, ``--format``), the snapshot's rows with op ``snapshot``, and the last cursor on
  stderr (with ``--follow``, after each batch too).

Without ``--consumer`` it writes nothing, except that a feed with no ``--since`` on a database
whose WAL the GC already collected takes a snapshot under a checkpoint of its own, deleted once
the WAL after it is read (or expiring within an hour), and that ``gc/wal.boundary`` is created
at 0 when there is none (as a writer does; docs/changes.md). ``--consumer NAME`` registers a named
consumer whose checkpoint keeps its changes until it resumes past them (``--release`` drops it;
``--consumers`` lists them with how many WAL SSTs each one's checkpoint holds back,
``wal_behind``).

On a sharded table's root (``--path`` holding a shard map, :mod:`slatedb_core.path_kind`) it
prints the table's combined feed (:mod:`slatedb_core.table.changes`, docs/changes.md "Tables"):
the cursors are table cursors (``t1.``), ``--tail`` is every live shard's tail, and each
``--json`` change also names its shard's database (``db``, relative to the table);
``--consumer`` registers in each live shard, ``--release`` and ``--consumers`` take a shard's
path.

Exit codes: 0 success; 1 a SlateDB error (``ChangesCollected``: the changes after the cursor are
gone; start again without ``--since``); 2 bad usage (a cursor that is not one).
"""

from __future__ import annotations

import base64
import dataclasses
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import click
import pyarrow as pa

from slatedb_core.cli.output import Ctx, handle_errors
from slatedb_core.cli.read import FORMATS, show
from slatedb_core.cli.table import table_options
from slatedb_core.cli.terminal import echo, echo_json, echo_row
from slatedb_core.errors import ChangesCollected, CursorInvalid
from slatedb_core.feed import ChangeFeed, ChangesOptions, Cursor
from slatedb_core.feed.rows import empty_changes
from slatedb_core.path_kind import holds_table
from slatedb_core.table import Table
from slatedb_core.table.changes import TableCursor, delivered_rows, snapshot_past

ENCODINGS = ("base64", "hex")


def _encoder(name: str) -> Callable[[bytes], str]:
    if name == "hex":
        return bytes.hex
    return lambda b: base64.b64encode(b).decode("ascii")


def _change_doc(row: dict[str, Any], enc: Callable[[bytes], str]) -> dict[str, Any]:
    value = row["value"]
    return {
        "key": enc(row["key"]),
        "value": None if value is None else enc(value),
        "op": row["op"],
        "seq": row["seq"],
        "create_ts": row["create_ts"],
        "expire_ts": row["expire_ts"],
        "wal_id": row["wal_id"],
        "snapshot": row["snapshot"],
    }


Source = Callable[[Any], Iterator[tuple[pa.RecordBatch, Any, str | None]]]
"""One read of a feed after a cursor: each batch's rows, the cursor after it and the shard's
database (relative to the table; None for a database's feed)."""


def _key(c: Cursor) -> tuple[int, int]:
    return (c.wal_id, c.seq)


def db_changes_until(
    feed: ChangeFeed, since: Cursor | None, until: Cursor
) -> Iterator[tuple[pa.RecordBatch, Cursor]]:
    """The changes after ``since`` that ``until`` has delivered, each batch with its cursor,
    the last one ``until``: the rule of a table's ``until=`` for each shard and of a Spark
    micro-batch's end (:func:`slatedb_core.table.changes.delivered_by`, docs/changes.md
    "Spark"). Ends early, at the feed's cursor, when the WAL holding ``until`` is not there yet
    (``--follow`` polls on); CursorInvalid when ``since`` is past ``until``, or ``until`` is
    another database's."""
    feed.check_own(until)
    if since is not None and since.snapshot is None and _key(since) >= _key(until):
        if _key(since) > _key(until):
            raise CursorInvalid(f"--until {until.encode()} is before --since {since.encode()}")
        return
    last = since or Cursor()
    for b in feed.changes(since, until=until):
        rows, last = b.rows, b.cursor
        if snapshot_past(rows, until):
            raise ChangesCollected(
                feed.path,
                f"the feed starts from a snapshot newer than --until {until.encode()}: "
                "read without --until, or from a --since cursor",
            )
        rows = delivered_rows(rows, until)  # every batch: an ingest's may precede the cut
        if last.snapshot is None and _key(last) >= _key(until):
            yield rows, until
            return
        yield rows, last
    if last.snapshot is None and last.wal_id >= until.wal_id:
        yield empty_changes(), until  # read to the end, and nothing after ``until`` yet


@click.command("changes")
@click.option("--since", default=None, help="Resume after this cursor (from a cursor line).")
@click.option(
    "--until",
    default=None,
    help="Stop at this cursor (one --tail printed): only the changes it has delivered, the "
    "last cursor line being it.",
)
@click.option(
    "--follow",
    is_flag=True,
    help="Keep polling for new changes, printing each batch as it comes, until interrupted, "
    "--until, --max-batches or --timeout.",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.01),
    default=1.0,
    show_default=True,
    help="Seconds between two polls of --follow.",
)
@click.option(
    "--max-batches",
    type=click.IntRange(min=1),
    default=None,
    help="Stop after printing this many batches.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=None,
    help="Stop --follow after this many seconds.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.option(
    "--encoding",
    type=click.Choice(ENCODINGS),
    default="base64",
    show_default=True,
    help="How --json shows keys and values.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="utf8",
    show_default=True,
    help="How the human output shows keys and values.",
)
@click.option("--batch-rows", type=click.IntRange(min=1), default=10_000, show_default=True)
@click.option(
    "--consumer", default=None, help="A named consumer whose checkpoint keeps its changes."
)
@click.option("--release", is_flag=True, help="Delete --consumer's checkpoint and exit.")
@click.option(
    "--consumers",
    "list_consumers",
    is_flag=True,
    help="List the registered consumers and how far behind each one's checkpoint is, and exit.",
)
@click.option(
    "--tail",
    "print_tail",
    is_flag=True,
    help="Print the cursor at the end of the WAL now (to start a consumer from now) and exit.",
)
@click.pass_obj
@handle_errors
def changes_command(
    obj: Ctx,
    since: str | None,
    until: str | None,
    follow: bool,
    interval: float,
    max_batches: int | None,
    timeout: float | None,
    as_json: bool,
    encoding: str,
    fmt: str,
    batch_rows: int,
    consumer: str | None,
    release: bool,
    list_consumers: bool,
    print_tail: bool,
) -> None:
    """Print the changes after --since (all of them without it), in commit order."""
    if release and consumer is None:
        raise click.UsageError("--release needs --consumer")
    if timeout is not None and not follow:
        raise click.UsageError("--timeout needs --follow")
    plan = _Plan(as_json, _encoder(encoding), fmt, follow, interval, max_batches, timeout)
    if holds_table(obj.store, obj.path):
        if release or list_consumers:
            raise click.UsageError(
                "--release and --consumers take a database's path (a shard's), not a table's"
            )
        _table_changes(obj, since, until, batch_rows, consumer, print_tail, plan)
        return
    if list_consumers:
        _print_consumers(obj, as_json)
        return
    cursor = _decode(Cursor.decode, since, "--since")
    end = _decode(Cursor.decode, until, "--until")
    options = ChangesOptions(batch_rows=batch_rows, consumer=consumer)
    feed = ChangeFeed(
        obj.path, obj.store, options, wal_url=obj.wal_url, merge_operator=obj.merge_operator
    )
    if print_tail:
        _print_cursor(feed.tail().encode(), as_json)
        return
    if release:
        feed.release()
        echo(f"released consumer {consumer}", err=True)
        return

    def read(c: Cursor | None) -> Iterator[tuple[pa.RecordBatch, Any, str | None]]:
        batches = (
            ((b.rows, b.cursor) for b in feed.changes(c))
            if end is None
            else db_changes_until(feed, c, end)
        )
        for rows, after in batches:
            yield rows, after, None

    _print_feed(read, cursor, cursor or Cursor(), end, plan)


def _decode(decode: Callable[[str], Any], text: str | None, hint: str) -> Any:
    try:
        return None if text is None else decode(text)
    except CursorInvalid as e:
        raise click.BadParameter(str(e), param_hint=hint) from None


def _print_cursor(cursor: str, as_json: bool) -> None:
    if as_json:
        echo_json({"cursor": cursor}, indent=None)
    else:
        echo(cursor)


@dataclass(frozen=True)
class _Plan:
    """How the changes are printed and how long ``--follow`` goes on."""

    as_json: bool
    enc: Callable[[bytes], str]
    fmt: str
    follow: bool
    interval: float
    max_batches: int | None
    timeout: float | None


def _print_feed(read: Source, since: Any, start: Any, until: Any, plan: _Plan) -> None:
    """Print the batches of ``read(since)``: once, or with ``--follow`` polling again from the
    last cursor every ``interval`` until ``until`` is reached, ``max_batches`` were printed,
    ``timeout`` passed or the user interrupts (Ctrl-C: the lines printed are complete and the
    last cursor line is where to resume). ``start``: the cursor shown when nothing was read."""
    deadline = None if plan.timeout is None else time.monotonic() + plan.timeout
    last, shown, printed = since, None, 0
    try:
        with _ctrl_c() as stop:
            while not stop.is_set():
                for rows, cursor, db in read(last):
                    encoded = cursor.encode()
                    if plan.follow and not rows.num_rows:
                        # a poll with no rows (nothing new, or only a writer's empty WAL SST,
                        # e.g. its fencing one on open) prints nothing and counts for no
                        # --max-batches: the next batch's cursor line covers it
                        last = cursor
                    else:
                        _print_rows(rows, db, plan)
                        last, shown, printed = cursor, encoded, printed + 1
                        if plan.as_json:
                            echo_json({"cursor": encoded}, indent=None)
                        elif plan.follow:
                            echo(f"cursor: {encoded}", err=True)
                        if plan.max_batches is not None and printed >= plan.max_batches:
                            return _done(last, start, shown, plan)
                    if stop.is_set():
                        break
                if not plan.follow or (until is not None and last is not None and _at(last, until)):
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    break
                left = None if deadline is None else deadline - time.monotonic()
                stop.wait(plan.interval if left is None else max(0.0, min(plan.interval, left)))
    except KeyboardInterrupt:
        pass  # a second Ctrl-C, or one off the main thread: the lines printed are whole
    return _done(last, start, shown, plan)


@contextmanager
def _ctrl_c() -> Iterator[threading.Event]:
    """An event a Ctrl-C sets, so the feed stops at the next batch boundary: never inside a
    batch's lines or its cursor line, and never inside a read (pyarrow and the store's calls are
    not interrupted). A second Ctrl-C raises KeyboardInterrupt at once. Off the main thread
    (no signal handler there), Ctrl-C raises as Python's default does."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def on_sigint(signum: int, frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    before = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, before)


def _at(last: Any, until: Any) -> bool:
    return bool(last.encode() == until.encode())


def _done(last: Any, start: Any, shown: str | None, plan: _Plan) -> None:
    final = (last if last is not None else start).encode()
    if plan.as_json:
        if shown is None:  # a script always gets a cursor line to pass back as --since
            echo_json({"cursor": final}, indent=None)
    else:
        echo(f"cursor: {final}", err=True)


def _print_rows(rows: pa.RecordBatch, db: str | None, plan: _Plan) -> None:
    for row in rows.to_pylist():
        if plan.as_json:
            doc = _change_doc(row, plan.enc)
            echo_json(doc if db is None else {**doc, "db": db}, indent=None)
        else:
            op = "snapshot" if row["snapshot"] else row["op"]
            value = "" if row["value"] is None else show(row["value"], plan.fmt)
            echo_row(str(row["seq"]), op, show(row["key"], plan.fmt), value)


def _table_changes(
    obj: Ctx,
    since: str | None,
    until: str | None,
    batch_rows: int,
    consumer: str | None,
    print_tail: bool,
    plan: _Plan,
) -> None:
    """``slatedb changes`` on a sharded table's root: its combined feed
    (:mod:`slatedb_core.table.changes`), cursors being table cursors (``t1.``), each change
    line naming its shard's database (``db``, relative to the table). ``--until`` is
    ``Table.changes(until=)``: one read of the rows up to it (its last cursor is ``until``'s
    equivalent), so ``--follow`` stops there."""
    cursor = _decode(TableCursor.decode, since, "--since")
    end = _decode(TableCursor.decode, until, "--until")
    options = ChangesOptions(batch_rows=batch_rows, consumer=consumer)
    with Table.open(obj.path, obj.store, table_options(obj)) as table:
        if print_tail:
            _print_cursor(table.changes_tail().encode(), plan.as_json)
            return
        prefix = obj.path.rstrip("/") + "/"
        m = table.maps.read_latest()
        # nothing read from each shard's start: the start
        start = cursor or TableCursor(
            m.id, tuple((s.db_path[len(prefix) :], None) for s in m.shards)
        )

        def read(c: TableCursor | None) -> Iterator[tuple[pa.RecordBatch, Any, str | None]]:
            for batch in table.changes(c, options, until=end):
                p = batch.db_path
                yield batch.rows, batch.cursor, p[len(prefix) :] if p.startswith(prefix) else ""

        if end is not None:
            plan = dataclasses.replace(plan, follow=False)
        _print_feed(read, cursor, start, end, plan)


def _print_consumers(obj: Ctx, as_json: bool) -> None:
    feed = ChangeFeed(obj.path, obj.store, wal_url=obj.wal_url)
    holds = feed.consumers()
    docs = [
        {
            "consumer": h.name,
            "checkpoint": str(h.checkpoint.id),
            "manifest_id": h.checkpoint.manifest_id,
            "expire_time_s": h.checkpoint.expire_time_s,
            "expired": h.expired,
            "pinned_replay_after_wal_id": h.pinned_replay_after,
            "latest_replay_after_wal_id": h.latest_replay_after,
            "wal_behind": h.wal_behind,
        }
        for h in holds
    ]
    if as_json:
        echo_json(docs)
        return
    if not docs:
        echo("no registered consumers", err=True)
    for d in docs:
        behind = "?" if d["wal_behind"] is None else str(d["wal_behind"])
        state = "expired" if d["expired"] else "live"
        echo_row(str(d["consumer"]), state, f"wal_behind={behind}", str(d["checkpoint"]))


def register(cli: click.Group) -> None:
    """Add ``changes`` to the ``slatedb`` group (idempotent)."""
    cli.add_command(changes_command)


__all__ = ["register"]
