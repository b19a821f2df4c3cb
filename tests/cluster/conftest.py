"""The cluster tests' processes end with their fixtures' teardown on every stop signal (issue 40,
item 7): pytest turns Ctrl-C into KeyboardInterrupt and still tears its fixtures down (the cluster
fixtures run ``cluster stop``), but dies at once on a timeout's SIGTERM or a closed terminal's
SIGHUP, leaving the whole cluster running. Here those two raise KeyboardInterrupt too; and every
cluster these tests start is owned by this pytest (``LAKEHOUSE_CLUSTER_OWNER``), so that after a
SIGKILL, which no handler sees, ``make cluster-stop`` (``stop --orphans``) finds what it left."""

from __future__ import annotations

import os
import signal
from types import FrameType

import pytest

from lakehouse_demo.cluster.processes import OWNER, owner_token


def _interrupt(signum: int, frame: FrameType | None) -> None:
    # once: a second signal during teardown must not cut ``cluster stop`` short
    signal.signal(signum, signal.SIG_IGN)
    raise KeyboardInterrupt(signal.Signals(signum).name)


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault(OWNER, owner_token(os.getpid()))  # inherited by every service
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) in (signal.SIG_DFL, None):
            signal.signal(sig, _interrupt)
