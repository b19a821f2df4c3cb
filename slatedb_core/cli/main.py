"""``slatedb``: operator commands. Human-readable output by default, ``--json`` for machines.

Exit codes: 0 success, 1 a SlateDB error (message on stderr, naming the error type), 2 bad usage
(see :mod:`slatedb_core.cli.output`). Each command group lives in a module of its own and is
attached here with its ``register``.
"""

from __future__ import annotations

import sys

import click

from slatedb_core.cli import (
    changes,
    checkpoints,
    clones,
    destroy,
    fleet_metrics,
    maintenance,
    manifests,
    read,
    table,
    table_stats,
)
from slatedb_core.cli.output import Ctx
from slatedb_core.cli.terminal import capture_library_logs
from slatedb_core.lsm.merge_operator import BUILTIN_MERGE_OPERATORS


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
@click.option(
    "--wal-url",
    envvar="SLATEDB_WAL_URL",
    default=None,
    help="The database's separate WAL object store, if it was written with one (SlateDB's "
    "with_wal_object_store, RFC 0009): a store URL as for --url (env SLATEDB_WAL_URL).",
)
@click.option(
    "--merge-operator",
    envvar="SLATEDB_MERGE_OPERATOR",
    type=click.Choice(sorted(BUILTIN_MERGE_OPERATORS)),
    default=None,
    help="The merge operator the database's writers use (SlateDB RFC 0006), by built-in name: "
    "reads (get, scan, table get/scan) fold merge operands with it and compactions rewrite them "
    "with it. Without it, a read of a key holding operands fails naming the key, and a "
    "compaction meeting one commits nothing (env SLATEDB_MERGE_OPERATOR).",
)
@click.pass_context
def cli(
    ctx: click.Context,
    url: str,
    db_path: str,
    wal_url: str | None,
    merge_operator: str | None,
) -> None:
    """Inspect and repair SlateDB databases on object storage. Commands over every database of
    a store: ``slatedb fleet --help`` (no --path)."""
    capture_library_logs(ctx)  # the library's warnings reach the terminal escaped too
    ctx.obj = Ctx(url, db_path, wal_url, merge_operator)


for _module in (
    manifests,
    checkpoints,
    read,
    changes,
    destroy,
    clones,
    table,
    table_stats,
    maintenance,
):
    _module.register(cli)


def main() -> None:
    if sys.argv[1:2] == ["fleet"]:  # every database of a store: --url but no --path
        fleet_metrics.fleet(args=sys.argv[2:], prog_name="slatedb fleet")
    cli(prog_name="slatedb")


if __name__ == "__main__":
    main()
