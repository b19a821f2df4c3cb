"""``slatedb fleet serve-metrics``: a Prometheus exporter of a fleet's figures and of its own
engine counters (issue 40, item 11; :mod:`slatedb_core.fleet.metrics`, docs/operations.md).

``fleet`` commands span every database of a store, so they take ``--url`` but no ``--path``:
:func:`slatedb_core.cli.main.main` hands ``slatedb fleet ...`` to :data:`fleet` directly.

The exporter listens on 127.0.0.1 unless told otherwise: the page has no authentication and names
every database of the store, so a non-loopback address needs ``--allow-non-loopback`` (put a
reverse proxy with authentication, or a firewall, in front of it). SIGTERM and Ctrl-C stop it
cleanly (exit 0).
"""

from __future__ import annotations

import ipaddress
import signal
import sys
import threading
from types import FrameType

import click
from prometheus_client import CollectorRegistry, start_http_server

from slatedb_core.cli.terminal import echo
from slatedb_core.errors import SlateDBError
from slatedb_core.fleet.metrics import EngineCollector, FleetCollector
from slatedb_core.store.redact import redact_url
from slatedb_core.store.url import open_store

__all__ = ["fleet", "is_loopback"]


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback IP address (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


@click.group("fleet", context_settings={"help_option_names": ["-h", "--help"]})
def fleet() -> None:
    """Commands over every database of a store."""


@fleet.command("serve-metrics")
@click.option(
    "--url",
    envvar="SLATEDB_URL",
    required=True,
    help="Object store URL, as for the other commands (env SLATEDB_URL).",
)
@click.option("--prefix", default="", help="Only the databases under this prefix.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=9464, show_default=True, help="0: any."
)
@click.option(
    "--min-interval",
    type=click.FloatRange(0),
    default=15.0,
    show_default=True,
    help="Seconds: a scrape sooner than this after the last scan gets that scan's figures.",
)
@click.option(
    "--discover-interval",
    type=click.FloatRange(0),
    default=300.0,
    show_default=True,
    help="Seconds between listings of the whole prefix for new databases.",
)
@click.option(
    "--allow-non-loopback",
    is_flag=True,
    help="Listen on a non-loopback --host: the page is unauthenticated and names every database.",
)
def serve_metrics(
    url: str,
    prefix: str,
    host: str,
    port: int,
    min_interval: float,
    discover_interval: float,
    allow_non_loopback: bool,
) -> None:
    """Serve /metrics for Prometheus: each database's state, L0 SSTs, WAL backlog, manifest lag
    and last compaction, and this process's engine counters."""
    if not is_loopback(host) and not allow_non_loopback:
        raise click.UsageError(
            f"--host {host} is not a loopback address: the metrics page has no authentication "
            "and names every database of the store; pass --allow-non-loopback to listen there "
            "anyway (behind a firewall or an authenticating proxy)"
        )
    try:
        store = open_store(url)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(
            FleetCollector(
                store,
                prefix=prefix,
                min_interval_s=min_interval,
                discover_interval_s=discover_interval,
            )
        )
        registry.register(EngineCollector())
    except SlateDBError as e:
        echo(f"error: {type(e).__name__}: {e}", err=True)
        sys.exit(1)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as e:
        echo(f"error: cannot listen on {host}:{port}: {e.strerror or e}", err=True)
        sys.exit(1)
    shown = f"[{host}]" if ":" in host else host
    echo(
        f"serving metrics of {redact_url(url)} on "
        f"http://{shown}:{server.server_address[1]}/metrics",
    )
    sys.stdout.flush()
    while not stop.wait(3600):
        pass
    server.shutdown()
    server.server_close()
    thread.join(10)
    echo("stopped")
