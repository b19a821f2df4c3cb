"""``destroy (--soft | --hard) [--yes] [--json]`` (SlateDB RFC 0004, "Deleting a Database").

Attached with :func:`register` like the checkpoint commands. Destroying cannot be undone, so the
command asks for confirmation on a terminal and, when nobody can answer (no terminal on stdin),
refuses with a usage error (exit 2) unless ``--yes`` is given. Choosing neither or both of
``--soft`` / ``--hard`` is a usage error as well. Store errors (``InvalidDeletion`` while a
checkpoint is active, a missing database) exit 1 through ``handle_errors``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from slatedb_core.cli.output import emit_json, handle_errors
from slatedb_core.cli.terminal import echo
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.manifest.store import ManifestStore

F = TypeVar("F", bound=Callable[..., Any])


@click.command("destroy")
@click.option(
    "--soft",
    is_flag=True,
    help="Fence any writer and mark the database destroyed; a garbage collector deletes it once "
    "db_delete_grace has passed and no checkpoint is active.",
)
@click.option(
    "--hard",
    is_flag=True,
    help="Delete every object of the database now. Refused while a checkpoint other than the "
    "writer's is active. Make sure no writer is running.",
)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
@handle_errors
def destroy_cmd(obj: Any, soft: bool, hard: bool, yes: bool, as_json: bool) -> None:
    """Destroy the database (cannot be undone)."""
    if soft == hard:
        raise click.UsageError("choose exactly one of --soft and --hard")
    mode = "soft" if soft else "hard"
    if not yes:
        if not sys.stdin.isatty():
            raise click.UsageError(f"refusing to {mode}-destroy {obj.path!r} without --yes")
        click.confirm(f"{mode}-destroy the database {obj.path!r}?", abort=True)
    destroy(obj.path, obj.store, soft=soft, wal_url=obj.wal_url)
    out: dict[str, Any] = {"path": obj.path, "mode": mode}
    if soft:
        out["destroyed_at_s"] = (
            ManifestStore(obj.store, obj.path).read_latest().manifest.destroyed_at_s
        )
    else:
        out["deleted"] = True
    if as_json:
        emit_json(out)
        return
    if soft:
        echo(
            f"{obj.path}: destroyed (soft) at {out['destroyed_at_s']}; the garbage collector "
            "deletes it after db_delete_grace once no checkpoint is active"
        )
    else:
        echo(f"{obj.path}: destroyed (hard); all its objects are deleted")


COMMANDS: tuple[click.Command, ...] = (destroy_cmd,)


def register(cli: click.Group) -> None:
    """Attach ``destroy`` to ``cli``; safe to call more than once."""
    for cmd in COMMANDS:
        if cli.commands.get(cmd.name or "") is not cmd:
            cli.add_command(cmd)
