"""slatedb_core.fleet.FleetScanner on real databases: every state, damage found and kept with its
database, ``changed`` flags, and the requests a second scan of an unchanged fleet makes."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from devtools.sample_data import write_database
from lakehouse_demo.s3server import SeaweedFS, weed_binary
from slatedb_core import (
    CheckpointOptions,
    DatabaseStatus,
    Db,
    FleetScanner,
    ObjectStore,
    admin,
    open_store,
    run_gc_once,
)
from slatedb_core.errors import InvalidArgument, StoreError
from slatedb_core.fleet import STATES
from slatedb_core.health import read_boundaries
from slatedb_core.layout import boundary_path, sequenced_name
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import GarbageCollectorOptions
from slatedb_core.testing import FaultyStore

GC_NOW = GarbageCollectorOptions(min_age=timedelta())


def small(store: ObjectStore, path: str, l0: int = 2, prefix: str = "k") -> None:
    write_database(store, path, prefix=prefix, l0_ssts=l0, rows_per_sst=20, wal_rows=3)


def manifest_path(store: ObjectStore, db: str) -> str:
    latest = ManifestStore(store, db).latest_id()
    assert latest is not None
    return f"{db}/manifest/{sequenced_name(latest, 'manifest')}"


@pytest.fixture
def fleet(store: ObjectStore) -> list[str]:
    """live (GC'd once, so it has boundaries), live without boundaries, a soft-destroyed one, a
    hard-destroyed one (only its tombstone), an uninitialized one and a path holding nothing."""
    small(store, "live")
    run_gc_once("live", store, GC_NOW)
    small(store, "fresh", l0=1)
    small(store, "soft", l0=1)
    Db.destroy("soft", store, soft=True)
    small(store, "gone", l0=1)
    Db.destroy("gone", store, soft=False)
    ManifestStore(store, "uninit").create_initial(Manifest(initialized=False))
    return ["live", "fresh", "soft", "gone", "uninit", "nothing"]


def test_every_state_on_first_and_second_scan(store: ObjectStore, fleet: list[str]) -> None:
    scanner = FleetScanner(store, concurrency=4)
    first = scanner.scan(fleet)
    assert list(first) == fleet
    states = {p: s.state for p, s in first.items()}
    assert states == {
        "live": "live",
        "fresh": "live",
        "soft": "destroyed",
        "gone": "destroyed",
        "uninit": "uninitialized",
        "nothing": "missing",
    }
    assert set(states.values()) <= set(STATES)
    assert all(s.changed and s.error is None for s in first.values())
    live = first["live"]
    assert live.health is not None and live.manifest_id == live.health.manifest_id
    assert live.health.l0_ssts == len(live.l0_sst_ids) == 2
    assert live.boundaries["manifest"] and live.boundaries["wal"]
    assert first["fresh"].boundaries == dict.fromkeys(
        ("manifest", "wal", "compactions", "compacted")
    )
    soft = first["soft"].health
    assert soft is not None and soft.destroyed_at_s is not None
    assert first["gone"].health is None and first["gone"].boundaries["manifest"] == 2**64 - 1
    assert first["nothing"].health is None and first["nothing"].manifest_id is None
    assert sum(s.requests for s in first.values()) == scanner.last_scan_requests

    second = scanner.scan(fleet)
    assert {p: s.state for p, s in second.items()} == states
    assert not any(s.changed for s in second.values())
    assert second["live"].health == live.health
    assert second["live"].boundaries == live.boundaries


def test_an_unchanged_fleet_costs_one_list_per_database(
    store: ObjectStore, fleet: list[str]
) -> None:
    scanner = FleetScanner(store)
    first = scanner.scan(fleet)
    files = sum(v is not None for v in first["live"].boundaries.values())
    assert files == 3  # no compactions yet: no compactions boundary
    # LIST, a GET per boundary file, LIST of the manifests again (after the boundaries), GET
    assert first["live"].requests == 1 + files + 1 + 1
    before = store.counters.snapshot()
    scanner.scan(fleet)
    after = store.counters.snapshot()
    made = {op: after[op] - before[op] for op in after if after[op] != before[op]}
    # one LIST of gc/ and manifest/ together (what follows them is on the same page)
    assert made == {"list": len(fleet)}
    assert scanner.last_scan_requests == len(fleet)


def test_changes_are_seen_and_flagged(store: ObjectStore, fleet: list[str]) -> None:
    scanner = FleetScanner(store)
    first = scanner.scan(fleet)
    small(store, "fresh", l0=1, prefix="more-")  # new manifests
    admin.create_checkpoint("live", store, CheckpointOptions(lifetime=timedelta(days=1)))
    small(store, "live", l0=1, prefix="more-")
    after = scanner.scan(fleet)
    assert {p for p, s in after.items() if s.changed} == {"fresh", "live"}
    fresh_before, fresh_after = first["fresh"], after["fresh"]
    assert fresh_before.manifest_id is not None and fresh_after.manifest_id is not None
    assert fresh_after.manifest_id > fresh_before.manifest_id
    assert len(fresh_after.l0_sst_ids) == 2
    assert fresh_after.l0_sst_ids[1:] == fresh_before.l0_sst_ids  # newest first
    live = after["live"]
    assert live.pinned_by is not None and live.pinned_by in live.checkpoints
    assert live.health is not None and live.health.manifest_lag > 0
    assert live.health.oldest_pinned_manifest_id == live.pinned_by.manifest_id


def test_a_boundary_rewritten_with_the_same_size_is_read_again(
    store: ObjectStore, fleet: list[str]
) -> None:
    scanner = FleetScanner(store)
    value = scanner.scan(["live"])["live"].boundaries["wal"]
    assert value is not None and value >= 1
    name = boundary_path("live", "wal")
    stored = store.get(name).data
    same_size = str(value - 1).rjust(len(stored.strip()), "0").encode()  # "0" padding parses
    assert len(same_size) == len(stored)
    store.put(name, same_size)
    status = scanner.scan(["live"])["live"]
    assert status.changed and status.boundaries["wal"] == value - 1
    assert not scanner.scan(["live"])["live"].changed


def test_corrupt_manifest_and_boundary_are_damage_of_their_database_only(
    store: ObjectStore, fleet: list[str]
) -> None:
    scanner = FleetScanner(store)
    scanner.scan(fleet)
    store.put(manifest_path(store, "fresh"), b"\x00\x02not a manifest")
    store.put(boundary_path("live", "manifest"), b"twelve")
    out = scanner.scan(fleet)
    fresh, live = out["fresh"], out["live"]
    assert (fresh.state, fresh.error_kind, fresh.health) == ("damaged", "CorruptionError", None)
    assert fresh.error is not None and "manifest" in fresh.error and fresh.changed
    assert (live.state, live.error_kind) == ("damaged", "CorruptionError")
    assert live.error is not None and "manifest.boundary" in live.error
    assert live.boundaries["manifest"] is None and live.boundaries["wal"] is not None
    assert live.health is not None  # its manifest is fine: the figures stay
    assert {p: s.state for p, s in out.items() if p not in ("fresh", "live")} == {
        "soft": "destroyed",
        "gone": "destroyed",
        "uninit": "uninitialized",
        "nothing": "missing",
    }
    again = scanner.scan(fleet)  # still damaged, from what the scanner remembers
    assert again["fresh"].state == again["live"].state == "damaged"
    assert not again["fresh"].changed and not again["live"].changed


def test_a_cold_scan_of_a_corrupt_manifest_is_damaged(store: ObjectStore) -> None:
    small(store, "db", l0=1)
    store.put(manifest_path(store, "db"), b"garbage")
    status = FleetScanner(store).scan(["db"])["db"]
    assert (status.state, status.error_kind, status.health) == ("damaged", "CorruptionError", None)


def test_verify_finds_a_deleted_sst_and_the_damage_stays(store: ObjectStore) -> None:
    write_database(store, "db", l0_ssts=4, rows_per_sst=20)  # > 2 SSTs: checked by one LIST
    write_database(store, "two", l0_ssts=2, rows_per_sst=20)  # 2 SSTs: checked by HEADs
    scanner = FleetScanner(store)
    clean = scanner.scan(["db", "two"], verify=["db", "two"])
    assert clean["db"].missing_ssts == () and clean["two"].missing_ssts == ()
    stored = ManifestStore(store, "db").read_latest()
    gone = f"db/compacted/{stored.manifest.ssts[1].id}.sst"
    store.delete(gone)
    gone2 = f"two/compacted/{ManifestStore(store, 'two').read_latest().manifest.ssts[0].id}.sst"
    store.delete(gone2)
    unverified = scanner.scan(["db", "two"])
    assert unverified["db"].state == "live" and unverified["db"].missing_ssts is None
    found = scanner.scan(["db", "two"], verify=["db", "two"])
    db = found["db"]
    assert (db.state, db.error_kind, db.missing_ssts) == ("damaged", "SstMissing", (gone,))
    assert db.changed and db.health is not None
    assert found["two"].missing_ssts == (gone2,)
    later = scanner.scan(["db"])["db"]  # not verified again, same manifest: still damaged
    assert (later.state, later.missing_ssts, later.changed) == ("damaged", None, False)
    small(store, "db", l0=1, prefix="more-")  # a newer manifest, still referring to it
    newer = scanner.scan(["db"])["db"]
    assert (newer.state, newer.error_kind) == ("damaged", "SstMissing")
    assert newer.error is not None and gone in newer.error
    for meta in list(store.list("db")):
        store.delete(meta.path)
    small(store, "db", l0=1)  # written again from scratch: the missing SST is referenced no more
    assert scanner.scan(["db"])["db"].state == "live"


def test_a_boundary_file_that_disappears_is_damage(store: ObjectStore) -> None:
    small(store, "db")
    run_gc_once("db", store, GC_NOW)
    scanner = FleetScanner(store)
    assert scanner.scan(["db"])["db"].state == "live"
    store.delete(boundary_path("db", "wal"))
    status = scanner.scan(["db"])["db"]
    assert (status.state, status.error_kind) == ("damaged", "BoundaryMissing")
    assert status.error is not None and "db/gc/wal.boundary" in status.error


def test_a_database_deleted_and_recreated_is_read_afresh(store: ObjectStore) -> None:
    small(store, "db", l0=3)
    run_gc_once("db", store, GC_NOW)
    scanner = FleetScanner(store)
    before = scanner.scan(["db"])["db"]
    for meta in list(store.list("db")):
        store.delete(meta.path)
    assert scanner.scan(["db"])["db"].state == "missing"
    small(store, "db", l0=1, prefix="new-")
    after = scanner.scan(["db"])["db"]
    assert after.state == "live" and after.changed
    assert after.manifest_id is not None and before.manifest_id is not None
    assert after.manifest_id < before.manifest_id  # ids started again: not taken as unchanged
    assert after.boundaries["wal"] is None  # boundaries gone with it: no BoundaryMissing
    assert after.l0_sst_ids == tuple(
        str(v.sst_id) for v in ManifestStore(store, "db").read_latest().manifest.l0
    )


def test_recreated_up_to_the_same_manifest_id_is_not_taken_for_unchanged(
    store: ObjectStore,
) -> None:
    small(store, "db", l0=1)
    scanner = FleetScanner(store)
    before = scanner.scan(["db"])["db"]
    for meta in list(store.list("db")):
        store.delete(meta.path)
    small(store, "db", l0=1)  # the same writes: manifests of the same sizes, other SST ids
    after = scanner.scan(["db"])["db"]
    assert after.manifest_id == before.manifest_id
    assert after.l0_sst_ids != before.l0_sst_ids  # the new database's SSTs, not the cached ones


def test_a_manifest_written_between_the_list_and_the_get(tmp_path: Path) -> None:
    inner = open_store((tmp_path / "s").as_uri())
    small(inner, "db", l0=1)
    listed = ManifestStore(inner, "db").latest_id()
    assert listed is not None
    scanner = FleetScanner(store := FaultyStore(inner))
    point = store.pause("get", "get", f"db/manifest/{sequenced_name(listed, 'manifest')}")
    result: dict[str, DatabaseStatus] = {}
    t = threading.Thread(target=lambda: result.update(scanner.scan(["db"])))
    t.start()
    assert point.wait_reached(30)
    small(inner, "db", l0=1, prefix="late-")  # newer manifests land meanwhile
    point.release()
    t.join(30)
    seen = result["db"]
    assert seen.manifest_id == listed  # the one listed: consistent, one scan late
    newest = scanner.scan(["db"])["db"]
    assert newest.changed and newest.manifest_id == ManifestStore(inner, "db").latest_id()


def test_the_listed_latest_collected_before_the_get_is_looked_up_again(tmp_path: Path) -> None:
    inner = open_store((tmp_path / "s").as_uri())
    small(inner, "db", l0=1)
    scanner = FleetScanner(store := FaultyStore(inner))
    scanner.scan(["db"])
    small(inner, "db", l0=1, prefix="b-")
    newer = ManifestStore(inner, "db").latest_id()
    assert newer is not None
    point = store.pause("get", "get", f"db/manifest/{sequenced_name(newer, 'manifest')}")
    result: dict[str, DatabaseStatus] = {}
    t = threading.Thread(target=lambda: result.update(scanner.scan(["db"])))
    t.start()
    assert point.wait_reached(30)
    small(inner, "db", l0=1, prefix="c-")
    run_gc_once("db", inner, GC_NOW)  # collects the manifest the scan listed as latest
    assert not inner.exists(f"db/manifest/{sequenced_name(newer, 'manifest')}")
    point.release()
    t.join(30)
    assert result["db"].manifest_id == ManifestStore(inner, "db").latest_id()


def test_a_store_failure_is_unreachable_for_that_database_only(tmp_path: Path) -> None:
    inner = open_store((tmp_path / "s").as_uri())
    small(inner, "a", l0=1)
    small(inner, "b", l0=1)
    store = FaultyStore(inner)
    scanner = FleetScanner(store, concurrency=2)
    scanner.scan(["a", "b"])
    store.fail_next("list", "b")
    out = scanner.scan(["a", "b"])
    assert out["a"].state == "live" and not out["a"].changed
    b = out["b"]
    assert (b.state, b.error_kind, b.health) == ("unreachable", "InjectedFault", None)
    assert b.changed
    back = scanner.scan(["a", "b"])["b"]
    assert back.state == "live" and back.changed
    assert back.requests == 1  # what it knew before the failure was kept: still a warm scan


def test_a_history_longer_than_a_page_is_skipped_with_the_pointer() -> None:
    store = open_store("memory://fleet-long-history")
    manifests = ManifestStore(store, "long")
    manifests.create_initial(Manifest())
    for _ in range(1005):
        manifests.update(lambda m: m, force=True)
    scanner = FleetScanner(store)
    status = scanner.scan(["long"])["long"]
    assert status.state == "live" and status.manifest_id == 1006
    # one LIST of the database (a full page of manifest names: more may follow), then per
    # directory: LIST gc/, one page of manifest names (full), the pointer, LIST from it, GET
    assert status.requests == 1 + 1 + 1 + 1 + 1 + 1
    manifests.update(lambda m: m, force=True)
    again = scanner.scan(["long"])["long"]  # known to be long: LIST gc/, manifests from 1006
    assert (again.manifest_id, again.changed, again.requests) == (1007, True, 3)


def test_a_nested_database_is_not_taken_for_the_outer_ones_objects(store: ObjectStore) -> None:
    small(store, "a", l0=1)
    small(store, "a/hello", l0=3)  # its keys sort between a/gc/ and a/manifest/
    run_gc_once("a/hello", store, GC_NOW)
    scanner = FleetScanner(store)
    for _ in range(2):
        out = scanner.scan(["a", "a/hello"])
        a, hello = out["a"], out["a/hello"]
        assert a.boundaries == dict.fromkeys(("manifest", "wal", "compactions", "compacted"))
        assert hello.boundaries["manifest"] is not None
        assert a.manifest_id == ManifestStore(store, "a").latest_id()
        assert hello.manifest_id == ManifestStore(store, "a/hello").latest_id()
        assert (len(a.l0_sst_ids), len(hello.l0_sst_ids)) == (1, 3)


def test_bad_arguments_name_the_option(store: ObjectStore) -> None:
    with pytest.raises(InvalidArgument, match="concurrency"):
        FleetScanner(store, concurrency=0)
    with pytest.raises(InvalidArgument, match="database path"):
        FleetScanner(store).scan(["ok", "../escape"])
    with pytest.raises(InvalidArgument, match="ObjectStore"):
        FleetScanner("memory://x")  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def seaweed() -> Iterator[SeaweedFS]:
    try:
        weed_binary()
    except StoreError as e:
        pytest.skip(str(e))
    with SeaweedFS() as server:
        yield server


@pytest.mark.s3
def test_one_listing_finds_the_boundaries_on_seaweedfs(seaweed: SeaweedFS) -> None:
    """SeaweedFS takes LIST's start-after per path component: after ``<db>/gc`` it skips the
    ``gc/`` directory itself, which plain S3 lists."""
    store = seaweed.store()
    small(store, "sw/db")
    run_gc_once("sw/db", store, GC_NOW)
    small(store, "sw/db/gcx", l0=1)  # a nested database named after gc
    scanner = FleetScanner(store)
    for _ in range(2):
        out = scanner.scan(["sw/db", "sw/db/gcx"])
        assert out["sw/db"].boundaries == read_boundaries(store, "sw/db")
        assert out["sw/db"].boundaries["manifest"] is not None
        assert out["sw/db"].manifest_id == ManifestStore(store, "sw/db").latest_id()
        assert out["sw/db/gcx"].manifest_id == ManifestStore(store, "sw/db/gcx").latest_id()
