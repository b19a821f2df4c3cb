"""The health figures and the Dagster boundary check of a database SlateDB writes with a separate
WAL store (SlateDB RFC 0009), with the real wheel (issue 38, item 4; the gap left after it
landed: ``slatedb_core.health.latest_ids`` listed ``<db>/wal/`` in the main store, so the check's
newest WAL id missed SlateDB's WAL tail and a WAL boundary past it would not be caught)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from orchestration.assets import garbage_collection
from orchestration.checks import boundaries_behind_latest
from orchestration.partitions import DATABASES
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from slatedb_core.health import latest_ids
from slatedb_core.layout import WAL_BOUNDARY
from slatedb_core.store.url import open_store
from tests.interop.expect import Model
from tests.interop.oracle import settings
from tests.interop.oracle_wal import WalOracle
from tests.interop.rounds_steps import slate_rounds, slate_tail

pytestmark = pytest.mark.slatedb


def test_latest_wal_id_and_boundary_check_see_the_wal_store(tmp_path: Path) -> None:
    root, wal_root = tmp_path / "store", tmp_path / "walstore"
    root.mkdir()
    wal_root.mkdir()
    oracle = WalOracle(root, wal_root)
    try:
        w = oracle.open_db(s=settings(compactor=False))
        slate_rounds(w, Model(), 2)
        slate_tail(w, Model())
        store, wal_store = open_store(root.as_uri()), open_store(wal_root.as_uri())
        newest = max(int(m.path.rsplit("/", 1)[1].split(".")[0]) for m in wal_store.list("db/wal"))
        assert latest_ids(store, "db", wal_url=wal_root.as_uri())[WAL_BOUNDARY] == newest
        resource = ObjectStoreResource(url=root.as_uri(), wal_url=wal_root.as_uri())
        managed = ManagedDatabasesResource(databases=["db"], gc_min_age="0s")
        with dg.instance_for_test() as instance:
            instance.add_dynamic_partitions(DATABASES, ["db"])
            result = dg.materialize(
                [garbage_collection, boundaries_behind_latest],
                partition_key="db",
                resources={"store": resource, "managed": managed},
                instance=instance,
            )
        (check,) = result.get_asset_check_evaluations()
        assert check.passed, check.description
        assert check.metadata["wal_latest"].value == newest
    finally:
        oracle.close()
