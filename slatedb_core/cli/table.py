"""``slatedb table ...``: sharded tables. ``--path`` is the table's root.

* ``create [--split KEY]...``: a table with one shard more than split points;
* ``show`` (alias ``shards``): the latest shard map: each shard's range, database and state,
  pending splits/merges and retired databases;
* ``get KEY`` / ``scan [--from KEY] [--to KEY] [--max-keys N]``: read through the shard map, never
  writing (FOLLOW_LATEST readers: a one-command process must not leave checkpoints behind);
* ``split INDEX --at KEY``, ``merge INDEX [--expect-map ID]``, ``resume``: rescale.

Keys are given and shown as in ``slatedb get/scan`` (``--format utf8|hex``). Exit codes: 0
success; 1 a SlateDB error (e.g. ``ShardMapConflict``) or ``get`` of a missing key; 2 bad usage.
"""

from __future__ import annotations

import dataclasses
import itertools
from datetime import timedelta
from typing import Any

import click
from rich.table import Table as RichTable

from slatedb_core.cli.output import DurationType, NotFound, handle_errors
from slatedb_core.cli.read import parse_key, show
from slatedb_core.cli.terminal import console as terminal_console
from slatedb_core.cli.terminal import echo, echo_json, echo_row
from slatedb_core.keys import KeyRange
from slatedb_core.options import DbOptions, DbReaderOptions, MiB, ReaderMode
from slatedb_core.table import ShardMap, Table, TableOptions


def table_options(obj: Any) -> TableOptions:
    """The table's options for one command: read-only readers (no polling), and the shards'
    WAL store (``--wal-url``, SlateDB RFC 0009) and merge operator (``--merge-operator``,
    RFC 0006) for the readers and for the fencing writers split/merge open."""
    return TableOptions(
        writer=DbOptions(wal_url=obj.wal_url, merge_operator=obj.merge_operator),
        reader=DbReaderOptions(
            mode=ReaderMode.FOLLOW_LATEST,
            manifest_poll_interval=timedelta(hours=1),  # one command: no polling
            checkpoint_lifetime=None,
            block_cache_bytes=16 * MiB,
            wal_url=obj.wal_url,
            merge_operator=obj.merge_operator,
        ),
    )


format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice(("utf8", "hex")),
    default="utf8",
    show_default=True,
    help="How keys are given and keys and values shown.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def key_bound(k: bytes | None, fmt: str) -> str | None:
    return None if k is None else show(k, fmt)


def map_to_dict(m: ShardMap, fmt: str = "utf8") -> dict[str, Any]:
    return {
        "id": m.id,
        "created_at": m.created_at,
        "shards": [
            {
                "index": s.index,
                "shard_id": s.shard_id,
                "start": key_bound(s.key_range.start, fmt),
                "end": key_bound(s.key_range.end, fmt),
                "db_path": s.db_path,
                "sealed": s.sealed,
            }
            for s in m.shards
        ],
        "pending": [
            {
                "op_id": str(op.op_id),
                "kind": op.kind,
                "sources": list(op.sources),
                "targets": [
                    {"shard_id": i, "start": key_bound(r.start, fmt), "end": key_bound(r.end, fmt)}
                    for i, r in op.targets
                ],
                "started_at": op.started_at,
            }
            for op in m.pending
        ],
        "retired": list(m.retired),
    }


def _print_map(path: str, m: ShardMap, fmt: str, as_json: bool) -> None:
    d = map_to_dict(m, fmt)
    if as_json:
        echo_json(d)
        return
    console = terminal_console()
    t = RichTable(title=f"table {path}: shard map {m.id}, {len(m.shards)} shard(s)")
    for col in ("index", "from", "to", "database", "state"):
        t.add_column(col)
    for s in d["shards"]:
        t.add_row(
            str(s["index"]),
            s["start"] or "-inf",
            s["end"] or "+inf",
            s["db_path"],
            "sealed" if s["sealed"] else "live",
        )
    console.print(t)
    for op in d["pending"]:
        into = ", ".join(
            f"{x['shard_id']}:[{x['start'] or '-inf'}, {x['end'] or '+inf'})" for x in op["targets"]
        )
        console.print(f"pending {op['kind']} {op['op_id']}: shards {op['sources']} -> {into}")
    if d["retired"]:
        console.print("retired: " + ", ".join(d["retired"]))


