"""A real database whose latest manifest is a ManifestV1 (issue 38, item 5): SlateDB 0.17
writes, flushes, compacts and checkpoints; the test rewrites its latest manifest object as the
V1 object an earlier SlateDB would have left for the same state, built by
:mod:`tests.manifest.v1_fixture` (from SlateDB's ``manifest.fbs``, not from our encoder). Then
every reader of manifests reads it: SlateDB's own wheel (its Admin and DbReader), our admin
functions, CLI, DbReader, the Dagster health check and GC asset, our writer (which recovers,
writes and commits V2) and our compactor; and SlateDB reads the database back after our V2
commit. Both directions, on the local filesystem and the S3 server (``both_stores``)."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from dataclasses import replace
from typing import Any, cast

import dagster as dg
import pytest
from click.testing import CliRunner
from ulid import ULID

from orchestration.assets import garbage_collection
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from slatedb_core.admin import list_manifests, read_manifest
from slatedb_core.cli.main import cli
from slatedb_core.compactor import run_compaction_once
from slatedb_core.fleet.scanner import FleetScanner
from slatedb_core.health import damaged_ssts, inspect_database
from slatedb_core.lifecycle.clone import create_clone
from slatedb_core.manifest.codec import decode_stamped_manifest
from slatedb_core.manifest.model import CompactedSst, Manifest
from slatedb_core.manifest.store import ManifestStore, StoredManifest
from slatedb_core.options import CompactorOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db
from tests.interop.expect import Model, check_reads, scanner
from tests.interop.oracle import DB, Oracle, SlateAdmin, settings
from tests.interop.rounds_steps import FAST, READER, our_rounds, slate_rounds, slate_tail
from tests.manifest.v1_fixture import encode_v1, from_model

pytestmark = pytest.mark.slatedb

Stores = tuple[Oracle, ObjectStore, str]


def as_v1(store: ObjectStore) -> tuple[StoredManifest, Manifest]:
    """Rewrite the latest manifest object in place as ManifestV1 with the same content; the
    stored V2 manifest it replaced, and what V1 decodes to."""
    ms = ManifestStore(store, DB)
    before = ms.read_latest()
    assert before.version == 2
    path = ms.seq.path(before.id)
    store.put(path, encode_v1(from_model(before.manifest)))
    data = store.get(path).data
    assert struct.unpack_from(">H", data)[0] == 1
    after, stamp = decode_stamped_manifest(data, name=path)
    assert stamp.version == 1
    return before, after


def ssts(m: Manifest) -> dict[ULID, CompactedSst]:
    """The SSTs without our own SsTableInfo fields (entry count, size), which SlateDB's
    schema, and so a V1 object, lacks."""
    return {s.id: replace(s, info=replace(s.info, entry_count=0, size_bytes=0)) for s in m.ssts}


def same_state(a: Manifest, b: Manifest) -> None:
    """What V1 and V2 both hold agrees (view ids aside: V1 names each view after its SST)."""

    def tree(m: Manifest) -> Any:
        l0 = [(v.sst_id, v.visible_range) for v in m.l0]
        runs = [(r.id, [(v.sst_id, v.visible_range) for v in r.views]) for r in m.compacted]
        return l0, runs

    assert tree(a) == tree(b)
    assert ssts(a) == ssts(b)
    for f in (
        "writer_epoch",
        "compactor_epoch",
        "initialized",
        "replay_after_wal_id",
        "wal_id_last_seen",
        "checkpoints",
        "last_l0_seq",
        "last_l0_clock_tick",
        "recent_snapshot_min_seq",
        "sequence_tracker",
        "external_dbs",
        "destroyed_at_s",
    ):
        assert getattr(a, f) == getattr(b, f), f


def slatedb_database(oracle: Oracle, model: Model) -> SlateAdmin:
    """SlateDB writes L0 SSTs, compacts them into a sorted run, writes more L0, takes a named
    checkpoint and leaves a durable WAL tail; then shuts down."""
    w = oracle.open_db(s=settings(compactor=True))
    slate_rounds(w, model, 4)
    admin = oracle.admin()
    admin.wait_until(lambda m: bool(m.compacted))
    slate_rounds(w, model, 1, first=4)
    admin.create_checkpoint(name="before-v1")
    slate_tail(w, model)
    w.shutdown()
    return admin


def cli_json(url: str, *args: str) -> Any:
    r = CliRunner().invoke(cli, ["--url", url, "--path", DB, *args, "--json"])
    assert r.exit_code == 0, (args, r.stdout, r.stderr, r.exception)
    return json.loads(r.stdout)


def test_the_slatedb_wheel_reads_manifest_v1(both_stores: Stores) -> None:
    """Yes: the 0.17 wheel decodes ManifestV1 (its Admin then reports the V1-only
    ``last_compacted_l0_sst_id``, which it leaves unset for V2) and its DbReader reads every row
    through it; and our V1 fixture is what SlateDB's V1 decoder accepts."""
    oracle, store, _ = both_stores
    model = Model()
    admin = slatedb_database(oracle, model)
    v2 = admin.latest()
    assert v2.last_compacted_l0_sst_id is None and v2.last_compacted_l0_sst_view_id is not None
    before, after = as_v1(store)
    same_state(before.manifest, after)
    v1 = admin.latest()
    assert v1.id == v2.id == before.id
    assert v1.last_compacted_l0_sst_id == v1.last_compacted_l0_sst_view_id is not None
    assert [view.id for view in v1.l0] == [str(v.sst_id) for v in before.manifest.l0]
    assert (v1.writer_epoch, v1.compactor_epoch) == (v2.writer_epoch, v2.compactor_epoch)
    assert v1.next_wal_sst_id == v2.next_wal_sst_id and v1.checkpoints == v2.checkpoints
    assert v1.wal_object_store_uri is None
    r = oracle.open_reader()
    check_reads(model, r.get, r.scan, who="SlateDB's DbReader on ManifestV1")
    r.shutdown()
    # and its writer opens on it, recovers, and commits V2 (0.17's choice) on top
    w = oracle.open_db(s=settings(compactor=False))
    check_reads(model, w.get, w.scan, who="SlateDB's Db on ManifestV1")
    w.shutdown()
    ms = ManifestStore(store, DB)
    latest = ms.read_latest()
    assert latest.id > before.id and latest.version == 2
    assert store.get(ms.seq.path(latest.id)).data[:2] == b"\x00\x02"


