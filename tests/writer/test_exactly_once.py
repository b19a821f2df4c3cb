"""Exactly-once batches (an app id and a batch version, the idea of Delta Lake's transaction
identifiers): the manifest record (``Manifest.transactions``), ``Db.ingest_ssts(txn=)`` and
``Db.record_transactions``, and the table ingest's per-shard decision (``plan_ingest(txn=)``,
``commit_shard``, ``table_app_versions``, ``check_txn``)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from slatedb_core.errors import (
    CorruptionError,
    Fenced,
    InjectedFault,
    InvalidArgument,
    ShardMapConflict,
)
from slatedb_core.layout import ingest_done_marker
from slatedb_core.manifest.codec import decode_manifest, encode_manifest
from slatedb_core.manifest.model import AppVersion, Manifest, merge_transactions
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CheckpointOptions, DbOptions
from slatedb_core.sst import ENTRY_SCHEMA, KIND_VALUE, encode_sst
from slatedb_core.store.checksum import crc32
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.table import Table, check_txn, table_app_versions
from slatedb_core.table.ingest import (
    SKIPPED,
    WRITTEN,
    IngestPlan,
    ShardIngestStats,
    StagedSst,
    attempt_dir,
    commit_shard,
    plan_ingest,
    stage_ssts,
)
from slatedb_core.testing import FaultyStore
from slatedb_core.writer.db import Db
from slatedb_core.writer.types import BulkIngestStats

FAST = DbOptions(
    flush_interval=timedelta(milliseconds=10), manifest_poll_interval=timedelta(milliseconds=200)
)
LINKED = 1 << 40
"""A seq above every test writer's: sources staged at it are copied as they are."""


@pytest.fixture
def local(tmp_path: Path) -> ObjectStore:
    return open_store((tmp_path / "store").as_uri())


def put_sst(
    store: ObjectStore, name: str, keys: Sequence[bytes], value: bytes, seq: int = 1
) -> str:
    keys = sorted(keys)
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array([seq] * len(keys), pa.uint64()),
            pa.array([KIND_VALUE] * len(keys), pa.uint8()),
            pa.array([value] * len(keys), pa.binary()),
        ],
        schema=ENTRY_SCHEMA,
    )
    path = f"staging/{name}.sst"
    store.put(path, encode_sst(batch)[0])
    return path


def compacted(store: ObjectStore, db: str = "db") -> list[str]:
    return [m.path for m in store.list(f"{db}/compacted")]


# ---- the manifest record ----------------------------------------------------------------------
def test_transactions_round_trip_through_the_codec() -> None:
    records = merge_transactions(
        (),
        [
            AppVersion("b", 3),
            AppVersion("a", 0),
            AppVersion("b", 2),
            AppVersion("é" * 256, (1 << 63) - 1),
        ],
    )
    assert [t.app_id for t in records] == ["a", "b", "é" * 256]
    m = Manifest(transactions=records)
    back = decode_manifest(encode_manifest(m), name="m")
    assert back == m and back.app_version("b") == 3 and back.app_version("c") is None
    assert decode_manifest(encode_manifest(Manifest()), name="m").transactions == ()
    with pytest.raises(InvalidArgument, match="sorted by app id"):
        encode_manifest(Manifest(transactions=(AppVersion("b", 1), AppVersion("a", 1))))


def test_a_record_out_of_range_is_corruption() -> None:
    """A version past 2**63 (which our encoder never writes), with a valid CRC, is refused."""
    data = bytearray(
        encode_manifest(Manifest(transactions=(AppVersion("app", 0x0102030405060708),)))
    )
    # our CRC field: the 4 bytes holding the CRC of the object with them zeroed
    at_crc = next(
        i
        for i in range(len(data) - 3)
        if int.from_bytes(data[i : i + 4], "little")
        == crc32(bytes(data[:i]) + bytes(4) + bytes(data[i + 4 :]))
    )
    at = bytes(data).index((0x0102030405060708).to_bytes(8, "little"))
    data[at + 7] = 0xFF
    data[at_crc : at_crc + 4] = bytes(4)
    data[at_crc : at_crc + 4] = crc32(bytes(data)).to_bytes(4, "little")
    with pytest.raises(CorruptionError, match="version must be an int in"):
        decode_manifest(bytes(data), name="m")


