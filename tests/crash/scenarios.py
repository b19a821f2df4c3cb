"""The operations under test, each as setup -> (process: prepare, operation) -> recovery.

* ``setup`` builds the database(s) the operation works on, on the real store, and returns the
  model of acknowledged writes. It runs once per store kind; tests restore a copy of its objects.
* ``prepare`` is the part of the process before the operation (e.g. opening the writer that then
  puts); its calls are neither recorded nor crash points, but it dies with the process.
* ``operation`` is what is enumerated: every store call it makes is a crash point, twice.
* ``recover`` runs on the real store after the process finished or died: the database opens, no
  acknowledged write is lost, invariants hold, a retry of the interrupted operation completes,
  and the rest of the workload (writes, memtable flush, compaction, GC) runs on top.

Determinism: the WAL flusher runs only when a durable put wakes it (flush interval of an hour),
the manifest poller never fires, there is no in-process compactor, GC deletes one object at a time
(``delete_concurrency=1``). What can still vary between runs: ULIDs, UUIDs and times inside
objects (never the sequence of calls), which thread makes a memtable flush's calls (the caller or
the L0 flusher, under one lock: same calls, same order), and the order of hard destroy's parallel
deletes (crash points name calls by (op, kind, ordinal), so a different object of the same kind
may be the one in flight).
"""

from __future__ import annotations

import copy
import dataclasses
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import pyarrow as pa
import pytest

from slatedb_core.checkpoints import create_checkpoint, delete_checkpoint
from slatedb_core.compactor import run_compaction_once
from slatedb_core.errors import (
    CheckpointNotFound,
    DatabaseDestroyed,
    DatabaseNotFound,
    DatabaseNotInitialized,
)
from slatedb_core.gc.collector import Collector
from slatedb_core.keys import KeyRange
from slatedb_core.lifecycle.clone import create_clone
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.lifecycle.union import UnionSource, create_union
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.meta.boundary import TOMBSTONE, ULID_MS_TOMBSTONE
from slatedb_core.options import (
    CheckpointOptions,
    CompactorOptions,
    DbOptions,
    GarbageCollectorOptions,
)
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.batch import WriteBatch
from slatedb_core.writer.db import Db
from tests.crash.invariants import Epochs, check_database, epochs
from tests.crash.process import Outcome, Process
from tests.crash.store import ProcessKilled

HOUR = timedelta(hours=1)
OPTS = DbOptions(flush_interval=HOUR, manifest_poll_interval=HOUR, block_cache_bytes=0)
COMPACT = CompactorOptions(l0_trigger=2)
GC_OPTS = GarbageCollectorOptions(min_age=timedelta(0), db_delete_grace=timedelta(0))

Value = bytes | None


def key(i: int) -> bytes:
    return b"k%03d" % i


@dataclass
class Model:
    """Acknowledged writes, and the writes in flight whose outcome the crash left unknown."""

    acked: dict[bytes, Value] = field(default_factory=dict)
    maybe: dict[bytes, Value] = field(default_factory=dict)

    def settle(self, actual: dict[bytes, bytes], where: str) -> None:
        """Assert ``actual`` holds every acknowledged write (in-flight ones may or may not be
        there) and nothing else; then adopt it, now that the outcome is known."""
        for k in sorted(self.acked.keys() | self.maybe.keys() | actual.keys()):
            allowed = {self.acked.get(k)}
            if k in self.maybe:
                allowed.add(self.maybe[k])
            got = actual.get(k)
            assert got in allowed, f"{where}: key {k!r} holds {got!r}, expected one of {allowed}"
        self.acked = {k: v for k, v in actual.items()}
        self.maybe = {}

    def live(self) -> dict[bytes, bytes]:
        return {k: v for k, v in self.acked.items() if v is not None}


@dataclass
class State:
    """What setup leaves for the process and the recovery (copied per test)."""

    model: Model
    epochs: dict[str, Epochs | None] = field(default_factory=dict)
    checkpoint: uuid.UUID | None = None
    expected: dict[str, dict[bytes, bytes]] = field(default_factory=dict)
    sources: list[UnionSource] = field(default_factory=list)

    def copy(self) -> State:
        return copy.deepcopy(self)


