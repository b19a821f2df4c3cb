"""``slatedb table count``, ``slatedb table stats`` and ``slatedb count``: how big a table or a
database is, without printing it (issue 40, item 4).

* ``table count [--from KEY] [--to KEY] [--snapshot NAME] [--workers N]``: the live keys of the
  table (what ``table scan`` would print), counted from Arrow batches with the shards read in
  parallel (``Table.count_by_shard``): tombstones, TTLs and merge operands count exactly as a
  read sees them. ``--snapshot`` counts a named table snapshot's checkpoints instead of the
  latest state.
* ``table stats``: per shard and in total, from the manifests and SST metadata only (no scan,
  :mod:`slatedb_core.fleet.table_stats`): SSTs, bytes, L0 SSTs, sorted runs, approximate rows (SST
  entries: every version and tombstone until compaction drops it), manifest id, writer epoch.
* ``count [--from KEY] [--to KEY] [--prefix P] [--checkpoint UUID]``: the live keys of the
  database at ``--path``, the same way.

Every command reads only (FOLLOW_LATEST or checkpoint readers: nothing is left behind). Human
output is a table and a total line; ``--json`` prints one document. Exit codes as for every
command (1: a SlateDB error, e.g. a snapshot name that finds nothing).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import click
from rich.table import Table as RichTable

from slatedb_core.cli.output import NotFound, handle_errors
from slatedb_core.cli.read import key_range, open_reader, show
from slatedb_core.cli.table import format_option, json_option, key_bound, table_group, table_options
from slatedb_core.cli.terminal import console as terminal_console
from slatedb_core.cli.terminal import echo, echo_json
from slatedb_core.fleet.table_stats import table_stats
from slatedb_core.table import Table
from slatedb_core.table.named_snapshots import read_named
from slatedb_core.table.reads import COUNT_BATCH_ROWS

_workers_option = click.option(
    "--workers",
    type=click.IntRange(min=1, max=64),
    default=4,
    show_default=True,
    help="Shards read at a time.",
)


def _open_table(obj: Any, snapshot: str | None) -> Table:
    if snapshot is None:
        return Table.open(obj.path, obj.store, table_options(obj))
    snap = read_named(obj.store, obj.path, snapshot)
    if snap is None:
        raise NotFound(f"snapshot {snapshot!r} of table {obj.path!r}")
    return Table.open(obj.path, obj.store, table_options(obj), snapshot=snap)


@table_group.command("count")
@click.option("--from", "start", default=None, help="First key (inclusive).")
@click.option("--to", "end", default=None, help="End key (exclusive).")
@click.option(
    "--snapshot", default=None, metavar="NAME", help="Count this named snapshot, not the latest."
)
@_workers_option
@format_option
@json_option
@click.pass_obj
@handle_errors
def count_cmd(
    obj: Any,
    start: str | None,
    end: str | None,
    snapshot: str | None,
    workers: int,
    fmt: str,
    as_json: bool,
) -> None:
    """Count the table's live keys (what `table scan` prints), per shard and in total."""
    lo, hi = key_range(None, start, end, fmt)
    began = time.monotonic()
    with _open_table(obj, snapshot) as t:
        counts = t.count_by_shard(lo, hi, workers=workers)
        map_id = t.shard_map.id
    seconds = round(time.monotonic() - began, 3)
    total = sum(n for _, n in counts)
    shards: list[dict[str, Any]] = [
        {
            "index": s.index,
            "shard_id": s.shard_id,
            "db_path": s.db_path,
            "start": key_bound(s.key_range.start, fmt),
            "end": key_bound(s.key_range.end, fmt),
            "keys": n,
        }
        for s, n in counts
    ]
    if as_json:
        echo_json(
            {
                "table": obj.path,
                "shard_map_id": map_id,
                "snapshot": snapshot,
                "keys": total,
                "shards": shards,
                "seconds": seconds,
            }
        )
        return
    t2 = RichTable(title=f"table {obj.path}: shard map {map_id}" + _at(snapshot))
    for col in ("index", "from", "to", "database", "keys"):
        t2.add_column(col, justify="right" if col == "keys" else "left")
    for d in shards:
        t2.add_row(
            str(d["index"]),
            d["start"] or "-inf",
            d["end"] or "+inf",
            d["db_path"],
            f"{d['keys']:,}",
        )
    terminal_console().print(t2)
    echo(f"{total:,} keys in {len(shards)} shard(s) ({seconds:.2f} s)")