@pytest.mark.parametrize(
    ("app_id", "version", "match"),
    [
        (None, 1, "batch_version needs app_id"),
        ("app", None, "app_id needs batch_version"),
        ("", 1, "app_id must be 1 to 256"),
        ("x" * 257, 1, "app_id must be 1 to 256"),
        (7, 1, "app_id must be a str"),
        ("app", "1", "batch_version must be an int"),
        ("app", True, "batch_version must be an int"),
        ("app", 1.0, "batch_version must be an int"),
        ("app", -1, r"batch_version must be in \[0, 2\*\*63\)"),
        ("app", 1 << 63, r"batch_version must be in \[0, 2\*\*63\)"),
    ],
)
def test_check_txn_names_the_bad_option(app_id: object, version: object, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        check_txn(app_id, version)


def test_check_txn_builds_the_record() -> None:
    assert check_txn(None, None) is None
    assert check_txn("a" * 256, (1 << 63) - 1) == AppVersion("a" * 256, (1 << 63) - 1)
    assert check_txn("app", 0) == AppVersion("app", 0)


# ---- Db.ingest_ssts(txn=) -------------------------------------------------------------------
def test_the_same_batch_twice_is_applied_once(local: ObjectStore) -> None:
    first = put_sst(local, "first", [b"a", b"b"], b"1")
    second = put_sst(local, "second", [b"a", b"c"], b"2")  # the re-run carries other values
    with Db.open("db", local, FAST) as db:
        done = db.ingest_ssts([first], txn=AppVersion("loader", 5))
        assert (done.rows, done.already_applied, done.recorded_version) == (2, False, 5)
        assert db.manifest.manifest.app_version("loader") == 5
        objects = compacted(local)
        manifest_id = db.manifest.id
        again = db.ingest_ssts([second], txn=AppVersion("loader", 5))
        assert (again.rows, again.ssts, again.already_applied, again.recorded_version) == (
            0,
            0,
            True,
            5,
        )
        lower = db.ingest_ssts([second], txn=AppVersion("loader", 4))
        assert (lower.already_applied, lower.recorded_version) == (True, 5)
        # nothing committed, nothing copied
        assert db.manifest.id == manifest_id == again.manifest_id
        assert compacted(local) == objects
        assert (db.get(b"a"), db.get(b"b"), db.get(b"c")) == (b"1", b"1", None)
        # a higher version, and another app, apply
        higher = db.ingest_ssts([second], txn=AppVersion("loader", 6))
        assert (higher.already_applied, higher.recorded_version) == (False, 6)
        assert db.get(b"a") == b"2"
        other = db.ingest_ssts([first], txn=AppVersion("other", 1))
        assert not other.already_applied
        assert db.manifest.manifest.transactions == (
            AppVersion("loader", 6),
            AppVersion("other", 1),
        )
        assert db.get(b"a") == b"1"
    # the records are durable: a new writer reads them
    with Db.open("db", local, FAST) as db:
        assert db.ingest_ssts([second], txn=AppVersion("other", 1)).already_applied
        assert db.get(b"a") == b"1"


def test_an_empty_batch_records_its_version(local: ObjectStore) -> None:
    empty = put_sst(local, "empty", [], b"")
    with Db.open("db", local, FAST) as db:
        before = db.manifest.id
        out = db.ingest_ssts(
            [],
            txn=AppVersion("app", 3),
            checkpoint=CheckpointOptions(name="cp", lifetime=timedelta(hours=1)),
        )
        assert (out.rows, out.already_applied, out.recorded_version) == (0, False, 3)
        m = db.manifest.manifest
        assert db.manifest.id == out.manifest_id == before + 1
        assert m.app_version("app") == 3
        assert [c.name for c in m.checkpoints if c.name == "cp"] == ["cp"]
        assert db.ingest_ssts([empty], txn=AppVersion("app", 3)).already_applied
        # without a txn, nothing to ingest commits nothing
        assert db.ingest_ssts([empty]).manifest_id == out.manifest_id == db.manifest.id


def test_record_transactions_keeps_the_highest_version_per_app(local: ObjectStore) -> None:
    with Db.open("db", local, FAST) as db:
        db.record_transactions([AppVersion("a", 5), AppVersion("b", 1)])
        mid = db.manifest.id
        db.record_transactions([AppVersion("a", 3)])  # lower: nothing to commit
        assert db.manifest.id == mid
        db.record_transactions(iter([AppVersion("a", 7), AppVersion("c", 0)]))
        assert db.manifest.manifest.transactions == (
            AppVersion("a", 7),
            AppVersion("b", 1),
            AppVersion("c", 0),
        )
        with pytest.raises(InvalidArgument, match="record_transactions"):
            db.record_transactions(AppVersion("a", 8))  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="records"):
            db.record_transactions([("a", 8)])  # type: ignore[list-item]
        with pytest.raises(InvalidArgument, match="txn"):
            db.ingest_ssts([], txn=("a", 8))  # type: ignore[arg-type]
    assert ManifestStore(local, "db").read_latest().manifest.app_version("a") == 7