def write(db: Db, model: Model, items: dict[bytes, Value], *, durable: bool = True) -> None:
    batch = WriteBatch()
    for k, v in items.items():
        if v is None:
            batch.delete(k)
        else:
            batch.put(k, v)
    model.maybe.update(items)
    db.write(batch, await_durable=durable)
    if durable:
        ack(model)


def ack(model: Model) -> None:
    model.acked.update(model.maybe)
    model.maybe.clear()


def content(store: ObjectStore, path: str) -> dict[bytes, bytes]:
    with Db.open(path, store, OPTS) as db:
        return dict(db.scan())


def verify(store: ObjectStore, path: str, model: Model, where: str) -> None:
    model.settle(content(store, path), f"{where} ({path})")


def gc(store: ObjectStore, path: str) -> None:
    Collector(path, store, GC_OPTS, delete_concurrency=1).run()


def rest_of_workload(store: ObjectStore, path: str, model: Model) -> None:
    """Writes, a memtable flush and WAL-only writes on top of the recovered database; then a
    compaction and a GC pass with min_age 0; everything acknowledged must still be there."""
    with Db.open(path, store, OPTS) as db:
        model.settle(dict(db.scan()), f"reopened {path}")
        write(db, model, {b"t000": b"tail", key(1): b"over", key(12): None})
        db.flush_memtable()
        write(db, model, {b"t001": b"wal-only"})
    run_compaction_once(path, store, COMPACT)
    gc(store, path)
    verify(store, path, model, "after the rest of the workload")
    check_database(store, path)


# ---- setups ---------------------------------------------------------------------------------
def base_db(store: ObjectStore, path: str = "db", *, wal_tail: bool = True) -> Model:
    """Two L0 SSTs (with an overwrite and a tombstone), and acknowledged writes only in the WAL."""
    model = Model()
    with Db.open(path, store, OPTS) as db:
        write(db, model, {key(i): b"v1-%d" % i for i in range(20)})
        db.flush_memtable()
        write(db, model, {key(i): b"v2-%d" % i for i in range(10, 30)} | {key(5): None})
        db.flush_memtable()
        if wal_tail:
            for i in range(30, 35):
                write(db, model, {key(i): b"wal-%d" % i})
    return model


def setup_base(store: ObjectStore) -> State:
    model = base_db(store)
    return State(model, {"db": epochs(store, "db")})


def setup_compaction(store: ObjectStore) -> State:
    model = base_db(store)
    with Db.open("db", store, OPTS) as db:
        for round_ in range(2):
            write(db, model, {key(i): b"v%d-%d" % (round_ + 3, i) for i in range(round_, 40, 3)})
            db.flush_memtable()
    return State(model, {"db": epochs(store, "db")})


def setup_gc(store: ObjectStore) -> State:
    """History for GC to collect: compacted-away L0 SSTs, old WAL SSTs, old manifests and
    compactions records, an expired checkpoint to drop, and a live one pinning an old version."""
    model = base_db(store)
    run_compaction_once("db", store, COMPACT)
    with Db.open("db", store, OPTS) as db:
        write(db, model, {key(i): b"v8-%d" % i for i in range(0, 40, 5)})
        db.flush_memtable()
    create_checkpoint("db", store, CheckpointOptions(lifetime=HOUR, name="live"))
    create_checkpoint(
        "db",
        store,
        CheckpointOptions(lifetime=timedelta(minutes=1), name="expired"),
        now=lambda: time.time() - 3600,
    )
    with Db.open("db", store, OPTS) as db:
        write(db, model, {key(i): b"v9-%d" % i for i in range(0, 40, 4)})
        db.flush_memtable()
        write(db, model, {b"w000": b"wal"})
    return State(model, {"db": epochs(store, "db")})


def setup_checkpoint_delete(store: ObjectStore) -> State:
    state = setup_base(store)
    result = create_checkpoint("db", store, CheckpointOptions(lifetime=HOUR, name="doomed"))
    state.checkpoint = result.id
    state.epochs["db"] = epochs(store, "db")
    return state


def setup_destroyed(store: ObjectStore) -> State:
    state = setup_base(store)
    destroy("db", store, soft=True)
    return state


def setup_detach(store: ObjectStore) -> State:
    """A clone whose own compaction replaced every SST of its parent: GC detaches it."""
    model = base_db(store)
    create_clone("clone", "db", store)
    with Db.open("clone", store, OPTS) as db:
        write(db, model, {key(70): b"clone-own"})
        db.flush_memtable()
    run_compaction_once("clone", store, CompactorOptions(l0_trigger=1))
    Db.open("clone", store, OPTS).close()  # a clean close: no writer checkpoint pins the parent
    return State(model, {"clone": epochs(store, "clone")}, expected={"db": content(store, "db")})