def _at(snapshot: str | None) -> str:
    return "" if snapshot is None else f", snapshot {snapshot}"


@table_group.command("stats")
@_workers_option
@json_option
@click.pass_obj
@handle_errors
def stats_cmd(obj: Any, workers: int, as_json: bool) -> None:
    """Per shard and in total: SSTs, bytes, L0, sorted runs, approximate rows (from SST
    metadata: every version and tombstone counts; no scan), manifest id, writer epoch."""
    with Table.open(obj.path, obj.store, table_options(obj)) as t:
        m = t.shard_map
    rows: list[dict[str, Any]] = [
        {
            "index": st.shard.index,
            "shard_id": st.shard.shard_id,
            "db_path": st.shard.db_path,
            "manifest_id": st.health.manifest_id,
            "writer_epoch": st.health.writer_epoch,
            "ssts": st.health.ssts,
            "bytes": st.health.data_bytes,
            "sst_bytes": st.health.sst_bytes,
            "l0_ssts": st.health.l0_ssts,
            "sorted_runs": st.health.sorted_runs,
            "approximate_rows": st.approximate_rows,
            "wal_backlog": st.health.wal_backlog,
            "unreadable_ssts": st.unreadable_ssts,
        }
        for st in table_stats(obj.store, m.shards, workers)
    ]
    summed = ("ssts", "bytes", "l0_ssts", "sorted_runs", "approximate_rows", "wal_backlog")
    total = {k: sum(r[k] for r in rows) for k in summed}
    if as_json:
        echo_json({"table": obj.path, "shard_map_id": m.id, "shards": rows, "total": total})
        return
    cols = ("index", "db_path", "manifest_id", "writer_epoch", *summed)
    t2 = RichTable(title=f"table {obj.path}: shard map {m.id}, {len(rows)} shard(s)")
    for c in cols:
        t2.add_column(c.replace("_", " "), justify="left" if c == "db_path" else "right")
    for r in rows:
        t2.add_row(*(_cell(r[c]) for c in cols))
    t2.add_row("total", "", "", "", *(_cell(total[c]) for c in summed))
    terminal_console().print(t2)
    unreadable = sum(r["unreadable_ssts"] for r in rows)
    if unreadable:
        echo(f"warning: {unreadable} SST(s) could not be read; their rows are not counted")


def _cell(v: Any) -> str:
    return f"{v:,}" if isinstance(v, int) else str(v)


@click.command("count")
@click.option("--prefix", default=None, help="Only keys starting with this.")
@click.option("--from", "start", default=None, help="First key (inclusive).")
@click.option("--to", "end", default=None, help="End key (exclusive).")
@click.option(
    "--checkpoint", type=click.UUID, default=None, help="Count this checkpoint, not the latest."
)
@format_option
@json_option
@click.pass_obj
@handle_errors
def db_count_cmd(
    obj: Any,
    prefix: str | None,
    start: str | None,
    end: str | None,
    checkpoint: uuid.UUID | None,
    fmt: str,
    as_json: bool,
) -> None:
    """Count the database's live keys (what `scan` prints), from Arrow batches."""
    lo, hi = key_range(prefix, start, end, fmt)
    began = time.monotonic()
    with open_reader(obj, checkpoint) as r:
        total = sum(b.num_rows for b in r.scan_arrow(lo, hi, COUNT_BATCH_ROWS))
        manifest_id = r.manifest_id
    seconds = round(time.monotonic() - began, 3)
    if as_json:
        echo_json(
            {
                "path": obj.path,
                "manifest_id": manifest_id,
                "checkpoint": None if checkpoint is None else str(checkpoint),
                "keys": total,
                "from": None if lo is None else show(lo, fmt),
                "to": None if hi is None else show(hi, fmt),
                "seconds": seconds,
            }
        )
        return
    echo(f"{total:,} keys ({seconds:.2f} s)")


def register(cli: click.Group) -> None:
    """Attach ``count`` to ``cli`` (the ``table`` commands join the table group on import);
    safe to call more than once."""
    if cli.commands.get("count") is not db_count_cmd:
        cli.add_command(db_count_cmd)