def test_racing_ingests_of_one_txn_apply_it_once(local: ObjectStore) -> None:
    """Several threads ingest the same txn with different values into one writer: the
    decision is taken in the commit, so exactly one lands, whole."""
    n = 4
    paths = [
        put_sst(local, f"s{i}", [b"k1", b"k2"], f"v{i}".encode(), seq=LINKED + i) for i in range(n)
    ]
    results: list[object] = [None] * n
    with Db.open("db", local, FAST) as db:
        ssts_before = len(db.manifest.manifest.ssts)
        barrier = threading.Barrier(n)

        def run(i: int) -> None:
            barrier.wait()
            results[i] = db.ingest_ssts([paths[i]], txn=AppVersion("app", 1), seqs=[LINKED + i])

        threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        applied = [
            i
            for i, r in enumerate(results)
            if isinstance(r, BulkIngestStats) and not r.already_applied
        ]
        assert len(applied) == 1
        winner = applied[0]
        assert db.get(b"k1") == db.get(b"k2") == f"v{winner}".encode()
        assert len(db.manifest.manifest.ssts) == ssts_before + 1


def test_the_decision_is_taken_again_in_the_commit(local: ObjectStore) -> None:
    """The up-front check passes for A; B commits the same txn while A copies its source; A's
    commit then finds the record and commits nothing (not its SSTs, not its checkpoint)."""
    a = put_sst(local, "a", [b"k"], b"A")
    b = put_sst(local, "b", [b"k"], b"B")
    faulty = FaultyStore(local)
    pause = faulty.pause("a-opens", "get", a)
    out: list[object] = []
    with Db.open("db", faulty, FAST) as db:
        th = threading.Thread(
            target=lambda: out.append(
                db.ingest_ssts(
                    [a],
                    txn=AppVersion("app", 2),
                    checkpoint=CheckpointOptions(name="a-cp", lifetime=timedelta(hours=1)),
                )
            )
        )
        th.start()
        assert pause.wait_reached()
        assert not db.ingest_ssts([b], txn=AppVersion("app", 2)).already_applied
        pause.release()
        th.join()
        result = out[0]
        assert result.already_applied and result.recorded_version == 2  # type: ignore[attr-defined]
        assert db.get(b"k") == b"B"
        assert all(c.name != "a-cp" for c in db.manifest.manifest.checkpoints)