PROJECTION = KeyRange(key(10), key(32))


def setup_projected(store: ObjectStore) -> State:
    """A checkpoint of a fully flushed database (a checkpoint takes no WAL-only writes), then
    writes only in the WAL, which the projected clone must not take."""
    model = base_db(store, wal_tail=False)
    result = create_checkpoint("db", store, CheckpointOptions(lifetime=HOUR))
    expected = {k: v for k, v in model.live().items() if PROJECTION.contains(k)}
    with Db.open("db", store, OPTS) as db:
        write(db, model, {key(i): b"after-%d" % i for i in range(8, 34, 2)})
    state = State(model, {"db": epochs(store, "db")}, checkpoint=result.id)
    state.expected["clone"] = expected
    return state


SHARD_RANGES = [KeyRange(None, key(20)), KeyRange(key(20), None)]


def setup_union(store: ObjectStore) -> State:
    """Two projected clones of one fully flushed database, each with SSTs of its own."""
    model = base_db(store, wal_tail=False)
    cp = create_checkpoint("db", store, CheckpointOptions(lifetime=HOUR))
    sources = []
    expected: dict[bytes, bytes] = {}
    for i, rng in enumerate(SHARD_RANGES):
        create_clone(f"shard{i}", "db", store, cp.id, rng)
        with Db.open(f"shard{i}", store, OPTS) as db:
            db.put(rng.start or b"a", b"own-%d" % i)
            db.flush_memtable()
            expected |= dict(db.scan())
        sources.append(UnionSource(f"shard{i}", range=rng))
    union_model = Model(acked=dict(expected))
    return State(
        union_model, {"db": epochs(store, "db")}, sources=sources, expected={"db": model.live()}
    )


# ---- processes ------------------------------------------------------------------------------
def open_writer(proc: Process, state: State) -> None:
    proc.open_db("db", OPTS)


def op_open(proc: Process, state: State) -> None:
    proc.open_db("db", OPTS)


PARALLEL = dataclasses.replace(OPTS, max_parallel_writes=4)


def open_parallel_writer(proc: Process, state: State) -> None:
    proc.open_db("db", PARALLEL)


def op_open_parallel(proc: Process, state: State) -> None:
    """A writer with 4 parallel WAL writes opens on a sequential one's database: it fences with
    4 consecutive SSTs (and stores 4 in the manifest with its epoch)."""
    proc.open_db("db", PARALLEL)


def op_put_parallel(proc: Process, state: State) -> None:
    """Four durable writes, each in its own WAL SST, up to four of them in flight at once and
    landing in any order; each is acknowledged as its own SST lands (SlateDB RFC 0001)."""
    db = proc.dbs[0]
    wal = proc.steps[0].flusher
    m = state.model
    lock = threading.Lock()

    def one(t: int) -> None:
        items: dict[bytes, Value] = {key(60 + t): b"par%d" % t}
        if t == 1:
            items[key(0)] = None
        with lock:
            m.maybe.update(items)
        batch = WriteBatch()
        for k, v in items.items():
            batch.put(k, v) if v is not None else batch.delete(k)
        try:
            db.write(batch)
        except BaseException:  # the death, or a consequence of it: the write stays maybe
            return
        with lock:
            m.acked.update(items)
            for k in items:
                m.maybe.pop(k, None)

    threads = []
    for t in range(4):
        issued = wal.next_wal_id
        th = threading.Thread(target=one, args=(t,), name=f"crash-put-{t}", daemon=True)
        th.start()
        threads.append(th)
        deadline = time.monotonic() + 10
        # the next write starts once this one has its own SST (so there are always 4 SSTs)
        while th.is_alive() and wal.next_wal_id == issued and time.monotonic() < deadline:
            time.sleep(0.001)
    for th in threads:
        th.join(10)
    db.flush()


def op_put(proc: Process, state: State) -> None:
    db = proc.dbs[0]
    m = state.model
    write(db, m, {key(40): b"p40"})
    write(db, m, {key(41): b"p41", key(0): b"p0", key(2): None})
    write(db, m, {key(42): b"p42"}, durable=False)
    write(db, m, {key(43): b"p43", key(3): None}, durable=False)
    db.flush()
    ack(m)


