"""``slatedb read-manifest`` and ``slatedb list-manifests``: the manifest versions of a database."""

from __future__ import annotations

import click
from rich.table import Table

from slatedb_core import admin
from slatedb_core.cli.output import Ctx, emit_json, handle_errors
from slatedb_core.cli.terminal import console as terminal_console
from slatedb_core.manifest.render import manifest_to_dict


@click.command("read-manifest")
@click.option(
    "--id",
    "manifest_id",
    type=click.IntRange(min=1),
    default=None,
    help="Manifest id to read (default: the latest).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
@handle_errors
def read_manifest(obj: Ctx, manifest_id: int | None, as_json: bool) -> None:
    """Print one manifest (the latest by default)."""
    stored = admin.read_manifest(obj.store, obj.path, manifest_id)
    d = manifest_to_dict(stored.id, stored.manifest)
    if as_json:
        emit_json(d)
        return
    console = terminal_console(piped_width=None)
    t = Table(title=f"{obj.path} manifest {stored.id}", show_header=False)
    for key in (
        "id",
        "initialized",
        "destroyed_at_s",
        "writer_epoch",
        "compactor_epoch",
        "replay_after_wal_id",
        "wal_id_last_seen",
        "next_wal_sst_id",
        "last_l0_seq",
        "max_parallel_writes",
    ):
        t.add_row(key, str(d[key]))
    t.add_row("ssts", str(len(d["ssts"])))
    t.add_row("l0 views", str(len(d["l0"])))
    t.add_row(
        "sorted runs", ", ".join(f"{r['id']}({len(r['views'])})" for r in d["compacted"]) or "-"
    )
    t.add_row("external dbs", ", ".join(e["path"] for e in d["external_dbs"]) or "-")
    console.print(t)
    if d["checkpoints"]:
        ct = Table(title="checkpoints")
        for col in ("id", "manifest_id", "create_time_s", "expire_time_s", "writer_epoch", "name"):
            ct.add_column(col)
        for c in d["checkpoints"]:
            ct.add_row(
                *(
                    str(c[k]) if c[k] is not None else "-"
                    for k in (
                        "id",
                        "manifest_id",
                        "create_time_s",
                        "expire_time_s",
                        "writer_epoch",
                        "name",
                    )
                )
            )
        console.print(ct)


@click.command("list-manifests")
@click.option("--start", type=click.IntRange(min=0), default=None, help="First id (inclusive).")
@click.option("--end", type=click.IntRange(min=0), default=None, help="Last id (exclusive).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
@handle_errors
def list_manifests(obj: Ctx, start: int | None, end: int | None, as_json: bool) -> None:
    """List manifest versions, oldest first."""
    if start is not None and end is not None and end < start:
        raise click.BadParameter(f"--end {end} is before --start {start}")
    rows = admin.list_manifests(obj.store, obj.path, start, end)
    if as_json:
        emit_json(
            [
                {
                    "id": r.id,
                    "path": r.path,
                    "size": r.size,
                    "last_modified": r.last_modified.isoformat(),
                }
                for r in rows
            ]
        )
        return
    t = Table(title=f"{obj.path}: {len(rows)} manifest(s)")
    for col in ("id", "size", "last modified", "path"):
        t.add_column(col)
    for r in rows:
        t.add_row(str(r.id), str(r.size), r.last_modified.isoformat(timespec="seconds"), r.path)
    terminal_console(piped_width=None).print(t)


def register(group: click.Group) -> None:
    group.add_command(read_manifest)
    group.add_command(list_manifests)
