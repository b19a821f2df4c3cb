"""The seam through which a test harness runs a writer's background work itself: the
simulation (``tests/sim/``) decides by seed when the WAL is written, when a memtable reaches L0
and when the manifest is polled, instead of the writer's threads.

:class:`WriterHooks`, given to :meth:`Db.open <slatedb_core.writer.db.Db.open>`, says which
:class:`~slatedb_core.wal.flusher.WalFlusher` the writer uses (a subclass that writes in the
caller's thread, built on the flusher's public methods only), which WAL window parallel writes
go through, and whether the background threads start; ``Db.open`` hands back in
:attr:`WriterHooks.steps` the :class:`WriterSteps` the harness then runs (and through which it
inspects the writer's state: no harness reaches into ``Db``'s parts). Nothing here changes
what a writer asks of its store: the same requests, in the order the harness runs the steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from slatedb_core.lsm.dbstate import DbState
from slatedb_core.wal.flusher import WalFlusher
from slatedb_core.wal.writer import WalWindow, WalWriter


@dataclass(frozen=True)
class WriterSteps:
    """A writer's background work, to be run step by step by a harness."""

    flusher: WalFlusher
    """The WAL flusher: ``flush_wal``, ``dispatch``, ``window``, ``error``."""
    flush_memtables: Callable[[], None]
    """Flush every frozen memtable to L0 (the L0 flusher thread's pass)."""
    refresh: Callable[[], None]
    """Pick up manifests written by others (the manifest poller's pass)."""
    manifest_id: Callable[[], int]
    """The id of the newest manifest the writer committed or read."""
    state: Callable[[], DbState]
    """The writer's current state (its memtable, frozen memtables and manifest), for a harness
    to inspect; reads and writes go through ``Db``."""


@dataclass
class WriterHooks:
    """How ``Db.open`` builds the writer for a harness; the defaults are a normal writer."""

    flusher: type[WalFlusher] = WalFlusher
    window: Callable[[WalWriter, int], WalWindow] | None = None
    """With ``max_parallel_writes`` > 1: makes the WAL window from the writer and its size,
    in place of the one with threads (created, then closed before anything is written)."""
    background: bool = True
    """False: no background thread starts; the harness runs :attr:`steps`."""
    steps: WriterSteps | None = None
    """Set by ``Db.open``."""