def prepare_flush_memtable(proc: Process, state: State) -> None:
    db = proc.open_db("db", OPTS)
    write(db, state.model, {key(50 + i): b"m%d" % i for i in range(5)})


def op_flush_memtable(proc: Process, state: State) -> None:
    proc.dbs[0].flush_memtable()


def prepare_unacked(proc: Process, state: State) -> None:
    db = proc.open_db("db", OPTS)
    write(db, state.model, {key(40): b"u40", key(1): None}, durable=False)
    write(db, state.model, {key(41): b"u41"}, durable=False)


def op_close(proc: Process, state: State) -> None:
    proc.dbs[0].close()
    ack(state.model)


def op_db_checkpoint(proc: Process, state: State) -> None:
    proc.dbs[0].create_checkpoint()
    ack(state.model)


def op_bulk_ingest(proc: Process, state: State) -> None:
    keys = [key(i) for i in range(0, 60, 2)]
    table = pa.table(
        {"key": pa.array(keys, pa.binary()), "value": pa.array([b"bulk"] * len(keys), pa.binary())}
    )
    state.model.maybe.update(dict.fromkeys(keys, b"bulk"))
    proc.dbs[0].bulk_ingest(table)
    ack(state.model)


def op_clone_projected(proc: Process, state: State) -> None:
    create_clone("clone", "db", proc.store, state.checkpoint, PROJECTION)


def op_gc_clone(proc: Process, state: State) -> None:
    gc(proc.store, "clone")


def op_compaction(proc: Process, state: State) -> None:
    assert run_compaction_once("db", proc.store, COMPACT) is not None


def op_gc(proc: Process, state: State) -> None:
    gc(proc.store, "db")


def op_checkpoint_create(proc: Process, state: State) -> None:
    create_checkpoint("db", proc.store, CheckpointOptions(lifetime=HOUR, name="crash"))


def op_checkpoint_delete(proc: Process, state: State) -> None:
    assert state.checkpoint is not None
    delete_checkpoint("db", proc.store, state.checkpoint)


def op_clone(proc: Process, state: State) -> None:
    create_clone("clone", "db", proc.store)


def op_union(proc: Process, state: State) -> None:
    create_union("merged", state.sources, proc.store)


def op_destroy_soft(proc: Process, state: State) -> None:
    destroy("db", proc.store, soft=True)


def op_destroy_hard(proc: Process, state: State) -> None:
    destroy("db", proc.store, soft=False)


# ---- recoveries -----------------------------------------------------------------------------
def recover_db(store: ObjectStore, state: State, outcome: Outcome) -> None:
    """The database opens with every acknowledged write; invariants hold; work goes on."""
    check_database(store, "db", at_least=state.epochs.get("db"))
    verify(store, "db", state.model, "after the crash")
    rest_of_workload(store, "db", state.model)


def recover_compaction(store: ObjectStore, state: State, outcome: Outcome) -> None:
    check_database(store, "db", at_least=state.epochs.get("db"))
    run_compaction_once("db", store, COMPACT)  # the retry: may find the work already done
    verify(store, "db", state.model, "after the compaction retry")
    rest_of_workload(store, "db", state.model)


def recover_gc(store: ObjectStore, state: State, outcome: Outcome) -> None:
    check_database(store, "db", at_least=state.epochs.get("db"))
    verify(store, "db", state.model, "after the crash")
    gc(store, "db")  # the retry
    check_database(store, "db")
    rest_of_workload(store, "db", state.model)


def _checkpoints(store: ObjectStore, name: str) -> list[uuid.UUID]:
    m = ManifestStore(store, "db").read_latest().manifest
    return [c.id for c in m.checkpoints if c.name == name]


def recover_checkpoint_create(store: ObjectStore, state: State, outcome: Outcome) -> None:
    check_database(store, "db", at_least=state.epochs.get("db"))
    before = set(_checkpoints(store, "crash"))
    result = create_checkpoint("db", store, CheckpointOptions(lifetime=HOUR, name="crash"))
    assert set(_checkpoints(store, "crash")) == before | {result.id}
    ManifestStore(store, "db").read(result.manifest_id)
    recover_db(store, state, outcome)


