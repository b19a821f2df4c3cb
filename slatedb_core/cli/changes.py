"""``slatedb changes``: print a database's committed changes after a cursor, in commit order
(issue 43; the feed is :mod:`slatedb_core.feed`, docs/changes.md).

It reads what is there when it runs and exits (run it again with the last cursor to poll). Each
batch of changes is followed by the cursor to persist once the lines before it are applied:

* ``--json``: one JSON object per line. A change is ``{"key", "value", "op", "seq",
  "create_ts", "expire_ts", "wal_id", "snapshot"}`` with key and value in ``--encoding``
  (``base64``, the default, or ``hex``; ``value`` is null for a delete); after each batch a
  ``{"cursor": "c1..."}`` line. At least one cursor line is printed, so a script always has one
  to pass back as ``--since``. A failure midway exits 1 with the lines before it complete, so
  a script resuming from the last cursor line it read loses and repeats nothing.
* otherwise: one ``SEQ<TAB>OP<TAB>KEY<TAB>VALUE`` line per change (keys and values as ``scan``
  shows them, ``--format``), the snapshot's rows with op ``snapshot``, and the last cursor on
  stderr.

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
from collections.abc import Callable
from typing import Any

import click

from slatedb_core.cli.output import Ctx, handle_errors
from slatedb_core.cli.read import FORMATS, show
from slatedb_core.cli.table import table_options
from slatedb_core.cli.terminal import echo, echo_json, echo_row
from slatedb_core.errors import CursorInvalid
from slatedb_core.feed import ChangeFeed, ChangesOptions, Cursor
from slatedb_core.path_kind import holds_table
from slatedb_core.table import Table
from slatedb_core.table.changes import TableCursor

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


@click.command("changes")
@click.option("--since", default=None, help="Resume after this cursor (from a cursor line).")
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
    if holds_table(obj.store, obj.path):
        if release or list_consumers:
            raise click.UsageError(
                "--release and --consumers take a database's path (a shard's), not a table's"
            )
        _table_changes(obj, since, as_json, encoding, fmt, batch_rows, consumer, print_tail)
        return
    if list_consumers:
        _print_consumers(obj, as_json)
        return
    try:
        cursor = None if since is None else Cursor.decode(since)
    except CursorInvalid as e:
        raise click.BadParameter(str(e), param_hint="--since") from None
    options = ChangesOptions(batch_rows=batch_rows, consumer=consumer)
    feed = ChangeFeed(
        obj.path, obj.store, options, wal_url=obj.wal_url, merge_operator=obj.merge_operator
    )
    if print_tail:
        tail = feed.tail().encode()
        if as_json:
            echo_json({"cursor": tail}, indent=None)
        else:
            echo(tail)
        return
    if release:
        feed.release()
        echo(f"released consumer {consumer}", err=True)
        return
    enc = _encoder(encoding)
    last = cursor or Cursor()
    printed = False
    for batch in feed.changes(cursor):
        for row in batch.rows.to_pylist():
            if as_json:
                echo_json(_change_doc(row, enc), indent=None)
            else:
                op = "snapshot" if row["snapshot"] else row["op"]
                value = "" if row["value"] is None else show(row["value"], fmt)
                echo_row(str(row["seq"]), op, show(row["key"], fmt), value)
        last = batch.cursor
        if as_json:
            echo_json({"cursor": last.encode()}, indent=None)
            printed = True
    if as_json and not printed:
        echo_json({"cursor": last.encode()}, indent=None)
    if not as_json:
        echo(f"cursor: {last.encode()}", err=True)


def _table_changes(
    obj: Ctx,
    since: str | None,
    as_json: bool,
    encoding: str,
    fmt: str,
    batch_rows: int,
    consumer: str | None,
    print_tail: bool,
) -> None:
    """``slatedb changes`` on a sharded table's root: its combined feed
    (:mod:`slatedb_core.table.changes`), cursors being table cursors (``t1.``), each change
    line naming its shard's database (``db``, relative to the table)."""
    try:
        cursor = None if since is None else TableCursor.decode(since)
    except CursorInvalid as e:
        raise click.BadParameter(str(e), param_hint="--since") from None
    options = ChangesOptions(batch_rows=batch_rows, consumer=consumer)
    with Table.open(obj.path, obj.store, table_options(obj)) as table:
        if print_tail:
            tail = table.changes_tail().encode()
            if as_json:
                echo_json({"cursor": tail}, indent=None)
            else:
                echo(tail)
            return
        enc = _encoder(encoding)
        last = cursor
        printed = False
        prefix = obj.path.rstrip("/") + "/"
        for batch in table.changes(cursor, options):
            db = batch.db_path[len(prefix) :] if batch.db_path.startswith(prefix) else ""
            for row in batch.rows.to_pylist():
                if as_json:
                    echo_json({**_change_doc(row, enc), "db": db}, indent=None)
                else:
                    op = "snapshot" if row["snapshot"] else row["op"]
                    value = "" if row["value"] is None else show(row["value"], fmt)
                    echo_row(str(row["seq"]), op, show(row["key"], fmt), value)
            last = batch.cursor
            if as_json:
                echo_json({"cursor": last.encode()}, indent=None)
                printed = True
        if last is None:  # nothing read from each shard's start: the start
            m = table.maps.read_latest()
            last = TableCursor(m.id, tuple((s.db_path[len(prefix) :], None) for s in m.shards))
    if as_json and not printed:
        echo_json({"cursor": last.encode()}, indent=None)
    if not as_json:
        echo(f"cursor: {last.encode()}", err=True)


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
