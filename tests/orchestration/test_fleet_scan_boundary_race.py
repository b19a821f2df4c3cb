"""A race in slatedb_core.fleet's one-LIST scan: the boundary files are read after the listing
that gave the latest manifest, so a GC pass in between makes a boundary look ahead of it."""

from __future__ import annotations

import threading

from devtools.sample_data import write_database
from slatedb_core import DatabaseStatus, FleetScanner, ObjectStore
from slatedb_core.health import inspect_database
from slatedb_core.layout import boundary_path
from slatedb_core.testing import FaultyStore


def test_a_boundary_read_after_the_listing_is_never_ahead_of_the_manifest_it_is_judged_with(
    store: ObjectStore,
) -> None:
    """One LIST of <db>/ gives the boundary files and the manifests; the boundaries are read
    after it. If the writer writes a manifest and GC advances the manifest boundary to the old
    latest in between, the boundary read is the new one and the latest manifest the old one:
    the boundary "covers the latest manifest", which fleet_sensor reports as an ERROR."""
    write_database(store, "tidy", l0_ssts=1, rows_per_sst=50)
    store.put(boundary_path("tidy", "manifest"), b"1")  # an earlier GC pass
    listed_latest = inspect_database(store, "tidy")[0].id
    faulty = FaultyStore(store)
    after_list = faulty.pause("after-list", "list", "tidy", when="after")
    scanner = FleetScanner(faulty, concurrency=1)
    out: list[object] = []

    def scan() -> None:
        try:
            out.append(scanner.scan(["tidy"])["tidy"])
        except Exception as e:  # shown by the assertions below
            out.append(e)

    thread = threading.Thread(target=scan, daemon=True)
    thread.start()
    try:
        assert after_list.wait_reached(30), out
        # the writer goes on, and a GC pass moves the manifest boundary onto the old latest
        write_database(store, "tidy", prefix="more-", l0_ssts=1, rows_per_sst=50, wal_rows=0)
        store.put(boundary_path("tidy", "manifest"), str(listed_latest).encode())
    finally:
        after_list.release()
        thread.join(60)
    (status,) = out
    assert isinstance(status, DatabaseStatus) and status.health is not None
    boundary = status.boundaries["manifest"]
    assert boundary is None or boundary < status.health.manifest_id, (
        f"boundary {boundary} judged against manifest {status.health.manifest_id}"
    )