@click.group("table")
def table_group() -> None:
    """Sharded tables at --path: a shard map of key ranges, one database per range."""


@table_group.command("create")
@click.option("--split", "splits", multiple=True, metavar="KEY", help="A split point (repeatable).")
@format_option
@json_option
@click.pass_obj
@handle_errors
def create_cmd(obj: Any, splits: tuple[str, ...], fmt: str, as_json: bool) -> None:
    """Create a table with one shard per range between the split points (given in order)."""
    points = [parse_key(s, fmt, "--split") for s in splits]
    with Table.create(obj.path, obj.store, points, table_options(obj)) as t:
        _print_map(obj.path, t.shard_map, fmt, as_json)


@table_group.command("show")
@format_option
@json_option
@click.pass_obj
@handle_errors
def show_cmd(obj: Any, fmt: str, as_json: bool) -> None:
    """Print the latest shard map."""
    with Table.open(obj.path, obj.store, table_options(obj)) as t:
        _print_map(obj.path, t.shard_map, fmt, as_json)


table_group.add_command(show_cmd, "shards")


@table_group.command("get")
@click.argument("key")
@format_option
@json_option
@click.pass_obj
@handle_errors
def get_cmd(obj: Any, key: str, fmt: str, as_json: bool) -> None:
    """Print the value of KEY (exit 1 if it is not there)."""
    k = parse_key(key, fmt, "KEY")
    with Table.open(obj.path, obj.store, table_options(obj)) as t:
        value = t.get(k)
    if as_json:
        echo_json(
            None if value is None else {"key": show(k, fmt), "value": show(value, fmt)}, indent=None
        )
    elif value is not None:
        echo(show(value, fmt))
    if value is None:
        raise NotFound(show(k, fmt))


@table_group.command("scan")
@click.option("--from", "start", default=None, help="First key (inclusive).")
@click.option("--to", "end", default=None, help="End key (exclusive).")
@click.option("--max-keys", type=click.IntRange(min=1), default=None, help="Stop after N keys.")
@format_option
@json_option
@click.pass_obj
@handle_errors
def scan_cmd(
    obj: Any, start: str | None, end: str | None, max_keys: int | None, fmt: str, as_json: bool
) -> None:
    """Print keys and values across all shards in key order."""
    lo = None if start is None else parse_key(start, fmt, "--from")
    hi = None if end is None else parse_key(end, fmt, "--to")
    if lo is not None and hi is not None and hi < lo:
        raise click.BadParameter("--to is before --from", param_hint="--to")
    with Table.open(obj.path, obj.store, table_options(obj)) as t:
        rows = t.scan(lo, hi)
        limited = rows if max_keys is None else itertools.islice(rows, max_keys)
        out = [(show(k, fmt), show(v, fmt)) for k, v in limited]
    if as_json:
        echo_json([{"key": k, "value": v} for k, v in out])
    else:
        for k, v in out:
            echo_row(k, v)


