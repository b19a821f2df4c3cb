"""Sample databases for ``make ui``: a few real databases in a local store, each in a state the
maintenance assets have something to do with.

* ``orders``: several L0 SSTs (compaction has work) and a few writes only in the WAL;
* ``customers``: a small, already tidy database with a named checkpoint;
* ``legacy``: soft-destroyed, so garbage collection deletes it once its grace has passed;
* ``events``: a sharded table, three shards (small: the first rescaling merges them into one);
* ``damaged``: L0 over its threshold and one of its L0 SSTs deleted, so the fleet view, the checks
  and the compaction that fails on it have something to name.

``--register`` also adds the Dagster partitions at once (``DAGSTER_HOME`` must be set), so the UI
lists every database before the discovery sensor's first tick. ``--materialize`` then runs one pass
of every asset and check per partition (the shards the rescaling creates included) and several
ticks of ``fleet_sensor`` with changes in between (:mod:`devtools.sample_history`), so the fleet
view and its per-database plots open on a history.

    python -m devtools.sample_data --dir demo-data/dagster-store --reset --register
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import pyarrow as pa

from slatedb_core import CheckpointOptions, Db, DbOptions, ObjectStore, Table, admin, open_store
from slatedb_core.errors import InvalidArgument
from slatedb_core.layout import compacted_dir

DEFAULT_DIR = Path("demo-data/dagster-store")
PASS_JOBS = ("compaction_job", "gc_job", "checkpoint_job", "export_job", "health_check_job")
"""The jobs of one pass over a database partition (``--materialize``), in this order: the
maintenance jobs (which run their assets without the checks), then every check, deeply."""


def rows(prefix: str, start: int, count: int, value_bytes: int = 64) -> pa.Table:
    keys = [f"{prefix}{i:08d}".encode() for i in range(start, start + count)]
    pad = b"x" * max(0, value_bytes - 16)
    values = [f"value-{i:010d}".encode() + pad for i in range(start, start + count)]
    return pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())})


def write_database(
    store: ObjectStore,
    path: str,
    *,
    prefix: str = "k",
    l0_ssts: int = 3,
    rows_per_sst: int = 1000,
    wal_rows: int = 10,
    value_bytes: int = 64,
) -> int:
    """Write ``l0_ssts`` memtable flushes of ``rows_per_sst`` rows each (overlapping keys, so
    compaction has versions to drop) and ``wal_rows`` more rows left in the WAL. Returns the
    number of distinct keys."""
    with Db.open(path, store, DbOptions(l0_max_ssts=max(16, l0_ssts + 1))) as db:
        for i in range(l0_ssts):
            db.put_arrow(rows(prefix, i * rows_per_sst // 2, rows_per_sst, value_bytes))
            db.flush_memtable()
        if wal_rows:
            end = (l0_ssts + 1) * rows_per_sst // 2 + rows_per_sst
            db.put_arrow(rows(prefix, end, wal_rows, value_bytes))
    if l0_ssts == 0:
        return wal_rows
    return (l0_ssts - 1) * rows_per_sst // 2 + rows_per_sst + wal_rows


def create_sample(store: ObjectStore, *, with_table: bool = True) -> list[str]:
    """The sample databases (and table) in ``store``; returns the database paths written."""
    write_database(store, "orders", prefix="order-", l0_ssts=6, rows_per_sst=2000)
    write_database(store, "customers", prefix="customer-", l0_ssts=1, rows_per_sst=500)
    admin.create_checkpoint(
        "customers", store, CheckpointOptions(lifetime=timedelta(days=2), name="retention")
    )
    write_database(store, "legacy", prefix="old-", l0_ssts=1, rows_per_sst=200, wal_rows=0)
    Db.destroy("legacy", store, soft=True)
    write_database(store, "damaged", prefix="item-", l0_ssts=9, rows_per_sst=200, wal_rows=0)
    delete_one_sst(store, "damaged")
    written = ["orders", "customers", "legacy", "damaged"]
    if with_table:
        written.extend(create_table(store, "events"))
    return written


def delete_one_sst(store: ObjectStore, path: str) -> str:
    """Delete the oldest compacted SST of ``path`` (one its latest manifest references: a database
    damaged by hand or a bad GC); returns the deleted object's path."""
    ssts = sorted(m.path for m in store.list(compacted_dir(path)) if m.path.endswith(".sst"))
    if not ssts:
        raise InvalidArgument(f"delete_one_sst: {path!r} has no compacted SST to delete")
    store.delete(ssts[0])
    return ssts[0]


