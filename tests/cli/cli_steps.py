"""Steps of the CLI tests: the ``slatedb`` group with a command module registered on a copy of it,
so the module-level ``cli`` of ``slatedb_core.cli.main`` is left as it is."""

from __future__ import annotations

from collections.abc import Callable

import click

from slatedb_core.cli.main import cli


def group_with(register: Callable[[click.Group], object]) -> click.Group:
    """The main group's options and commands plus those ``register`` adds, registered twice (a
    second registration must change nothing)."""
    group = click.Group(
        name="slatedb",
        params=list(cli.params),
        callback=cli.callback,
        commands=dict(cli.commands),
        context_settings=dict(cli.context_settings),
    )
    register(group)
    register(group)  # idempotent
    return group
