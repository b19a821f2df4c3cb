"""``slatedb``: operator commands. Human-readable output by default, ``--json`` for machines.

Exit codes: 0 success, 1 a SlateDB error (message on stderr, naming the error type), 2 bad usage.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from slatedb_core import admin
from slatedb_core.errors import SlateDBError
from slatedb_core.manifest.render import manifest_to_dict
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store

F = TypeVar("F", bound=Callable[..., Any])


class Ctx:
    def __init__(self, url: str, path: str) -> None:
        self.url = url
        self.path = path
        self._store: ObjectStore | None = None

    @property
    def store(self) -> ObjectStore:
        if self._store is None:
            self._store = open_store(self.url)
        return self._store


def handle_errors(fn: F) -> F:
    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SlateDBError as e:
            click.echo(f"error: {type(e).__name__}: {e}", err=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def _emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=False))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--url",
    envvar="SLATEDB_URL",
    required=True,
    help="Object store URL: memory://, file:///abs/dir, a path, or s3://bucket/prefix "
    "(env SLATEDB_URL).",
)
@click.option(
    "--path",
    "db_path",
    envvar="SLATEDB_PATH",
    required=True,
    help="Database path inside the store, e.g. 'orders' (env SLATEDB_PATH).",
)
@click.pass_context
def cli(ctx: click.Context, url: str, db_path: str) -> None:
    """Inspect and repair SlateDB databases on object storage."""
    ctx.obj = Ctx(url, db_path)


@cli.command("read-manifest")
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
        _emit_json(d)
        return
    console = Console()
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


@cli.command("list-manifests")
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
        _emit_json(
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
    Console().print(t)


from slatedb_core.cli.checkpoints import register as _register_checkpoints  # noqa: E402
from slatedb_core.cli.clones import register as _register_clones  # noqa: E402
from slatedb_core.cli.destroy import register as _register_destroy  # noqa: E402
from slatedb_core.cli.maintenance import register as _register_maintenance  # noqa: E402
from slatedb_core.cli.read import register as _register_read  # noqa: E402
from slatedb_core.cli.table import register as _register_table  # noqa: E402

_register_checkpoints(cli)
_register_read(cli)
_register_destroy(cli)
_register_clones(cli)
_register_table(cli)
_register_maintenance(cli)


def main() -> None:
    cli(prog_name="slatedb")


if __name__ == "__main__":
    main()
