"""``compact`` and ``gc``: one maintenance pass run by hand (what the Dagster assets schedule).

Both are safe to run while a writer is open: ``compact`` takes over the compactor epoch only when
there is work (fencing a running compactor, whose next commit then fails), and a GC pass deletes
only what the rules of SlateDB RFCs 0004 and 0026 allow. Attached with :func:`register` like the
other command groups.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import click

from slatedb_core.cli.output import DurationType, emit_json, handle_errors
from slatedb_core.cli.terminal import echo
from slatedb_core.compactor import run_compaction_once
from slatedb_core.errors import DatabaseNotFound
from slatedb_core.gc import run_gc_once
from slatedb_core.gc.stats import KINDS
from slatedb_core.options import CompactorOptions, GarbageCollectorOptions

F = TypeVar("F", bound=Callable[..., Any])


@click.command("compact")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
@handle_errors
def compact_cmd(obj: Any, as_json: bool) -> None:
    """Compact until the scheduler has nothing left (takes over the compactor epoch if there is
    work; an idle database is left untouched)."""
    options = CompactorOptions(merge_operator=obj.merge_operator)  # RFC 0006: fold operands
    stats = run_compaction_once(obj.path, obj.store, options)
    out: dict[str, Any] = {"path": obj.path, "compacted": stats is not None}
    if stats is not None:
        out.update(dataclasses.asdict(stats))
    if as_json:
        emit_json(out)
        return
    if stats is None:
        echo(f"{obj.path}: nothing to compact")
        return
    echo(
        f"{obj.path}: {stats.compactions} compaction(s), {stats.input_ssts} SSTs -> "
        f"{stats.output_ssts}, {stats.bytes_in:,} -> {stats.bytes_out:,} bytes, "
        f"{stats.rows_in:,} -> {stats.rows_out:,} rows in {stats.duration_s:.2f} s"
    )


@click.command("gc")
@click.option(
    "--min-age",
    type=DurationType(allow_zero=True),
    default="1h",
    show_default=True,
    help="Never delete objects younger than this (e.g. 10m, 1h, 0s).",
)
@click.option(
    "--db-delete-grace",
    type=DurationType(allow_zero=True),
    default="1d",
    show_default=True,
    help="Delete a soft-destroyed database only this long after it was destroyed.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
@handle_errors
def gc_cmd(obj: Any, min_age: timedelta, db_delete_grace: timedelta, as_json: bool) -> None:
    """Run one garbage-collection pass (SlateDB RFC 0004 and 0026 rules: boundaries advance before any
    delete; the latest manifest and everything a checkpoint pins are kept). A path holding no
    database is DatabaseNotFound (exit 1), as for ``compact``."""
    options = GarbageCollectorOptions(min_age=min_age, db_delete_grace=db_delete_grace)
    stats = run_gc_once(obj.path, obj.store, options, wal_url=obj.wal_url)
    if stats.latest_manifest_id is None and not stats.database_deleted:
        # the message ManifestStore.read_latest gives `compact` (RELIABILITY.md, review finding 18)
        raise DatabaseNotFound(f"no manifest under {obj.path!r} in {obj.store.url}")
    if as_json:
        emit_json(dataclasses.asdict(stats))
        return
    if stats.database_deleted:
        echo(
            f"{obj.path}: soft-destroyed database deleted "
            f"({stats.database_objects.deleted} objects, {stats.database_objects.bytes_freed:,} bytes)"
        )
        return
    if stats.destroyed:
        echo(f"{obj.path}: soft-destroyed; waiting for its grace period or checkpoints")
        return
    parts = []
    for kind in KINDS:
        k = getattr(stats, kind)
        parts.append(
            f"{kind} {k.deleted} ({k.bytes_freed:,} B)"
            + (f" {k.failed} failed" if k.failed else "")
        )
    echo(f"{obj.path}: deleted " + ", ".join(parts))
    echo(
        f"  boundaries: manifest {stats.manifest_boundary}, compactions "
        f"{stats.compactions_boundary}, wal {stats.wal_boundary}; expired checkpoints removed "
        f"{stats.expired_checkpoints_removed}; {stats.duration_s:.2f} s"
    )
    if stats.data_gc_skipped:
        echo(f"  WAL/SST collection skipped: {stats.data_gc_skipped}")


COMMANDS: tuple[click.Command, ...] = (compact_cmd, gc_cmd)


def register(cli: click.Group) -> None:
    """Attach ``compact`` and ``gc`` to ``cli``; safe to call more than once."""
    for cmd in COMMANDS:
        if cli.commands.get(cmd.name or "") is not cmd:
            cli.add_command(cmd)
