"""The steps of the overwrite tests: a two-split table of ``OLD`` rows, the ``NEW`` rows an
overwrite stages into it, and checks of what the table then holds (docs/overwrite.md)."""

from __future__ import annotations

import threading
from collections.abc import Mapping

import pyarrow as pa

from slatedb_core.errors import DatabaseDestroyed, SlateDBError
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.table.ingest import WRITTEN, IngestPlan, attempt_dir, stage_ssts
from slatedb_core.table.overwrite import commit_overwrite
from slatedb_core.table.shardmap import ShardMapStore
from slatedb_core.testing import PausePoint
from tests.table.conftest import OPTS

SPLITS = [b"g", b"p"]


OLD = {k: b"old-" + k for k in (b"a1", b"c2", b"h3", b"k4", b"q5", b"z6")}


NEW = {k: b"new-" + k for k in (b"b7", b"c2", b"i8", b"r9", b"y0")}  # c2 in both


def batch(rows: Mapping[bytes, bytes | None]) -> pa.RecordBatch:
    keys = sorted(rows)
    return pa.record_batch(
        {
            "key": pa.array(keys, pa.binary()),
            "value": pa.array([rows[k] for k in keys], pa.binary()),
        }
    )


def old_table(store: ObjectStore, path: str = "t", *, check: bool = False) -> Table:
    """A table of three shards holding OLD (durable, some in L0, some only in the WAL); ``check``
    reads it back first (which opens a reader on each shard) and asserts it holds OLD."""
    t = Table.create(path, store, SPLITS, OPTS)
    for shard in t.shards:
        with t.writer(shard.index) as db:
            for k, v in OLD.items():
                if shard.contains(k):
                    db.put(k, v)
            if shard.index != 1:
                db.flush_memtable()
    t.refresh()
    if check:
        assert dict(t.scan()) == OLD
    return t


def contents(store: ObjectStore, path: str = "t") -> dict[bytes, bytes]:
    with Table.open(path, store, OPTS) as t:
        return dict(t.scan())


def stage(
    store: ObjectStore, plan: IngestPlan, run_id: str, rows: Mapping[bytes, bytes | None]
) -> dict[int, list[tuple[str, int]]]:
    """What Spark tasks do: two input partitions, each staged by its own attempt."""
    staged: dict[int, list[tuple[str, int]]] = {}
    items = sorted(rows.items())
    for part, chunk in enumerate((items[::2], items[1::2])):
        directory = attempt_dir(plan, run_id, part, 0)
        for sst in stage_ssts(store, plan, directory, 0, [batch(dict(chunk))], partition=part):
            staged.setdefault(sst.shard.index, []).append((sst.path, sst.seq))
    return staged


def gone(store: ObjectStore, db_path: str) -> bool:
    try:
        stored = ManifestStore(store, db_path).try_read_latest()
    except DatabaseDestroyed:
        return True
    return stored is None or stored.manifest.destroyed_at_s is not None


def assert_map_is_live(store: ObjectStore) -> None:
    """Every shard the latest map names is a live database (never a destroyed target)."""
    m = ShardMapStore(store, "t").read_latest()
    for s in m.shards:
        assert not gone(store, s.db_path), (s.db_path, m)


def commit_in_thread(
    store: ObjectStore, plan: IngestPlan, staged: Mapping[int, list[tuple[str, int]]]
) -> tuple[threading.Thread, list[object]]:
    """One attempt of ``commit_overwrite`` (run ``r``) in a started thread; its list gets the
    statuses the attempt returned or the ``SlateDBError`` it raised."""
    out: list[object] = []

    def run() -> None:
        try:
            out.append([s.status for s in commit_overwrite(store, plan, "r", staged)])
        except SlateDBError as e:
            out.append(e)

    th = threading.Thread(target=run)
    th.start()
    return th, out


def commit_concurrently(
    store: ObjectStore, plan: IngestPlan, staged: Mapping[int, list[tuple[str, int]]], n: int
) -> list[object]:
    """``n`` attempts of one commit at once (a driver retrying while the first still runs), each
    joined within 120 s: what each returned or raised, as :func:`commit_in_thread` reports it."""
    started = [commit_in_thread(store, plan, staged) for _ in range(n)]
    outcomes: list[object] = []
    for th, out in started:
        th.join(120)
        assert not th.is_alive()
        outcomes += out
    return outcomes


def release_and_expect_the_swap(pp: PausePoint, th: threading.Thread, out: list[object]) -> None:
    """Release the attempt stalled at ``pp`` (started by :func:`commit_in_thread`): it ends within
    60 s and reports the overwrite committed, WRITTEN on each of the three targets."""
    pp.release()
    th.join(60)
    assert not th.is_alive()
    assert out == [[WRITTEN] * 3]
