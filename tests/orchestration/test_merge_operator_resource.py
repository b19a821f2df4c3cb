"""``ObjectStoreResource.merge_operator``: the Dagster maintenance assets of a database SlateDB
writes with its merge operator (SlateDB RFC 0006, issue 38 item 2), with the real wheel on the
local filesystem and on the S3 server.

The compaction asset folds SlateDB's ``add_int64`` operands with the resource's operator, and
SlateDB then reads its values from our sorted run; without it the asset fails with
``MergeOperatorMissing`` and commits nothing. The Delta export reads the folded values too."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
from deltalake import DeltaTable
from pydantic import ValidationError

from orchestration.assets import compaction, delta_export
from orchestration.delta import export_uri
from orchestration.partitions import DATABASES
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.store.objectstore import ObjectStore
from tests.interop.conftest import both_stores, root
from tests.interop.oracle import Oracle
from tests.interop.oracle_merge_read import AddInt64, merge, open_merge_db, open_merge_reader

pytestmark = pytest.mark.slatedb

__all__ = ["both_stores", "root"]  # the fixtures, used by name


def i64(n: int) -> bytes:
    return (n % (1 << 64)).to_bytes(8, "little")


def _run(
    asset: dg.AssetsDefinition,
    store: ObjectStoreResource,
    managed: ManagedDatabasesResource,
    instance: dg.DagsterInstance,
) -> dg.ExecuteInJobResult:
    return dg.materialize(
        [asset],
        partition_key="db",
        resources={"store": store, "managed": managed},
        instance=instance,
        raise_on_error=False,
    )


def test_compaction_asset_folds_slatedb_operands(
    both_stores: tuple[Oracle, ObjectStore, str], tmp_path: Path
) -> None:
    o, store, url = both_stores
    w = open_merge_db(o, AddInt64())
    w.put(b"c/base", i64(10))
    for r in range(5):  # 5 L0 SSTs: past the asset's l0_trigger of 4
        merge(w, b"c/base", i64(r))
        merge(w, b"c/ops", i64(3))
        w.put(b"p/plain", b"v%d" % r)
        w.flush_memtable()
    want = {b"c/base": i64(20), b"c/ops": i64(15), b"p/plain": b"v4"}
    assert {k: w.get(k) for k in want} == want
    w.shutdown()
    managed = ManagedDatabasesResource(
        databases=["db"], export_root=str(tmp_path / "delta"), export_checkpoint_lifetime="1h"
    )
    ms = ManifestStore(store, "db")
    l0_before = ms.read_latest().manifest.l0
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(DATABASES, ["db"])
        failed = _run(compaction, ObjectStoreResource(url=url), managed, instance)
        assert not failed.success
        error = str(failed.get_step_failure_events()[0].step_failure_data)
        assert "MergeOperatorMissing" in error
        assert ms.read_latest().manifest.l0 == l0_before  # nothing committed
        resource = ObjectStoreResource(url=url, merge_operator="add_int64")
        done = _run(compaction, resource, managed, instance)
        assert done.success
        after = ms.read_latest().manifest
        assert not after.l0 and after.compacted
        exported = _run(delta_export, resource, managed, instance)
        assert exported.success
    reader = open_merge_reader(o, AddInt64())
    assert {k: reader.get(k) for k in want} == want
    data = DeltaTable(export_uri(managed.export_root, "db")).to_pyarrow_table()
    assert (
        dict(zip(data.column("key").to_pylist(), data.column("value").to_pylist(), strict=True))
        == want
    )


def test_unknown_merge_operator_is_refused_when_the_resource_is_built() -> None:
    with pytest.raises(ValidationError, match="no_such_op"):
        ObjectStoreResource(url="memory://x", merge_operator="no_such_op")