@table_group.command("split")
@click.argument("index", type=click.IntRange(min=0))
@click.option("--at", "at", required=True, metavar="KEY", help="First key of the upper half.")
@format_option
@json_option
@click.pass_obj
@handle_errors
def split_cmd(obj: Any, index: int, at: str, fmt: str, as_json: bool) -> None:
    """Split shard INDEX at --at into two shards (re-running a finished split is a no-op)."""
    key = parse_key(at, fmt, "--at")
    with Table.open(obj.path, obj.store, table_options(obj)) as t:
        shard = t.shards[index] if index < len(t.shards) else None
        if (
            shard is not None
            and not shard.key_range.contains(key)
            and key
            not in (
                shard.key_range.start,
                shard.key_range.end,
            )
        ):
            raise click.BadParameter(
                f"{at!r} is outside shard {index} {_show_range(shard.key_range, fmt)}",
                param_hint="--at",
            )
        m = t.split(index, key)
        _print_map(obj.path, m, fmt, as_json)


def _show_range(r: KeyRange, fmt: str) -> str:
    return f"[{key_bound(r.start, fmt) or '-inf'}, {key_bound(r.end, fmt) or '+inf'})"


@table_group.command("merge")
@click.argument("index", type=click.IntRange(min=0))
@click.option(
    "--expect-map",
    "expected",
    type=click.IntRange(min=1),
    default=None,
    metavar="ID",
    help="Only if the latest shard map is still this version (makes a retry safe).",
)
@format_option
@json_option
@click.pass_obj
@handle_errors
def merge_cmd(obj: Any, index: int, expected: int | None, fmt: str, as_json: bool) -> None:
    """Merge shard INDEX with shard INDEX+1 into one shard."""
    with Table.open(obj.path, obj.store, table_options(obj)) as t:
        m = t.merge(index, expected_map_id=expected)
        _print_map(obj.path, m, fmt, as_json)


@table_group.command("resume")
@format_option
@json_option
@click.pass_obj
@handle_errors
def resume_cmd(obj: Any, fmt: str, as_json: bool) -> None:
    """Finish splits/merges a crashed run left pending; soft-destroy retired shards."""
    with Table.open(obj.path, obj.store, table_options(obj)) as t:
        _print_map(obj.path, t.resume(), fmt, as_json)


@table_group.command("gc")
@click.option(
    "--min-age",
    type=DurationType(allow_zero=True),
    default="1h",
    show_default=True,
    help="Delete shard-map versions (never the latest) older than this.",
)
@click.option(
    "--ingest-min-age",
    type=DurationType(allow_zero=True),
    default="7d",
    show_default=True,
    help="Delete ingest leftovers (_ingest/: staged SSTs, done markers, plan records) older "
    "than this. Any age is safe (no job applies twice); one shorter than a running ingest job "
    "makes that job fail.",
)
@json_option
@click.pass_obj
@handle_errors
def gc_cmd(obj: Any, min_age: timedelta, ingest_min_age: timedelta, as_json: bool) -> None:
    """Delete the table's own garbage: old shard-map versions, old versions of named snapshots'
    records, ingest leftovers, the targets of cancelled or abandoned overwrites and staged files
    crashed writes left in the table's own folders. (The shards
    are databases: collect them with ``slatedb --path <shard> gc``.)"""
    with Table.open(obj.path, obj.store, table_options(obj)) as t:
        stats = t.collect_garbage(min_age, ingest_min_age)
    if as_json:
        echo_json(dataclasses.asdict(stats), indent=None)
        return
    echo(
        f"{obj.path}: deleted {stats.shard_maps} shard-map version(s), {stats.ingest_objects} "
        f"ingest leftover(s) ({stats.ingest_bytes:,} bytes), {stats.snapshot_records} snapshot "
        f"record version(s); swept {stats.snapshot_checkpoints} checkpoint(s) of dead snapshot takers"
        f"; destroyed {stats.overwrite_targets} target database(s) of cancelled overwrites"
        + (
            f"; removed {stats.staged_files} staged file(s) of crashed writes "
            f"({stats.staged_bytes:,} bytes)"
            if stats.staged_files
            else ""
        )
    )


def register(cli: click.Group) -> None:
    """Attach the ``table`` group to ``cli``; safe to call more than once."""
    if cli.commands.get("table") is not table_group:
        cli.add_command(table_group)