# ---- the table ingest ------------------------------------------------------------------------
KEYS = [b"a", b"b", b"x", b"y"]


def stage(
    store: ObjectStore, plan: IngestPlan, run_id: str, value: bytes, keys: Sequence[bytes] = KEYS
) -> list[StagedSst]:
    directory = attempt_dir(plan, run_id, partition=0, attempt=0)
    batch = pa.record_batch(
        [pa.array(keys, pa.binary()), pa.array([value] * len(keys), pa.binary())], ["key", "value"]
    )
    return list(stage_ssts(store, plan, directory, 0, [batch], partition=0))


def commit(
    store: ObjectStore,
    plan: IngestPlan,
    run_id: str,
    staged: list[StagedSst],
    index: int,
    attempt: int = 0,
) -> ShardIngestStats:
    mine = [s for s in staged if s.shard.index == index]
    return commit_shard(
        store,
        plan,
        run_id,
        plan.shards[index],
        [s.path for s in mine],
        attempt=attempt,
        seqs=[s.seq for s in mine],
    )


def values(store: ObjectStore) -> dict[bytes, bytes | None]:
    with Table.open("t", store) as t:
        return {k: t.get(k) for k in KEYS}


def test_a_rerun_after_a_partial_failure_completes_exactly_the_missing_shards(
    local: ObjectStore,
) -> None:
    Table.create("t", local, [b"m"]).close()
    txn = AppVersion("loader", 42)
    plan = plan_ingest("t", local, job_id="job-1", txn=txn)
    assert plan.txn == txn
    staged = stage(local, plan, "run", b"1")
    assert commit(local, plan, "run", staged, 0).status == WRITTEN  # shard 1 never committed
    assert table_app_versions(local, "t", "loader") == {0: 42, 1: None}
    # the re-run: a new job id, other values
    rerun = plan_ingest("t", local, job_id="job-2", txn=txn)
    staged2 = stage(local, rerun, "run", b"2")
    s0, s1 = (commit(local, rerun, "run", staged2, i) for i in (0, 1))
    assert s0.status == SKIPPED and s0.rows == 0
    assert "'loader'" in s0.message and "42" in s0.message and "version 42" in s0.message
    assert s1.status == WRITTEN and s1.rows == 2
    assert values(local) == {b"a": b"1", b"b": b"1", b"x": b"2", b"y": b"2"}
    assert table_app_versions(local, "t", "loader") == {0: 42, 1: 42}
    # no marker for a skipped shard: a retry of job 2 decides the same again from the manifest
    assert not local.exists(ingest_done_marker("t", "job-2", plan.shards[0].shard_id))
    assert commit(local, rerun, "run", staged2, 0, attempt=1).status == SKIPPED
    # a third run of the batch, and an older batch, change nothing
    for version in (42, 41):
        old = plan_ingest("t", local, txn=AppVersion("loader", version))
        staged3 = stage(local, old, "run", b"3")
        assert {commit(local, old, "run", staged3, i).status for i in (0, 1)} == {SKIPPED}
    assert values(local) == {b"a": b"1", b"b": b"1", b"x": b"2", b"y": b"2"}


def test_a_shard_whose_commit_failed_is_the_only_one_the_rerun_writes(
    local: ObjectStore,
) -> None:
    Table.create("t", local, [b"m"]).close()
    txn = AppVersion("loader", 7)
    plan = plan_ingest("t", local, txn=txn)
    staged = stage(local, plan, "run", b"1")
    faulty = FaultyStore(local)
    faulty.fail_next("put_if_absent", f"{plan.shards[1].db_path}/manifest/*", times=50)
    assert commit(faulty, plan, "run", staged, 0).status == WRITTEN
    with pytest.raises(InjectedFault):
        commit(faulty, plan, "run", staged, 1)
    assert table_app_versions(local, "t", "loader") == {0: 7, 1: None}
    rerun = plan_ingest("t", local, txn=txn)
    staged2 = stage(local, rerun, "run", b"2")
    statuses = [commit(local, rerun, "run", staged2, i).status for i in (0, 1)]
    assert statuses == [SKIPPED, WRITTEN]
    assert values(local) == {b"a": b"1", b"b": b"1", b"x": b"2", b"y": b"2"}


