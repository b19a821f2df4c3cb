"""``clone``, ``project`` and ``union``: create a database at ``--path`` from other databases.

Each prints a summary of the new database's manifest: id, initialized, key range, L0/sorted-run
counts and its external databases. Re-running a command that was interrupted finishes the job;
re-running a finished one prints the existing database (or fails if ``--path`` holds something
else). Bad input (malformed UUID, key or ``--source``) exits 2 before any request; SlateDB errors
(unusable source, stale checkpoint, overlapping union sources) exit 1.

Keys are UTF-8 text, or hex digits after ``0x`` (``0x00ff``); a key that itself starts with
``0x`` must be given in hex.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.table import Table

from slatedb_core.cli.output import emit_json, handle_errors
from slatedb_core.cli.terminal import console as terminal_console
from slatedb_core.keys import KeyRange
from slatedb_core.lifecycle.clone import create_clone_stored
from slatedb_core.lifecycle.union import UnionSource, create_union_stored
from slatedb_core.manifest.store import StoredManifest

F = TypeVar("F", bound=Callable[..., Any])

_KEY_HELP = "UTF-8 text, or hex after 0x (e.g. 0x00ff)."
_SOURCE_HELP = """A source database, repeatable (one per shard):
PATH[:CHECKPOINT][@FROM..TO]. CHECKPOINT is a UUID (default: an ephemeral checkpoint of the
latest state). FROM..TO is the source's key range, FROM inclusive and TO exclusive, either side
empty for unbounded (e.g. 'shard-a@..m', 'shard-b:UUID@m..'); with ranges, union also checks
the sources are adjacent. Keys as for --from; a key containing '..' must be given in hex. PATH
must not contain ':' or '@'."""


# ---- parsing ---------------------------------------------------------------------------------
def parse_key(text: str, what: str) -> bytes:
    """Raises click.BadParameter (exit 2)."""
    if text[:2].lower() == "0x":
        try:
            key = bytes.fromhex(text[2:])
        except ValueError:
            raise click.BadParameter(
                f"{text!r} is not valid hex after 0x", param_hint=what
            ) from None
    else:
        # argv bytes that are not UTF-8 arrive as surrogate escapes: give back the original bytes
        # (as ``slatedb get`` does) instead of failing with a UnicodeEncodeError traceback
        key = text.encode("utf-8", errors="surrogateescape")
    if not key:
        raise click.BadParameter("a key must not be empty", param_hint=what)
    return key


def parse_range(start: str | None, end: str | None, what: str) -> KeyRange | None:
    if start is None and end is None:
        return None
    lo = None if start is None else parse_key(start, what)
    hi = None if end is None else parse_key(end, what)
    if lo is not None and hi is not None and hi <= lo:
        raise click.BadParameter(
            f"the range is empty: TO {end!r} is not after FROM {start!r}", param_hint=what
        )
    return KeyRange(lo, hi)


def parse_source(text: str) -> UnionSource:
    """``PATH[:CHECKPOINT][@FROM..TO]`` (see ``_SOURCE_HELP``)."""
    spec, at, rng_text = text.partition("@")
    path, colon, cp_text = spec.partition(":")
    if not path:
        raise click.BadParameter(f"{text!r} has no PATH", param_hint="--source")
    checkpoint = None
    if colon:
        try:
            checkpoint = uuid.UUID(cp_text)
        except ValueError:
            raise click.BadParameter(
                f"{cp_text!r} in {text!r} is not a checkpoint UUID", param_hint="--source"
            ) from None
    rng = None
    if at:
        lo, dots, hi = rng_text.partition("..")
        if not dots:
            raise click.BadParameter(
                f"the range in {text!r} must be FROM..TO (either side may be empty)",
                param_hint="--source",
            )
        rng = parse_range(lo or None, hi or None, "--source") or KeyRange()
    return UnionSource(path, checkpoint, rng)


# ---- output ----------------------------------------------------------------------------------
def _key_text(k: bytes | None) -> str | None:
    if k is None:
        return None
    try:
        text = k.decode("utf-8")
        if text.isprintable() and not text.startswith("0x"):
            return text
    except UnicodeDecodeError:
        pass
    return "0x" + k.hex()


def summary(path: str, stored: StoredManifest) -> dict[str, Any]:
    m = stored.manifest
    rng = KeyRange.of(m.key_range)
    return {
        "path": path,
        "manifest_id": stored.id,
        "initialized": m.initialized,
        "key_range": None
        if m.key_range is None
        else {"from": _key_text(rng.start), "to": _key_text(rng.end)},
        "ssts": len(m.ssts),
        "l0_views": len(m.l0),
        "sorted_runs": len(m.compacted),
        "external_dbs": [
            {
                "path": e.path,
                "source_checkpoint_id": str(e.source_checkpoint_id),
                "final_checkpoint_id": None
                if e.final_checkpoint_id is None
                else str(e.final_checkpoint_id),
                "sst_ids": len(e.sst_ids),
            }
            for e in m.external_dbs
        ],
    }


def _show(d: dict[str, Any], as_json: bool, title: str) -> None:
    if as_json:
        emit_json(d)
        return
    console = terminal_console()  # piped: wide enough to keep UUIDs on one line
    t = Table(title=f"{d['path']}: {title}", show_header=False)
    rng = d["key_range"]
    t.add_row("manifest id", str(d["manifest_id"]))
    t.add_row("initialized", str(d["initialized"]))
    t.add_row(
        "key range",
        "all keys" if rng is None else f"[{rng['from'] or '-inf'}, {rng['to'] or '+inf'})",
    )
    t.add_row(
        "ssts / l0 views / sorted runs", f"{d['ssts']} / {d['l0_views']} / {d['sorted_runs']}"
    )
    console.print(t)
    et = Table(title="external dbs")
    for col in ("path", "source checkpoint", "final checkpoint", "ssts"):
        et.add_column(col)
    for e in d["external_dbs"]:
        et.add_row(
            e["path"], e["source_checkpoint_id"], e["final_checkpoint_id"] or "-", str(e["sst_ids"])
        )
    console.print(et)


# ---- commands --------------------------------------------------------------------------------
_json = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
_checkpoint = click.option(
    "--checkpoint",
    type=click.UUID,
    default=None,
    metavar="UUID",
    help="Clone the state this checkpoint of the source pins (default: an ephemeral checkpoint "
    "of its latest state, including writes that are only in its WAL).",
)


@click.command("clone")
@click.option("--parent", required=True, metavar="PATH", help="The database to clone.")
@_checkpoint
@click.option(
    "--from",
    "start",
    default=None,
    metavar="KEY",
    help="Keep only keys >= KEY (a projection). " + _KEY_HELP,
)
@click.option(
    "--to",
    "end",
    default=None,
    metavar="KEY",
    help="Keep only keys < KEY (a projection). " + _KEY_HELP,
)
@_json
@click.pass_obj
@handle_errors
def clone_cmd(
    obj: Any,
    parent: str,
    checkpoint: uuid.UUID | None,
    start: str | None,
    end: str | None,
    as_json: bool,
) -> None:
    """Create the database at --path as a clone of --parent (a shallow copy: it references the
    parent's SSTs and copies only its WAL tail). Writes to either never show in the other."""
    rng = parse_range(start, end, "--from/--to")
    stored = create_clone_stored(
        obj.path, parent, obj.store, checkpoint, rng, parent_wal_url=obj.wal_url
    )
    _show(summary(obj.path, stored), as_json, f"clone of {parent}")


@click.command("project")
@click.option("--source", required=True, metavar="PATH", help="The database to project.")
@click.option(
    "--from",
    "start",
    default=None,
    metavar="KEY",
    help="First key of the projection (inclusive; omit for the first key). " + _KEY_HELP,
)
@click.option(
    "--to",
    "end",
    default=None,
    metavar="KEY",
    help="End of the projection (exclusive; omit for no end). " + _KEY_HELP,
)
@_checkpoint
@_json
@click.pass_obj
@handle_errors
def project_cmd(
    obj: Any,
    source: str,
    start: str | None,
    end: str | None,
    checkpoint: uuid.UUID | None,
    as_json: bool,
) -> None:
    """Create the database at --path as a clone of --source restricted to [--from, --to): one
    shard of it. At least one of --from/--to is required."""
    rng = parse_range(start, end, "--from/--to")
    if rng is None:
        raise click.UsageError("project needs --from and/or --to (without them, use clone)")
    stored = create_clone_stored(
        obj.path, source, obj.store, checkpoint, rng, parent_wal_url=obj.wal_url
    )
    _show(summary(obj.path, stored), as_json, f"projection of {source}")


@click.command("union")
@click.option(
    "--source", "sources", required=True, multiple=True, metavar="SPEC", help=_SOURCE_HELP
)
@_json
@click.pass_obj
@handle_errors
def union_cmd(obj: Any, sources: tuple[str, ...], as_json: bool) -> None:
    """Create the database at --path as the union of non-overlapping sources (e.g. shards made
    with project). Each source's WAL must be flushed into L0 first."""
    parsed = [parse_source(s) for s in sources]
    stored = create_union_stored(obj.path, parsed, obj.store)
    _show(summary(obj.path, stored), as_json, f"union of {len(parsed)} source(s)")


COMMANDS: tuple[click.Command, ...] = (clone_cmd, project_cmd, union_cmd)


def register(cli: click.Group) -> None:
    """Attach ``clone``, ``project`` and ``union`` to ``cli``; safe to call more than once."""
    for cmd in COMMANDS:
        if cli.commands.get(cmd.name or "") is not cmd:
            cli.add_command(cmd)
