"""Free ports for local servers stay out of the kernel's ephemeral range.

From CI on 6b3fe12 (2026-11-29): ``tests/cluster/test_private_data.py`` picked the Dagster
webserver's port by binding port 0, released it, and started the webserver a few seconds later;
meanwhile an outgoing connection (the kernel hands those ports from the same ephemeral range) took
it, and the webserver died with "address already in use". A port picked below that range can be
taken only by another explicit bind.
"""

from __future__ import annotations

import socket

from lakehouse_demo.cluster.settings import Ports
from slatedb_core.testing.ports import ephemeral_range, free_port, free_ports, free_run


def test_picked_ports_are_below_the_ephemeral_range_and_bindable() -> None:
    low, _ = ephemeral_range()
    ports = free_ports(20)
    assert len(set(ports)) == 20
    for p in [*ports, free_port()]:
        assert 1024 <= p < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_a_run_is_consecutive_free_and_avoids_the_excluded() -> None:
    low, _ = ephemeral_range()
    taken = set(free_ports(5))
    base = free_run(4, exclude=taken)
    assert taken.isdisjoint(range(base, base + 4))
    assert base + 4 <= low


def test_two_pickers_rarely_agree() -> None:
    """The pick is random (not seeded by a test's ``random.seed``): parallel test workers that
    start clusters at once must not all try the same first port."""
    import random

    random.seed(0)
    a = free_ports(3)
    random.seed(0)
    b = free_ports(3)
    assert a != b


def test_the_cluster_picks_outside_the_ephemeral_range() -> None:
    low, _ = ephemeral_range()
    ports = Ports.free(3)
    assert all(v < low for v in vars(ports).values())