def test_an_earlier_attempt_of_the_same_job_is_still_reported_as_its_commit(
    local: ObjectStore,
) -> None:
    """The job's own checkpoint and marker come before the txn: a retry of the job reports the
    commit as WRITTEN, not as a batch applied by someone else."""
    Table.create("t", local, []).close()
    plan = plan_ingest("t", local, job_id="job", txn=AppVersion("app", 1))
    staged = stage(local, plan, "run", b"1")
    first = commit(local, plan, "run", staged, 0)
    again = commit(local, plan, "run", staged, 0, attempt=1)
    assert first.status == again.status == WRITTEN and again.rows == first.rows == 4


def test_racing_jobs_of_one_batch_commit_a_shard_once(local: ObjectStore) -> None:
    """Two jobs of the same batch (different job ids, different values) commit one shard at
    once, each retrying when fenced (as Spark retries the task): exactly one writes."""
    Table.create("t", local, []).close()
    txn = AppVersion("app", 9)
    plans = [plan_ingest("t", local, job_id=f"job-{i}", txn=txn) for i in range(3)]
    staged = [stage(local, p, "run", f"v{i}".encode()) for i, p in enumerate(plans)]
    results: list[ShardIngestStats | None] = [None] * len(plans)
    barrier = threading.Barrier(len(plans))

    def run(i: int) -> None:
        # Each attempt's open fences the others: without a pause they can fence each other
        # for a long time (a CI run under load saw 20 attempts each fenced); like Spark's task
        # retries, back off (with jitter) and retry until one wins.
        rng = random.Random(i)
        barrier.wait()
        deadline = time.monotonic() + 120
        attempt = 0
        while time.monotonic() < deadline:
            try:
                results[i] = commit(local, plans[i], "run", staged[i], 0, attempt=attempt)
                return
            except Fenced:
                attempt += 1
                time.sleep(rng.uniform(0, 0.01 * min(attempt, 20)))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(plans))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    statuses = [r.status if r is not None else None for r in results]
    assert sorted(statuses, key=str) == [SKIPPED, SKIPPED, WRITTEN], statuses
    winner = statuses.index(WRITTEN)
    assert set(values(local).values()) == {f"v{winner}".encode()}
    with Table.open("t", local) as t:
        manifest = ManifestStore(local, t.shard_map.shards[0].db_path).read_latest().manifest
    assert len(manifest.ssts) == 1 and manifest.app_version("app") == 9