def recover_checkpoint_delete(store: ObjectStore, state: State, outcome: Outcome) -> None:
    assert state.checkpoint is not None
    check_database(store, "db", at_least=state.epochs.get("db"))
    try:
        delete_checkpoint("db", store, state.checkpoint)
    except CheckpointNotFound:
        assert outcome.died, "the checkpoint vanished although nobody deleted it"
    assert _checkpoints(store, "doomed") == []
    recover_db(store, state, outcome)


def _unfinished(store: ObjectStore, path: str) -> None:
    """A database the crash left half-made must refuse writers, not open half-empty."""
    stored = ManifestStore(store, path).try_read_latest()
    if stored is not None and not stored.manifest.initialized:
        with pytest.raises(DatabaseNotInitialized):
            Db.open(path, store, OPTS)


def recover_clone(store: ObjectStore, state: State, outcome: Outcome) -> None:
    check_database(store, "db", at_least=state.epochs.get("db"))
    _unfinished(store, "clone")
    create_clone("clone", "db", store)  # the retry finishes (or returns) the clone
    check_database(store, "clone")
    clone_model = copy.deepcopy(state.model)
    verify(store, "clone", clone_model, "the clone")
    verify(store, "db", state.model, "the parent after the clone")
    rest_of_workload(store, "db", state.model)  # GC of the parent keeps what the clone uses
    rest_of_workload(store, "clone", clone_model)


def recover_union(store: ObjectStore, state: State, outcome: Outcome) -> None:
    _unfinished(store, "merged")
    create_union("merged", state.sources, store)
    for path in ("db", "shard0", "shard1", "merged"):
        check_database(store, path)
    verify(store, "merged", state.model, "the union")
    rest_of_workload(store, "merged", state.model)
    for src in state.sources:
        gc(store, src.path)
    verify(store, "merged", state.model, "the union after GC of its sources")
    assert content(store, "db") == state.expected["db"]


def recover_clone_projected(store: ObjectStore, state: State, outcome: Outcome) -> None:
    assert state.checkpoint is not None
    check_database(store, "db", at_least=state.epochs.get("db"))
    _unfinished(store, "clone")
    create_clone("clone", "db", store, state.checkpoint, PROJECTION)
    check_database(store, "clone")
    clone_model = Model(acked=dict(state.expected["clone"]))
    verify(store, "clone", clone_model, "the projected clone")
    delete_checkpoint("db", store, state.checkpoint)  # the clone holds a final checkpoint
    rest_of_workload(store, "db", state.model)
    verify(store, "clone", clone_model, "the projected clone after GC of its parent")


def assert_tombstone_only(store: ObjectStore, path: str) -> None:
    """A destroyed, collected database: only its four boundary files, at their tombstone values
    (docs/clones-and-destroy.md; the WAL's may keep its lease, docs/gc-and-boundaries.md "The
    boundary lease"), and opening the path is refused."""
    left = {m.path: store.get(m.path).data for m in store.list(path + "/")}
    wal = f"{path}/gc/wal.boundary"
    if wal in left and left[wal].count(b" ") == 1:
        left[wal] = left[wal].split(b" ")[0]  # "<u64> <lease ms>"
    assert left == {
        f"{path}/gc/{name}.boundary": str(value).encode()
        for name, value in (
            ("manifest", TOMBSTONE),
            ("compactions", TOMBSTONE),
            ("wal", TOMBSTONE),
            ("compacted", ULID_MS_TOMBSTONE),
        )
    }, left
    with pytest.raises(DatabaseDestroyed):
        Db.open(path, store, OPTS)


def recover_gc_destroyed(store: ObjectStore, state: State, outcome: Outcome) -> None:
    stored = ManifestStore(store, "db").try_read_latest()
    if stored is not None:
        assert stored.manifest.destroyed_at_s is not None
        with pytest.raises(DatabaseDestroyed):
            Db.open("db", store, OPTS)
    gc(store, "db")  # the retry finishes the deletion
    assert_tombstone_only(store, "db")


def recover_gc_clone(store: ObjectStore, state: State, outcome: Outcome) -> None:
    check_database(store, "clone", at_least=state.epochs.get("clone"))
    check_database(store, "db")
    gc(store, "clone")  # the retry completes the detach
    assert ManifestStore(store, "clone").read_latest().manifest.external_dbs == ()
    verify(store, "clone", state.model, "the detached clone")
    parent = Model(acked=dict(state.expected["db"]))
    rest_of_workload(store, "db", parent)  # the parent's GC may now drop what the clone used
    rest_of_workload(store, "clone", state.model)