def test_slatedb_writes_we_read_a_v1_manifest_everywhere(both_stores: Stores) -> None:
    """SlateDB wrote it, the latest manifest is V1: admin, CLI, Dagster (health check, GC
    asset), DbReader, then our writer (recovers the WAL tail, writes, commits V2); SlateDB reads
    everything back."""
    oracle, store, url = both_stores
    model = Model()
    slatedb_database(oracle, model)
    before, v1 = as_v1(store)
    # admin functions: the V1 object, stamped version 1
    stored = read_manifest(store, DB)
    assert stored.id == before.id and stored.version == 1 and stored.manifest == v1
    assert [e.id for e in list_manifests(store, DB)][-1] == before.id
    # the CLI
    shown = cli_json(url, "read-manifest")
    assert shown["id"] == before.id and shown["writer_epoch"] == v1.writer_epoch
    assert len(shown["l0"]) == len(v1.l0) > 0 and len(shown["compacted"]) == len(v1.compacted) > 0
    listed = {c["id"]: c["name"] for c in cli_json(url, "list-checkpoints")}
    assert listed == {str(c.id): c.name for c in v1.checkpoints} and "before-v1" in listed.values()
    assert [
        (bytes.fromhex(row["key"]), bytes.fromhex(row["value"]))
        for row in cli_json(url, "scan", "--format", "hex")
    ] == model.live()
    # Dagster: its health check (manifest_and_ssts_intact: inspect_database, damaged_ssts) and
    # the GC asset, which opens it through inspect_database and run_gc_once
    health = inspect_database(store, DB)[0]
    assert health.version == 1 and health.id == before.id
    assert damaged_ssts(store, DB, health.manifest) == []  # manifest_and_ssts_intact's test
    fleet = FleetScanner(store).scan([DB], verify=[DB])[DB]  # the fleet sensor's scan
    assert (fleet.state, fleet.error) == ("live", None) and fleet.health is not None
    managed = ManagedDatabasesResource(databases=[DB], gc_min_age="0s")
    pass_events = garbage_collection(  # a pass yields one event: a materialization, or a skip
        context=dg.build_asset_context(partition_key=DB),
        store=ObjectStoreResource(url=url),
        managed=managed,
    )
    events = list(cast(Iterable[Any], pass_events))
    (gc_event,) = events
    assert isinstance(gc_event, dg.MaterializeResult) and gc_event.metadata is not None
    latest_id = gc_event.metadata["latest_manifest_id"]
    assert isinstance(latest_id, dg.MetadataValue) and latest_id.value == before.id
    # our reader, after that GC pass: nothing it needed was collected
    with DbReader.open(DB, store, options=READER) as reader:
        check_reads(model, reader.get, scanner(reader), who="our DbReader on ManifestV1")
    # our compactor: compacts from a V1 manifest (our reader's managed checkpoint was committed
    # as V2: V1 again) and commits V2; then V1 again for the writer
    before, v1 = as_v1(store)
    stats = run_compaction_once(DB, store, CompactorOptions(l0_trigger=1, min_merge_width=2))
    assert stats is not None
    compacted = read_manifest(store, DB)
    assert compacted.version == 2 and compacted.id > before.id and not compacted.manifest.l0
    before, v1 = as_v1(store)
    # our writer: recovers from the V1 manifest, writes, and commits V2
    with Db.open(DB, store, FAST) as db:
        check_reads(model, db.get, scanner(db), who="our Db opened on ManifestV1")
        our_rounds(db, model, 1, first=7)
        db.put(b"ours/after-v1", b"v2")
        model.put(b"ours/after-v1", b"v2")
    ms = ManifestStore(store, DB)
    latest = ms.read_latest()
    assert latest.id > before.id and latest.version == 2
    assert store.get(ms.seq.path(latest.id)).data[:2] == b"\x00\x02"
    # SlateDB reads it all back
    r = oracle.open_reader()
    check_reads(model, r.get, r.scan, who="SlateDB's DbReader after our V2 commit")
    r.shutdown()
    w = oracle.open_db(s=settings(compactor=False))
    check_reads(model, w.get, w.scan, who="SlateDB's Db after our V2 commit")
    w.shutdown()


