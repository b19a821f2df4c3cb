"""``create-checkpoint``, ``refresh-checkpoint``, ``delete-checkpoint``, ``list-checkpoints``.

Malformed ids and lifetimes are rejected by click (exit 2) before any request is made; errors from
the store (missing checkpoint, destroyed database) go through ``handle_errors`` (exit 1).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import click
from rich.table import Table

from slatedb_core import checkpoints as api
from slatedb_core.cli.output import DURATION, emit_json, handle_errors
from slatedb_core.cli.terminal import console, echo
from slatedb_core.durations import format_duration
from slatedb_core.manifest.model import Checkpoint
from slatedb_core.options import CheckpointOptions

F = TypeVar("F", bound=Callable[..., Any])

_LIFETIME_HELP = (
    'a human-friendly duration summed from its parts, e.g. "7days 30min 10s", "1h" or "2d" '
    "(units: y, w, d, h, min, s, ms). The expiry becomes the current wall-clock time plus this "
    "lifetime (at most 1y). Without it the checkpoint never expires and has to be deleted "
    "explicitly."
)
_ID_HELP = "UUID of the checkpoint, e.g. 01740ee5-6459-44af-9a45-85deb6e468e3."
_NAME_NOTE = "Names need not be unique: several checkpoints may share one."


def _iso(ts: int | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat()


def _when(ts: int | None) -> str:
    return "-" if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def checkpoint_to_dict(cp: Checkpoint, now_s: float) -> dict[str, Any]:
    """The JSON shape of one checkpoint: raw seconds for machines plus ISO times and an
    ``expired`` flag, so scripts need not redo the clock arithmetic."""
    return {
        "id": str(cp.id),
        "manifest_id": cp.manifest_id,
        "name": cp.name,
        "create_time_s": cp.create_time_s,
        "create_time": _iso(cp.create_time_s),
        "expire_time_s": cp.expire_time_s,
        "expire_time": _iso(cp.expire_time_s),
        "expired": cp.is_expired(now_s),
        "writer_epoch": cp.writer_epoch,
    }


def _expiry_text(cp: Checkpoint, now_s: float) -> str:
    if cp.expire_time_s is None:
        return "never"
    when = _when(cp.expire_time_s)
    left = cp.expire_time_s - int(now_s)
    if cp.is_expired(now_s):
        return f"{when} (expired)"
    return f"{when} (in {format_duration(timedelta(seconds=left))})" if left > 0 else when


def _show_one(title: str, cp: Checkpoint, now_s: float) -> None:
    t = Table(title=title, show_header=False)
    t.add_row("id", str(cp.id))
    t.add_row("manifest_id", str(cp.manifest_id))
    t.add_row("name", cp.name if cp.name is not None else "-")
    t.add_row("created", _when(cp.create_time_s))
    t.add_row("expires", _expiry_text(cp, now_s))
    console().print(t)


@click.command("create-checkpoint")
@click.option(
    "-l",
    "--lifetime",
    type=DURATION,
    default=None,
    help="Lifetime of the new checkpoint: " + _LIFETIME_HELP,
)
@click.option(
    "-s",
    "--source",
    type=click.UUID,
    default=None,
    metavar="UUID",
    help="An existing, unexpired checkpoint to copy: the new one pins the same manifest. "
    "Without it the checkpoint pins the latest manifest.",
)
@click.option(
    "-n",
    "--name",
    default=None,
    metavar="NAME",
    help="A name to find the checkpoint by with list-checkpoints. " + _NAME_NOTE,
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
@handle_errors
def create_checkpoint_cmd(
    obj: Any, lifetime: timedelta | None, source: uuid.UUID | None, name: str | None, as_json: bool
) -> None:
    """Create a checkpoint of the database's current state (or of another checkpoint)."""
    now_s = time.time()
    options = CheckpointOptions(lifetime=lifetime, source=source, name=name)
    cp = api.add_checkpoint(obj.path, obj.store, options, now=lambda: now_s, wal_url=obj.wal_url)
    if as_json:
        emit_json(checkpoint_to_dict(cp, now_s))
        return
    _show_one(f"{obj.path}: created checkpoint", cp, now_s)


@click.command("refresh-checkpoint")
@click.option("-i", "--id", "checkpoint_id", type=click.UUID, required=True, help=_ID_HELP)
@click.option(
    "-l",
    "--lifetime",
    type=DURATION,
    default=None,
    help="New lifetime, counted from now: " + _LIFETIME_HELP,
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
@handle_errors
def refresh_checkpoint_cmd(
    obj: Any, checkpoint_id: uuid.UUID, lifetime: timedelta | None, as_json: bool
) -> None:
    """Set an existing checkpoint's expiry to now plus a lifetime (or to never)."""
    now_s = time.time()
    cp = api.refresh_checkpoint(obj.path, obj.store, checkpoint_id, lifetime, now=lambda: now_s)
    if as_json:
        emit_json(checkpoint_to_dict(cp, now_s))
        return
    _show_one(f"{obj.path}: refreshed checkpoint", cp, now_s)


@click.command("delete-checkpoint")
@click.option("-i", "--id", "checkpoint_id", type=click.UUID, required=True, help=_ID_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
@handle_errors
def delete_checkpoint_cmd(obj: Any, checkpoint_id: uuid.UUID, as_json: bool) -> None:
    """Delete a checkpoint, letting the GC collect what only it kept."""
    api.delete_checkpoint(obj.path, obj.store, checkpoint_id)
    if as_json:
        emit_json({"deleted": str(checkpoint_id)})
        return
    echo(f"deleted checkpoint {checkpoint_id}")


@click.command("list-checkpoints")
@click.option(
    "-n",
    "--name",
    default=None,
    metavar="NAME",
    help="Show only checkpoints with exactly this name (default: all). " + _NAME_NOTE,
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
@handle_errors
def list_checkpoints_cmd(obj: Any, name: str | None, as_json: bool) -> None:
    """List the database's checkpoints, expired ones marked."""
    now_s = time.time()
    cps = api.list_checkpoints(obj.path, obj.store, name)
    if as_json:
        emit_json([checkpoint_to_dict(c, now_s) for c in cps])
        return
    t = Table(title=f"{obj.path}: {len(cps)} checkpoint(s)")
    for col in ("id", "manifest_id", "name", "created", "expires", "writer_epoch"):
        t.add_column(col)
    for c in cps:
        t.add_row(
            str(c.id),
            str(c.manifest_id),
            c.name if c.name is not None else "-",
            _when(c.create_time_s),
            _expiry_text(c, now_s),
            str(c.writer_epoch) if c.writer_epoch is not None else "-",
        )
    console().print(t)


COMMANDS: tuple[click.Command, ...] = (
    create_checkpoint_cmd,
    refresh_checkpoint_cmd,
    delete_checkpoint_cmd,
    list_checkpoints_cmd,
)


def register(cli: click.Group) -> None:
    """Attach the checkpoint commands to ``cli``. Safe to call more than once (the same command
    objects are re-added under the same names)."""
    for cmd in COMMANDS:
        if cli.commands.get(cmd.name or "") is not cmd:
            cli.add_command(cmd)
