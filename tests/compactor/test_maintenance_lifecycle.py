"""The two maintenance actors, Compactor and GarbageCollector, have one lifecycle (issue 41,
item 4: they started differently as context managers: ``with GarbageCollector(...)`` started
its thread, ``with Compactor(...)`` did not).

The shared contract: constructing one acquires what it needs (the compactor takes over the
compactor epoch) and starts no thread; ``start()`` starts the background thread, is idempotent
and returns the actor, so ``with X(...).start() as x:`` runs it for a block; ``with X(...) as
x:`` only scopes it (``x.run_once()`` in the caller's thread, no pass running beside it);
leaving the block, ``stop()`` and ``close()`` stop the thread, idempotently; a stopped actor
can be started again.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from slatedb_core.compactor import Compactor
from slatedb_core.gc import GarbageCollector
from slatedb_core.options import CompactorOptions, GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db

Actor = Compactor | GarbageCollector
FAST = timedelta(milliseconds=10)


def _compactor(store: ObjectStore) -> Compactor:
    return Compactor("db", store, CompactorOptions(poll_interval=FAST))


def _gc(store: ObjectStore) -> GarbageCollector:
    return GarbageCollector("db", store, GarbageCollectorOptions(interval=FAST))


ACTORS: dict[str, Callable[[ObjectStore], Actor]] = {"compactor": _compactor, "gc": _gc}


@pytest.fixture
def db_store(mem: ObjectStore) -> ObjectStore:
    with Db.open("db", mem) as db:
        db.put(b"k", b"v")
    return mem


@pytest.mark.parametrize("make", ACTORS.values(), ids=ACTORS.keys())
def test_with_scopes_the_actor_and_starts_no_thread(
    make: Callable[[ObjectStore], Actor], db_store: ObjectStore
) -> None:
    with make(db_store) as actor:
        assert not actor.running
        actor.run_once()  # in the caller's thread
        assert not actor.running
    assert not actor.running


@pytest.mark.parametrize("make", ACTORS.values(), ids=ACTORS.keys())
def test_start_runs_it_for_the_block_and_the_exit_stops_it(
    make: Callable[[ObjectStore], Actor], db_store: ObjectStore
) -> None:
    with make(db_store).start() as actor:
        assert actor.running
        assert actor.start() is actor and actor.running  # idempotent
    assert not actor.running


@pytest.mark.parametrize("make", ACTORS.values(), ids=ACTORS.keys())
def test_stop_and_close_are_idempotent_and_a_stopped_actor_starts_again(
    make: Callable[[ObjectStore], Actor], db_store: ObjectStore
) -> None:
    actor = make(db_store)
    assert not actor.running
    actor.start()
    assert actor.running
    actor.stop()
    actor.stop()
    assert not actor.running
    actor.start()
    assert actor.running
    actor.close()
    actor.close()
    assert not actor.running