def test_we_write_and_then_read_our_state_as_v1(both_stores: Stores) -> None:
    """The reverse: our writer's database, its latest manifest rewritten as V1 (what V1 cannot
    hold, our own fields such as ``next_wal_sst_id``, is gone, as after an earlier SlateDB's
    rewrite): SlateDB reads it; our writer opens it (recovering the WAL tail past it), writes and
    commits V2; SlateDB and our reader read the result."""
    oracle, store, _ = both_stores
    model = Model()
    with Db.open(DB, store, FAST) as db:
        our_rounds(db, model, 3)
        db.put(b"tail/wal-only", b"t")  # durable in the WAL, past the last flush
        model.put(b"tail/wal-only", b"t")
    before, v1 = as_v1(store)
    same_state(before.manifest, v1)
    r = oracle.open_reader()
    check_reads(model, r.get, r.scan, who="SlateDB's DbReader on our state as ManifestV1")
    r.shutdown()
    with Db.open(DB, store, FAST) as db:
        check_reads(model, db.get, scanner(db), who="our Db on our state as ManifestV1")
        our_rounds(db, model, 1, first=3)
        db.put(b"tail/after-v1", b"t2")
        model.put(b"tail/after-v1", b"t2")
    latest = read_manifest(store, DB)
    assert latest.version == 2 and latest.id > before.id
    with DbReader.open(DB, store, options=READER) as reader:
        check_reads(model, reader.get, scanner(reader), who="our DbReader after our V2 commit")
    w = oracle.open_db(s=settings(compactor=False))
    check_reads(model, w.get, w.scan, who="SlateDB's Db after our V2 commit on V1")
    w.shutdown()


def test_a_clone_of_a_v1_database_and_a_clone_as_v1(both_stores: Stores) -> None:
    """Our clone reads its source's V1 manifest (and the one its checkpoint pins); the clone's
    own manifest, rewritten as V1, carries ``external_dbs`` in ManifestV1: SlateDB and we read
    the clone's rows through it."""
    oracle, store, _ = both_stores
    model = Model()
    slatedb_database(oracle, model)
    as_v1(store)
    manifest = create_clone("clone", DB, store)
    assert manifest.external_dbs and manifest.external_dbs[0].path == DB
    cms = ManifestStore(store, "clone")
    before = cms.read_latest()
    path = cms.seq.path(before.id)
    store.put(path, encode_v1(from_model(before.manifest)))
    v1 = cms.read_latest()
    assert v1.version == 1 and v1.manifest.external_dbs == before.manifest.external_dbs
    same_state(before.manifest, v1.manifest)
    with DbReader.open("clone", store, options=READER) as reader:
        check_reads(model, reader.get, scanner(reader), who="our DbReader on a V1 clone")
    r = oracle.open_reader("clone")
    check_reads(model, r.get, r.scan, who="SlateDB's DbReader on a V1 clone")
    r.shutdown()
