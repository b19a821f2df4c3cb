"""``slatedb scan`` and ``slatedb get``: read keys from the command line, never writing.

A CLI process lives for one command, so it must not leave a checkpoint behind (a crash between
creating and deleting one would pin SSTs until it expired): without ``--checkpoint`` it reads the
latest manifest and WAL in ``FOLLOW_LATEST`` mode; with ``--checkpoint`` it reads that checkpoint.
Both work with read-only credentials.

Keys and values are printed per ``--format``:

* ``utf8`` (default): the text, with invalid UTF-8 bytes shown as ``\\xNN``, non-printable
  characters escaped (``\\t``, ``\\n``, ``\\x01``, ``\\u200b``) and a backslash doubled, so any byte
  string prints on one line without ambiguity. ``--json`` carries the same escaped text.
* ``hex``: lowercase hex digits. Key arguments in hex may carry a ``0x`` prefix.

Human output of ``scan`` is one ``KEY<TAB>VALUE`` line per key; of ``get``, the value alone.
``--json`` prints ``[{"key": ..., "value": ...}, ...]`` / ``{"key": ..., "value": ...}``.
A ``scan`` that fails midway (an SST gone or damaged) exits 1 with the error on stderr: human
output streams, so the lines of the keys read before the failure stay printed (each complete);
``--json`` prints nothing on stdout (the array is built first and printed whole, as ``slatedb
table scan`` does, so a consumer never parses a truncated document).

Exit codes: 0 success; 1 a SlateDB error, or ``get`` of a key that is not there (stderr says
``not found: KEY``; with ``--json`` stdout is ``null``); 2 bad usage (bad hex, bad UUID, ``--prefix``
together with ``--from``/``--to``, ``--to`` before ``--from``).
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import click

from slatedb_core.cli.output import Ctx, NotFound, handle_errors
from slatedb_core.cli.terminal import echo, echo_json, echo_json_text, echo_row
from slatedb_core.options import DbReaderOptions, MiB, ReaderMode
from slatedb_core.printable import printable
from slatedb_core.reader.reader import DbReader

F = TypeVar("F", bound=Callable[..., Any])
FORMATS = ("utf8", "hex")


# ---- formats ---------------------------------------------------------------------------------
def parse_key(text: str, fmt: str, what: str) -> bytes:
    """A key argument as bytes; raises click.BadParameter (exit 2)."""
    if fmt == "hex":
        digits = text[2:] if text[:2].lower() == "0x" else text
        try:
            data = bytes.fromhex(digits)
        except ValueError:
            raise click.BadParameter(f"{text!r} is not hex", param_hint=what) from None
    else:
        # argv bytes that are not UTF-8 arrive as surrogate escapes: give back the original bytes
        data = text.encode("utf-8", errors="surrogateescape")
    if not data:
        raise click.BadParameter("keys are non-empty", param_hint=what)
    return data


def show(data: bytes, fmt: str) -> str:
    """Bytes as printable text per ``fmt`` (see the module docstring)."""
    if fmt == "hex":
        return data.hex()
    # the escaping every stored string shown to an operator gets (slatedb_core.printable), with
    # backslashes doubled so that any byte string prints unambiguously
    return printable(data.decode("utf-8", errors="surrogateescape"), backslash=True)


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key above every key starting with ``prefix`` (None: no such key)."""
    head = prefix.rstrip(b"\xff")
    if not head:
        return None
    return head[:-1] + bytes([head[-1] + 1])


def key_range(
    prefix: str | None, start: str | None, end: str | None, fmt: str
) -> tuple[bytes | None, bytes | None]:
    """The key range of ``--prefix`` or ``--from``/``--to`` (UsageError for both, BadParameter
    for ``--to`` before ``--from``)."""
    if prefix is not None and (start is not None or end is not None):
        raise click.UsageError("--prefix cannot be combined with --from/--to")
    if prefix is not None:
        first = parse_key(prefix, fmt, "--prefix")
        return first, prefix_end(first)
    lo = None if start is None else parse_key(start, fmt, "--from")
    hi = None if end is None else parse_key(end, fmt, "--to")
    if lo is not None and hi is not None and hi < lo:
        raise click.BadParameter("--to is before --from", param_hint="--to")
    return lo, hi


def open_reader(obj: Ctx, checkpoint: uuid.UUID | None) -> DbReader:
    options = DbReaderOptions(
        mode=ReaderMode.FOLLOW_LATEST if checkpoint is None else ReaderMode.CHECKPOINT,
        manifest_poll_interval=timedelta(hours=1),  # one command: no polling
        checkpoint_lifetime=None,
        block_cache_bytes=16 * MiB,
        wal_url=obj.wal_url,
        merge_operator=obj.merge_operator,
    )
    return DbReader.open(obj.path, obj.store, checkpoint, options)


_checkpoint_option = click.option(
    "--checkpoint",
    type=click.UUID,
    default=None,
    help="Read this checkpoint instead of the latest state.",
)
_format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="utf8",
    show_default=True,
    help="How keys are given and keys and values shown.",
)
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@click.command("scan")
@click.option("--prefix", default=None, help="Only keys starting with this.")
@click.option("--from", "start", default=None, help="First key (inclusive).")
@click.option("--to", "end", default=None, help="End key (exclusive).")
@click.option("--max-keys", type=click.IntRange(min=1), default=None, help="Stop after N keys.")
@_checkpoint_option
@_format_option
@_json_option
@click.pass_obj
@handle_errors
def scan_command(
    obj: Ctx,
    prefix: str | None,
    start: str | None,
    end: str | None,
    max_keys: int | None,
    checkpoint: uuid.UUID | None,
    fmt: str,
    as_json: bool,
) -> None:
    """Print keys and values in key order."""
    lo, hi = key_range(prefix, start, end, fmt)
    items: list[str] = []  # --json: the whole array is printed only once the scan succeeded
    with open_reader(obj, checkpoint) as reader:
        rows = reader.scan(lo, hi)
        limited = rows if max_keys is None else itertools.islice(rows, max_keys)
        n = 0
        for k, v in limited:
            if as_json:
                items.append(json.dumps({"key": show(k, fmt), "value": show(v, fmt)}))
            else:
                echo_row(show(k, fmt), show(v, fmt))
            n += 1
        if as_json:
            echo_json_text("[\n  " + ",\n  ".join(items) + "\n]" if items else "[]")
        if max_keys is not None and n == max_keys:
            echo(f"(stopped after --max-keys {max_keys})", err=True)


@click.command("get")
@click.argument("key")
@_checkpoint_option
@_format_option
@_json_option
@click.pass_obj
@handle_errors
def get_command(obj: Ctx, key: str, checkpoint: uuid.UUID | None, fmt: str, as_json: bool) -> None:
    """Print the value of KEY (exit 1 when it is not there)."""
    k = parse_key(key, fmt, "KEY")
    with open_reader(obj, checkpoint) as reader:
        value = reader.get(k)
    if value is None:
        if as_json:
            echo_json(None)
        raise NotFound(show(k, fmt))
    if as_json:
        echo_json({"key": show(k, fmt), "value": show(value, fmt)})
    else:
        echo(show(value, fmt))


def register(cli: click.Group) -> None:
    """Add ``scan`` and ``get`` to the ``slatedb`` group (idempotent)."""
    cli.add_command(scan_command)
    cli.add_command(get_command)


__all__ = ["key_range", "open_reader", "parse_key", "prefix_end", "register", "show"]