def _destroyed(store: ObjectStore) -> bool:
    stored = ManifestStore(store, "db").try_read_latest()
    return stored is not None and stored.manifest.destroyed_at_s is not None


def recover_destroy_soft(store: ObjectStore, state: State, outcome: Outcome) -> None:
    check_database(store, "db", at_least=state.epochs.get("db"))
    if not _destroyed(store):
        verify(store, "db", state.model, "not yet destroyed")  # also opens a writer: fenced next
    destroy("db", store, soft=True)
    assert _destroyed(store)
    with pytest.raises(DatabaseDestroyed):
        Db.open("db", store, OPTS)
    check_database(store, "db")
    gc(store, "db")  # grace 0, no checkpoints: the GC deletes it all
    assert_tombstone_only(store, "db")


def recover_destroy_hard(store: ObjectStore, state: State, outcome: Outcome) -> None:
    stored = ManifestStore(store, "db").try_read_latest()
    if stored is not None and stored.manifest.destroyed_at_s is None:
        check_database(store, "db", at_least=state.epochs.get("db"))
        verify(store, "db", state.model, "not yet destroyed")
    elif stored is not None:
        with pytest.raises(DatabaseDestroyed):
            Db.open("db", store, OPTS)
    try:
        destroy("db", store, soft=False)
    except DatabaseNotFound:
        assert outcome.died and stored is None, "the database vanished before its destroy ran"
    assert_tombstone_only(store, "db")


# ---- the table ------------------------------------------------------------------------------
Setup = Callable[[ObjectStore], State]
Body = Callable[[Process, State], None]
Recover = Callable[[ObjectStore, State, Outcome], None]


@dataclass(frozen=True)
class Scenario:
    name: str
    setup: Setup
    operation: Body
    recover: Recover
    prepare: Body | None = None
    roots: dict[str, str] = field(default_factory=lambda: {"db": ""})
    ordered: bool = True  # False: calls of different kinds may interleave differently per run


_TWO = {"db": "db", "clone": "clone"}
_UNION = {"db": "db", "shard0": "shard0", "shard1": "shard1", "merged": "merged"}

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in [
        Scenario("open", setup_base, op_open, recover_db),
        # the writer's boundary lease read runs beside its WAL creates (slatedb_core/meta/lease.py)
        Scenario("put", setup_base, op_put, recover_db, open_writer, ordered=False),
        Scenario("open_parallel", setup_base, op_open_parallel, recover_db),
        Scenario(
            "put_parallel",
            setup_base,
            op_put_parallel,
            recover_db,
            open_parallel_writer,
            ordered=False,
        ),
        Scenario(
            "flush_memtable", setup_base, op_flush_memtable, recover_db, prepare_flush_memtable
        ),
        Scenario("close", setup_base, op_close, recover_db, prepare_unacked),
        Scenario("db_checkpoint", setup_base, op_db_checkpoint, recover_db, prepare_unacked),
        Scenario("bulk_ingest", setup_base, op_bulk_ingest, recover_db, open_writer),
        Scenario("compaction", setup_compaction, op_compaction, recover_compaction),
        Scenario("gc", setup_gc, op_gc, recover_gc),
        Scenario("checkpoint_create", setup_base, op_checkpoint_create, recover_checkpoint_create),
        Scenario(
            "checkpoint_delete",
            setup_checkpoint_delete,
            op_checkpoint_delete,
            recover_checkpoint_delete,
        ),
        Scenario("clone", setup_base, op_clone, recover_clone, roots=_TWO),
        Scenario(
            "clone_projected",
            setup_projected,
            op_clone_projected,
            recover_clone_projected,
            roots=_TWO,
        ),
        Scenario("gc_destroyed", setup_destroyed, op_gc, recover_gc_destroyed),
        Scenario("gc_detach", setup_detach, op_gc_clone, recover_gc_clone, roots=_TWO),
        Scenario("union", setup_union, op_union, recover_union, roots=_UNION),
        Scenario("destroy_soft", setup_base, op_destroy_soft, recover_destroy_soft),
        Scenario("destroy_hard", setup_base, op_destroy_hard, recover_destroy_hard, ordered=False),
    ]
}

__all__ = ["SCENARIOS", "Model", "ProcessKilled", "Scenario", "State"]
