"""Tools for testing code built on slatedb_core: a fault-injecting object store, free ports.

Not part of the engine: nothing in ``slatedb_core`` imports this package (it sits at the top of
the layers, docs/architecture.md), and the engine behaves the same without it. Tests and the
simulation wrap a real store in :class:`FaultyStore` to make requests fail, succeed but report
failure, or pause at a named point; what it raises is :class:`~slatedb_core.errors.InjectedFault`,
an ordinary retryable store error (docs/contributing.md, "Tests"). Servers a test, the demo or
``make cluster`` starts take their ports from :mod:`slatedb_core.testing.ports`.
"""

from __future__ import annotations

from slatedb_core.testing.faults import (
    DEFAULT_PAUSE_TIMEOUT_S,
    FaultRule,
    FaultyStore,
    PausePoint,
    When,
)

__all__ = ["DEFAULT_PAUSE_TIMEOUT_S", "FaultRule", "FaultyStore", "PausePoint", "When"]