# ---- rescales keep the records -----------------------------------------------------------------
def test_split_and_merge_keep_the_records(local: ObjectStore) -> None:
    Table.create("t", local, []).close()
    batch3 = plan_ingest("t", local, txn=AppVersion("app", 3))
    assert commit(local, batch3, "run", stage(local, batch3, "run", b"3"), 0).status == WRITTEN
    with Table.open("t", local) as t:
        t.split(0, b"m")
    assert table_app_versions(local, "t", "app") == {0: 3, 1: 3}
    rerun = plan_ingest("t", local, txn=AppVersion("app", 3))
    staged = stage(local, rerun, "run", b"again")
    assert [commit(local, rerun, "run", staged, i).status for i in (0, 1)] == [SKIPPED, SKIPPED]
    # batch 4 reaches shard 0 only, another app shard 1 only: their records differ, so the
    # merge is refused (a merged shard recording either would lose rows or apply them twice:
    # tests/table/test_batch_rerun_after_merge.py); their re-runs write the missing shards
    # only, and batch 3's stays a no-op; then the merge goes through and keeps both
    batch4 = plan_ingest("t", local, txn=AppVersion("app", 4))
    assert commit(local, batch4, "run", stage(local, batch4, "run", b"4"), 0).status == WRITTEN
    other = plan_ingest("t", local, txn=AppVersion("other", 1))
    assert commit(local, other, "run", stage(local, other, "run", b"o"), 1).status == WRITTEN
    with Table.open("t", local) as t, pytest.raises(ShardMapConflict, match="refused"):
        t.merge(0)
    assert table_app_versions(local, "t", "app") == {0: 4, 1: 3}
    for txn, statuses in (
        (AppVersion("app", 3), [SKIPPED, SKIPPED]),
        (AppVersion("app", 4), [SKIPPED, WRITTEN]),
        (AppVersion("other", 1), [WRITTEN, SKIPPED]),
    ):
        again = plan_ingest("t", local, txn=txn)
        value = b"4" if txn.app_id == "app" else b"o"
        staged = stage(local, again, "run", value)
        assert [commit(local, again, "run", staged, i).status for i in (0, 1)] == statuses
    with Table.open("t", local) as t:
        t.merge(0)
    assert table_app_versions(local, "t", "app") == {0: 4}
    assert table_app_versions(local, "t", "other") == {0: 1}
    # shard 0 had batch 4 before the other app's batch, shard 1 after it
    assert values(local) == {k: b"o" if k < b"m" else b"4" for k in KEYS}


def test_a_commit_stalled_before_its_marker_is_this_jobs_not_another_batchs(
    local: ObjectStore,
) -> None:
    """Attempt A of a job with a txn commits a shard and stalls before its done marker. The
    job's next attempt finds A's checkpoint before looking at the txn: it reports A's commit
    (WRITTEN, this run's counts) and settles the marker; another job of the same batch is
    SKIPPED by the txn. Nothing is committed twice."""
    Table.create("t", local, []).close()
    txn = AppVersion("app", 1)
    plan = plan_ingest("t", local, job_id="job", txn=txn)
    staged = stage(local, plan, "run", b"1")
    shard = plan.shards[0]
    faulty = FaultyStore(local)
    marker = ingest_done_marker("t", "job", shard.shard_id)
    pause = faulty.pause("before-marker", "put_if_absent", marker)
    out: list[ShardIngestStats] = []
    th = threading.Thread(target=lambda: out.append(commit(faulty, plan, "run", staged, 0)))
    th.start()
    try:
        assert pause.wait_reached()
        other = plan_ingest("t", local, job_id="other", txn=txn)
        skipped = commit(local, other, "run", stage(local, other, "run", b"2"), 0)
        assert skipped.status == SKIPPED and "batch 1" in skipped.message
        second = commit(local, plan, "run", staged, 0, attempt=1)
        assert second.status == WRITTEN and second.rows == 4
        assert second.message == "committed by an earlier attempt of this run"
    finally:
        pause.release()
        th.join()
    assert out[0].status == WRITTEN
    manifest = ManifestStore(local, shard.db_path).read_latest().manifest
    assert len(manifest.ssts) == 1 and manifest.app_version("app") == 1
    assert values(local) == dict.fromkeys(KEYS, b"1")


def test_a_shard_without_rows_records_the_batch_once(local: ObjectStore) -> None:
    Table.create("t", local, [b"m"]).close()
    plan = plan_ingest("t", local, job_id="job", txn=AppVersion("app", 2))
    empty = commit_shard(local, plan, "run", plan.shards[1], [])
    assert (empty.status, empty.rows) == (WRITTEN, 0)
    assert table_app_versions(local, "t", "app") == {0: None, 1: 2}
    again = commit_shard(local, plan, "run", plan.shards[1], [], attempt=1)
    assert again.status == WRITTEN and again.manifest_id == empty.manifest_id  # its marker
    other = plan_ingest("t", local, txn=AppVersion("app", 2))
    staged = stage(local, other, "run", b"x")
    assert commit(local, other, "run", staged, 1).status == SKIPPED
    assert values(local)[b"x"] is None
