"""Wrong types and out-of-range durations in options and arguments are ``InvalidArgument`` naming
the field or argument, raised before anything is written (the harness of ``test_bad_input``):
they used to escape as raw TypeError/AttributeError/ValueError, and ``flush_interval=999999999
days`` killed the WAL thread with OverflowError. Durations are bounded by ``MAX_DURATION``."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest

from slatedb_core import (
    CheckpointOptions,
    CheckpointScope,
    Compactor,
    CompactorOptions,
    Db,
    DbOptions,
    DbReader,
    DbReaderOptions,
    GarbageCollector,
    GarbageCollectorOptions,
    ObjectStore,
    Table,
    TableOptions,
    TableSnapshot,
    UnionSource,
    admin,
    open_store,
    run_compaction_once,
    run_gc_once,
)
from slatedb_core.checkpoints import create_checkpoint, list_checkpoints, refresh_checkpoint
from slatedb_core.errors import InvalidArgument
from slatedb_core.lifecycle.destroy import destroy
from tests.core.bad_input_steps import GOOD, TABLE, Lake, good_lake, run_cases

IA = InvalidArgument


MAX_DURATION = timedelta(days=365)  # slatedb_core.durations.MAX_DURATION (checked below)


OVER = MAX_DURATION + timedelta(microseconds=1)


@pytest.fixture
def lake(store: ObjectStore) -> Iterator[Lake]:
    with good_lake(store) as it:
        yield it


# ---- item 14: options -----------------------------------------------------------------------
OPTION_CASES: list[tuple[str, Callable[[], object]]] = [
    # (the field the message must name, the construction)
    ("poll_interval", lambda: CompactorOptions(poll_interval=5)),  # type: ignore[arg-type]
    ("l0_trigger", lambda: CompactorOptions(l0_trigger="4")),  # type: ignore[arg-type]
    ("l0_trigger", lambda: CompactorOptions(l0_trigger=True)),
    ("max_sst_size_bytes", lambda: CompactorOptions(max_sst_size_bytes=1.5)),  # type: ignore[arg-type]
    ("min_merge_width", lambda: CompactorOptions(min_merge_width=None)),  # type: ignore[arg-type]
    ("size_ratio", lambda: CompactorOptions(size_ratio="2")),  # type: ignore[arg-type]
    ("size_ratio", lambda: CompactorOptions(size_ratio=float("nan"))),
    ("size_ratio", lambda: CompactorOptions(size_ratio=float("inf"))),
    ("max_sorted_runs", lambda: CompactorOptions(max_sorted_runs="12")),  # type: ignore[arg-type]
    ("bloom_bits_per_key", lambda: CompactorOptions(bloom_bits_per_key=-1)),
    ("compression", lambda: CompactorOptions(compression=1)),  # type: ignore[arg-type]
    ("block_size", lambda: CompactorOptions(block_size="4096")),  # type: ignore[arg-type]
    ("min_age", lambda: GarbageCollectorOptions(min_age=5)),  # type: ignore[arg-type]
    ("db_delete_grace", lambda: GarbageCollectorOptions(db_delete_grace=3600)),  # type: ignore[arg-type]
    ("wal_min_age", lambda: GarbageCollectorOptions(wal_min_age="1h")),  # type: ignore[arg-type]
    ("compacted_min_age", lambda: GarbageCollectorOptions(compacted_min_age=0)),  # type: ignore[arg-type]
    ("interval", lambda: GarbageCollectorOptions(interval=60.0)),  # type: ignore[arg-type]
    ("manifest_poll_interval", lambda: DbReaderOptions(manifest_poll_interval=1)),  # type: ignore[arg-type]
    ("checkpoint_lifetime", lambda: DbReaderOptions(checkpoint_lifetime=600)),  # type: ignore[arg-type]
    ("max_memtable_bytes", lambda: DbReaderOptions(max_memtable_bytes="64")),  # type: ignore[arg-type]
    ("block_cache_bytes", lambda: DbReaderOptions(block_cache_bytes=-1)),
    ("block_cache_bytes", lambda: DbReaderOptions(block_cache_bytes=True)),
    ("mode", lambda: DbReaderOptions(mode="managed")),  # type: ignore[arg-type]
    ("fence_attempts", lambda: TableOptions(fence_attempts="5")),  # type: ignore[arg-type]
    ("fence_attempts", lambda: TableOptions(fence_attempts=True)),
    ("map_commit_attempts", lambda: TableOptions(map_commit_attempts=2.0)),  # type: ignore[arg-type]
    ("TableOptions.writer", lambda: TableOptions(writer=DbReaderOptions())),  # type: ignore[arg-type]
    ("compactor", lambda: DbOptions(compactor="yes")),  # type: ignore[arg-type]
    ("compactor", lambda: DbOptions(compactor=GarbageCollectorOptions())),  # type: ignore[arg-type]
    ("flush_interval", lambda: DbOptions(flush_interval=0.1)),  # type: ignore[arg-type]
    ("l0_max_ssts", lambda: DbOptions(l0_max_ssts=True)),
    ("block_size", lambda: DbOptions(block_size="64k")),  # type: ignore[arg-type]
    ("compression", lambda: DbOptions(compression=["lz4"])),  # type: ignore[arg-type]
    ("max_parallel_writes", lambda: DbOptions(max_parallel_writes=2.0)),  # type: ignore[arg-type]
    ("checkpoint lifetime", lambda: CheckpointOptions(lifetime=60)),  # type: ignore[arg-type]
]


# ---- item 15: every duration is bounded -----------------------------------------------------
DURATIONS: list[tuple[str, Callable[[timedelta], object], bool]] = [
    # (field, construct with the value, whether 0 is meaningful)
    ("flush_interval", lambda d: DbOptions(flush_interval=d), False),
    ("manifest_poll_interval", lambda d: DbOptions(manifest_poll_interval=d), False),
    ("poll_interval", lambda d: CompactorOptions(poll_interval=d), False),
    ("min_age", lambda d: GarbageCollectorOptions(min_age=d), True),
    ("db_delete_grace", lambda d: GarbageCollectorOptions(db_delete_grace=d), True),
    ("manifest_min_age", lambda d: GarbageCollectorOptions(manifest_min_age=d), True),
    ("wal_min_age", lambda d: GarbageCollectorOptions(wal_min_age=d), True),
    ("compacted_min_age", lambda d: GarbageCollectorOptions(compacted_min_age=d), True),
    ("compactions_min_age", lambda d: GarbageCollectorOptions(compactions_min_age=d), True),
    ("interval", lambda d: GarbageCollectorOptions(interval=d), False),
    (
        "manifest_poll_interval",
        lambda d: DbReaderOptions(manifest_poll_interval=d, checkpoint_lifetime=None),
        False,
    ),
    (
        "checkpoint_lifetime",
        lambda d: DbReaderOptions(
            checkpoint_lifetime=d, manifest_poll_interval=timedelta.resolution
        ),
        False,
    ),
    ("checkpoint lifetime", lambda d: CheckpointOptions(lifetime=d), False),
]


@pytest.mark.parametrize(("field", "make"), OPTION_CASES)
def test_options_of_the_wrong_type_are_invalid_argument_naming_the_field(
    field: str, make: Callable[[], object]
) -> None:
    """Found by the review of RELIABILITY.md, items 14-17 (was test_bad_input_review.py)."""
    with pytest.raises(InvalidArgument, match=field):
        make()


def test_numpy_integers_are_counts_but_bools_are_not() -> None:
    """Found by the review of RELIABILITY.md, items 14-17 (was test_bad_input_review.py)."""
    np = pytest.importorskip("numpy")
    opts = CompactorOptions(l0_trigger=np.int64(3))
    assert opts.l0_trigger == 3 and type(opts.l0_trigger) is int
    with pytest.raises(InvalidArgument, match="l0_trigger"):
        CompactorOptions(l0_trigger=np.bool_(True))


@pytest.mark.parametrize(("field", "make", "zero_ok"), DURATIONS)
def test_every_duration_is_bounded_by_a_year(
    field: str, make: Callable[[timedelta], object], zero_ok: bool
) -> None:
    """Found by the review of RELIABILITY.md, items 14-17 (was test_bad_input_review.py)."""
    make(MAX_DURATION)  # the maximum itself is accepted
    make(timedelta(microseconds=3))
    with pytest.raises(InvalidArgument, match=f"{field} must be at most 1y"):
        make(OVER)
    with pytest.raises(InvalidArgument, match=field):
        make(timedelta(days=999_999_999))
    with pytest.raises(InvalidArgument, match=field):
        make(timedelta(microseconds=-1))
    if zero_ok:
        make(timedelta(0))
    else:
        with pytest.raises(InvalidArgument, match=f"{field} must be > 0"):
            make(timedelta(0))


def test_the_duration_bound_is_one_a_background_thread_can_wait() -> None:
    """Beyond ``threading.TIMEOUT_MAX`` an ``Event.wait`` raises OverflowError: that is what
    killed the WAL thread. A writer with the longest flush interval still makes durable writes.

    Found by the review of RELIABILITY.md, items 14-17 (was test_bad_input_review.py)."""
    from slatedb_core.durations import MAX_DURATION as documented

    assert documented == MAX_DURATION
    assert MAX_DURATION.total_seconds() < threading.TIMEOUT_MAX
    store_ = open_store(f"memory://review-{uuid.uuid4().hex}")
    with Db.open("d", store_, DbOptions(flush_interval=MAX_DURATION)) as db:
        db.put(b"k", b"v")  # await_durable: must not wait for the interval
        assert db.get(b"k") == b"v"
    with DbReader.open("d", store_) as reader:
        assert reader.get(b"k") == b"v"


# ---- item 14: arguments ---------------------------------------------------------------------
def test_arguments_of_the_wrong_type_are_invalid_argument_and_write_nothing(
    lake: tuple[ObjectStore, uuid.UUID, Db, Table],
) -> None:
    """Found by the review of RELIABILITY.md, items 14-17 (was test_bad_input_review.py)."""
    store, cp, db, table = lake
    reader = DbReader.open(GOOD, store, cp)
    cases: list[tuple[str, Callable[[], object]]] = [
        ("manifest_id", lambda: admin.read_manifest(store, GOOD, "1")),  # type: ignore[arg-type]
        ("manifest_id", lambda: admin.read_manifest(store, GOOD, True)),
        ("manifest_id", lambda: admin.read_manifest(store, GOOD, 0)),
        ("start", lambda: admin.list_manifests(store, GOOD, 1.0)),  # type: ignore[arg-type]
        ("manifest", lambda: admin.create_database_metadata(store, "new", 5)),  # type: ignore[arg-type]
        ("store", lambda: admin.read_manifest("memory://", GOOD)),  # type: ignore[arg-type]
        ("checkpoint lifetime", lambda: refresh_checkpoint(GOOD, store, cp, lifetime=60)),  # type: ignore[arg-type]
        ("checkpoint lifetime", lambda: refresh_checkpoint(GOOD, store, cp, lifetime=OVER)),
        ("checkpoint lifetime", lambda: refresh_checkpoint(GOOD, store, cp, lifetime=timedelta(0))),
        ("checkpoint options", lambda: create_checkpoint(GOOD, store, 5)),  # type: ignore[arg-type]
        ("name", lambda: list_checkpoints(GOOD, store, name=5)),  # type: ignore[arg-type]
        ("store", lambda: Db.open(GOOD, "memory://")),  # type: ignore[arg-type]
        ("options", lambda: Db.open(GOOD, store, 5)),  # type: ignore[arg-type]
        ("options", lambda: Db.open(GOOD, store, DbReaderOptions())),  # type: ignore[arg-type]
        ("store", lambda: DbReader.open(GOOD, None)),  # type: ignore[arg-type]
        ("options", lambda: DbReader.open(GOOD, store, None, DbOptions())),  # type: ignore[arg-type]
        # a str scope used to be taken silently as DURABLE (no flush)
        ("scope", lambda: db.create_checkpoint("all")),  # type: ignore[arg-type]
        ("options", lambda: db.create_checkpoint(CheckpointScope.ALL, 5)),  # type: ignore[arg-type]
        ("batch_size", lambda: db.scan_arrow(batch_size="10")),  # type: ignore[arg-type]
        ("batch_size", lambda: db.scan_arrow(batch_size=True)),
        ("batch_size", lambda: db.scan_arrow(batch_size=1.5)),  # type: ignore[arg-type]
        ("batch_size", lambda: db.scan_arrow(batch_size=0)),
        ("keys", lambda: db.get_many(None)),  # type: ignore[arg-type]
        ("keys", lambda: db.get_many(b"k1")),  # type: ignore[arg-type]
        ("batch_size", lambda: reader.scan_arrow(batch_size="10")),  # type: ignore[arg-type]
        ("keys", lambda: reader.get_many(None)),  # type: ignore[arg-type]
        ("keys", lambda: reader.get_many(5)),  # type: ignore[arg-type]
        ("batch_size", lambda: table.scan_arrow(batch_size="10")),  # type: ignore[arg-type]
        ("keys", lambda: table.get_many(None)),  # type: ignore[arg-type]
        ("keys", lambda: table.route(None)),
        ("shard_index", lambda: table.merge("0")),  # type: ignore[arg-type]
        ("shard_index", lambda: table.merge(False)),
        ("expected_map_id", lambda: table.merge(0, expected_map_id="1")),  # type: ignore[arg-type]
        ("options", lambda: table.writer(0, 5)),  # type: ignore[arg-type]
        ("snapshot", lambda: table.release_snapshot("x")),  # type: ignore[arg-type]
        ("checkpoint lifetime", lambda: table.snapshot(3600)),  # type: ignore[arg-type]
        ("min_age", lambda: table.collect_garbage(60)),  # type: ignore[arg-type]
        ("min_age", lambda: table.collect_garbage(timedelta(seconds=-1))),
        ("ingest_min_age", lambda: table.collect_garbage(timedelta(0), 60)),  # type: ignore[arg-type]
        ("ingest_min_age", lambda: table.collect_garbage(timedelta(0), OVER)),
        ("options", lambda: Table.create("t2", store, [], 5)),  # type: ignore[arg-type]
        ("split_points", lambda: Table.create("t2", store, None)),  # type: ignore[arg-type]
        ("store", lambda: Table.create("t2", "memory://")),  # type: ignore[arg-type]
        ("options", lambda: Table.open(TABLE, store, 5)),  # type: ignore[arg-type]
        ("snapshot", lambda: Table.open(TABLE, store, snapshot="x")),  # type: ignore[arg-type]
        ("store", lambda: Table.open(TABLE, None)),  # type: ignore[arg-type]
    ]
    try:
        run_cases(store, [(f"{i}: {field}", call, IA) for i, (field, call) in enumerate(cases)])
        for field, call in cases:  # and each message names what was wrong
            with pytest.raises(InvalidArgument) as info:
                call()
            assert field in str(info.value), (field, str(info.value))
    finally:
        reader.close()
    assert db.get(b"k2") == b"v2" and table.get(b"k1") is None


def test_maintenance_entry_points_check_their_arguments_before_any_request(
    lake: tuple[ObjectStore, uuid.UUID, Db, Table],
) -> None:
    """A Compactor given options of the wrong type used to take over the compactor epoch (a
    manifest write) before failing with AttributeError; GC, clone and union failed raw.

    Found by the review of RELIABILITY.md, items 14-17 (was test_bad_input_review.py)."""
    store, _, _, _ = lake
    cases: list[tuple[str, Callable[[], object]]] = [
        ("options", lambda: run_gc_once(GOOD, store, 5)),  # type: ignore[arg-type]
        ("options", lambda: GarbageCollector(GOOD, store, CompactorOptions())),  # type: ignore[arg-type]
        ("store", lambda: run_gc_once(GOOD, "memory://")),  # type: ignore[arg-type]
        ("options", lambda: run_compaction_once(GOOD, store, 5)),  # type: ignore[arg-type]
        ("options", lambda: Compactor(GOOD, store, GarbageCollectorOptions())),  # type: ignore[arg-type]
        ("store", lambda: Compactor(GOOD, None)),  # type: ignore[arg-type]
        ("store", lambda: admin.create_clone("c", GOOD, None)),  # type: ignore[arg-type]
        ("sources", lambda: admin.create_union("u", None, store)),  # type: ignore[arg-type]
        ("store", lambda: admin.create_union("u", [UnionSource(GOOD)], None)),  # type: ignore[arg-type]
        ("soft", lambda: destroy(GOOD, store, "yes")),  # type: ignore[arg-type]
    ]
    run_cases(store, [(f"{i}: {field}", call, IA) for i, (field, call) in enumerate(cases)])
    for field, call in cases:
        with pytest.raises(InvalidArgument, match=field):
            call()


@pytest.mark.parametrize("soft", [None, 0, ""])
def test_a_falsy_soft_is_not_a_hard_destroy(
    lake: tuple[ObjectStore, uuid.UUID, Db, Table], soft: object
) -> None:
    """``destroy(path, store, None)`` used to delete every object of the database at once.

    Found by the review of RELIABILITY.md, items 14-17 (was test_bad_input_review.py)."""
    store, _, db, _ = lake
    run_cases(store, [("destroy", lambda: destroy(GOOD, store, soft), IA)])  # type: ignore[arg-type]
    assert db.get(b"k1") == b"v1"
    assert admin.read_manifest(store, GOOD).manifest.destroyed_at_s is None


def test_well_typed_arguments_still_work(lake: tuple[ObjectStore, uuid.UUID, Db, Table]) -> None:
    """The checks accept what the signatures promise (and numpy integers where Table did).

    Found by the review of RELIABILITY.md, items 14-17 (was test_bad_input_review.py)."""
    store, cp, db, table = lake
    assert admin.read_manifest(store, GOOD, 1).id == 1
    assert db.get_many((b"k1", b"k2")) == [b"v1", b"v2"]
    assert db.get_many(iter([b"k1"])) == [b"v1"]  # type: ignore[arg-type]
    assert db.scan_arrow(batch_size=1).read_all().num_rows == 2
    refreshed = refresh_checkpoint(GOOD, store, cp, lifetime=MAX_DURATION)
    assert refreshed.expire_time_s is not None
    snap = table.snapshot(timedelta(minutes=5))
    assert isinstance(snap, TableSnapshot)
    table.release_snapshot(snap)
    assert table.get_many([b"a", b"z"]) == [None, None]
    table.collect_garbage(timedelta(0), timedelta(0))


def test_await_durable_must_be_a_bool(lake: Lake) -> None:
    """``await_durable="no"`` used to wait (a truthy string) and ``await_durable=None`` to
    acknowledge a write before it was durable: every write refuses a non-bool, having written
    nothing (issue 41/42 adversarial review)."""
    import pyarrow as pa

    from slatedb_core import WriteBatch

    store, _, db, _ = lake
    batch = WriteBatch()
    batch.put(b"b", b"v")
    rows = pa.table({"key": [b"a"], "value": [b"v"]})
    cases = []
    for flag in ("no", None, 0, 1.0):
        cases += [
            (f"put {flag!r}", lambda f=flag: db.put(b"a", b"v", await_durable=f), IA),
            (f"put ttl {flag!r}", lambda f=flag: db.put(b"a", b"v", ttl=5, await_durable=f), IA),
            (f"delete {flag!r}", lambda f=flag: db.delete(b"a", await_durable=f), IA),
            (f"write {flag!r}", lambda f=flag: db.write(batch, await_durable=f), IA),
            (f"put_arrow {flag!r}", lambda f=flag: db.put_arrow(rows, await_durable=f), IA),
        ]
    run_cases(store, cases)  # type: ignore[arg-type]
    assert db.get(b"a") is None and db.get(b"b") is None