def create_table(store: ObjectStore, path: str) -> list[str]:
    """A three-shard table with rows in every shard; returns its shards' database paths."""
    with Table.create(path, store, split_points=[b"event-00001000", b"event-00002000"]) as table:
        for shard in table.shards:
            start = 0 if shard.key_range.start is None else int(shard.key_range.start[6:])
            with table.writer(shard) as db:
                db.put_arrow(rows("event-", start, 600 if start < 2000 else 1000))
                db.flush_memtable()
        return [s.db_path for s in table.shards]


def register_partitions(store_url: str, materialize: bool = False, history: bool = True) -> int:
    """Add the partitions for what is in the store to the Dagster instance at ``DAGSTER_HOME``
    (the settings file decides what is managed); with ``materialize``, also run one pass of
    every asset and check per partition, so the UI opens on real history, and then (``history``)
    the ticks of :mod:`devtools.sample_history`. Returns the number of partitions added."""
    # Late: dagster, and the code location, which reads its settings file when imported; writing
    # the sample databases needs neither.
    import dagster as dg

    from devtools.sample_history import HISTORY_OVERRIDES, REFUSED, drive_history, run_job
    from orchestration.alerts import DATABASE_TAG
    from orchestration.definitions import build_definitions
    from orchestration.partitions import DATABASES, TABLES
    from orchestration.sensors import discovery_requests
    from orchestration.settings import load_settings

    settings = load_settings()
    managed = {**settings.managed, **(HISTORY_OVERRIDES if materialize and history else {})}
    settings = dataclasses.replace(
        settings, store={**settings.store, "url": store_url}, managed=managed
    )
    defs = build_definitions(settings)
    resources = defs.resources or {}

    def discover(instance: dg.DagsterInstance) -> dict[str, list[str]]:
        new: dict[str, list[str]] = {}
        for request in discovery_requests(instance, resources["store"], resources["managed"]):
            if isinstance(request, dg.AddDynamicPartitionsRequest):
                keys = list(request.partition_keys)
                instance.add_dynamic_partitions(request.partitions_def_name, keys)
                new.setdefault(request.partitions_def_name, []).extend(keys)
        return new

    def one_pass(instance: dg.DagsterInstance, keys: Sequence[str]) -> None:
        # The jobs a schedule launches (so the runs list and the fleet view's "last compaction"
        # and "last GC" show them), then the checks.
        for key in keys:
            for job in PASS_JOBS:
                run_job(defs, instance, job, key, {DATABASE_TAG: key})

    with dg.DagsterInstance.get() as instance:
        new = discover(instance)
        added = sum(len(keys) for keys in new.values())
        if materialize:
            one_pass(instance, instance.get_dynamic_partitions(DATABASES))
            for key in instance.get_dynamic_partitions(TABLES):
                run_job(defs, instance, "rescaling_job", key)
            # The rescaling wrote new shards (and retired the old ones): register them and give
            # them their pass too, or their partitions stay "missing" beside the retired shards.
            shards = discover(instance).get(DATABASES, [])
            added += len(shards)
            one_pass(instance, shards)
            if history:
                reports = drive_history(instance, defs, resources["store"], resources["managed"])
                for r in reports:
                    runs = f"; runs: {', '.join(r.runs)}" if r.runs else ""
                    view = (
                        "fleet view materialized"
                        if r.fleet_materialized
                        else "fleet view unchanged"
                    )
                    refused = f"; {r.refused} check evaluations refused" if r.refused else ""
                    print(f"tick '{r.title}': {r.events} events, {view}{runs}{refused}")
                if any(r.refused for r in reports):
                    print(f"warning: {REFUSED}", file=sys.stderr)
    return added


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="local store directory")
    p.add_argument("--reset", action="store_true", help="delete the directory first")
    p.add_argument("--register", action="store_true", help="add the Dagster partitions now")
    p.add_argument(
        "--materialize",
        action="store_true",
        help="with --register: run every asset once, then several fleet_sensor ticks",
    )
    p.add_argument(
        "--no-history", action="store_true", help="with --materialize: no fleet_sensor ticks"
    )
    a = p.parse_args()
    if a.reset and a.dir.exists():
        shutil.rmtree(a.dir)
    store = open_store(str(a.dir))
    if admin.manifest_store(store, "orders").try_read_latest() is not None:
        print(f"sample data already in {store.url} (use --reset to write it again)")
    else:
        written = create_sample(store)
        print(f"wrote {len(written)} databases to {store.url}: {', '.join(written)}")
    if a.register:
        print(
            f"registered {register_partitions(store.url, a.materialize, not a.no_history)} new partitions"
        )


if __name__ == "__main__":
    main()
