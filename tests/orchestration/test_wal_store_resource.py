"""``ObjectStoreResource.wal_url``: the Dagster assets of a database SlateDB writes with a
separate WAL object store (SlateDB RFC 0009) find its WAL there; without it the asset fails with
``WalStoreMissing`` and deletes nothing (issue 38, item 4)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from orchestration.assets import garbage_collection
from orchestration.partitions import DATABASES
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from slatedb_core.store.url import open_store
from tests.interop.expect import Model, check_reads
from tests.interop.oracle import settings
from tests.interop.oracle_wal import WalOracle
from tests.interop.rounds_steps import slate_rounds, slate_tail

pytestmark = pytest.mark.slatedb

SECRET = "s3://walbucket?secret_access_key=hunter2"


def _gc(store: ObjectStoreResource, instance: dg.DagsterInstance) -> dg.ExecuteInJobResult:
    managed = ManagedDatabasesResource(databases=["db"], gc_min_age="0s")
    return dg.materialize(
        [garbage_collection],
        partition_key="db",
        resources={"store": store, "managed": managed},
        instance=instance,
        raise_on_error=False,
    )


def test_gc_asset_collects_wal_in_the_wal_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, wal_root = tmp_path / "store", tmp_path / "walstore"
    root.mkdir()
    wal_root.mkdir()
    oracle = WalOracle(root, wal_root)
    try:
        model = Model()
        w = oracle.open_db(s=settings(compactor=False))
        slate_rounds(w, model, 3)
        slate_tail(w, model)
        wal_store = open_store(wal_root.as_uri())
        before = len(list(wal_store.list("db/wal")))
        with dg.instance_for_test() as instance:
            instance.add_dynamic_partitions(DATABASES, ["db"])
            bare = ObjectStoreResource(url=root.as_uri())
            failed = _gc(bare, instance)
            assert not failed.success
            assert "WalStoreMissing" in str(failed.get_step_failure_events()[0].step_failure_data)
            assert len(list(wal_store.list("db/wal"))) == before
            monkeypatch.setenv("TEST_SLATEDB_WAL_URL", wal_root.as_uri())
            configured = ObjectStoreResource(
                url=root.as_uri(), wal_url=dg.EnvVar("TEST_SLATEDB_WAL_URL")
            )
            result = _gc(configured, instance)
            assert result.success
        assert 0 < len(list(wal_store.list("db/wal"))) < before
        check_reads(model, w.get, w.scan, who="SlateDB Db after the GC asset")
    finally:
        oracle.close()


def test_wal_url_is_not_shown() -> None:
    r = ObjectStoreResource(url="memory://x", wal_url=SECRET)
    assert r.wal_url == SECRET and "hunter2" not in repr(r)
