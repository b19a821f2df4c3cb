"""Spark compaction that loses every race to a source change fails; it never says "nothing to do".

Issue 38 (follow-up, item A): ``spark_jobs.compact.compact`` returned None, and
``python -m spark_jobs.compact`` printed "nothing to compact" with exit 0, when each of
MAX_CONSECUTIVE_CONFLICTS compactions in a row hit CompactionSourceChanged. The racer is another
tool rewriting the oldest L0 view just before each of the driver's commits
(tests/compactor/contention.py); the executors' tasks run on the plain store.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from slatedb_core.compactor import read_latest_state
from slatedb_core.compactor.compactor import MAX_CONSECUTIVE_CONFLICTS
from slatedb_core.errors import CompactionContended, CompactionSourceChanged
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions, DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db
from spark_jobs.compact import compact, main
from tests.compactor.contention import RacedDriverStores

pytestmark = pytest.mark.spark

PATH = "db"
OPTIONS = CompactorOptions(l0_trigger=2, max_sst_size_bytes=16 * 1024, block_size=2048)


def fill(store: ObjectStore, l0s: int = 4) -> dict[bytes, bytes]:
    expected: dict[bytes, bytes] = {}
    with Db.open(PATH, store, DbOptions(l0_sst_size_bytes=16 * 1024)) as db:
        for b in range(l0s):
            ks = [b"k%04d" % i for i in range(b * 50, b * 50 + 100)]
            vals = [b"v%d-%d" % (b, i) for i in range(len(ks))]
            db.bulk_ingest(pa.table({"key": pa.array(ks), "value": pa.array(vals, pa.binary())}))
            expected.update(zip(ks, vals, strict=True))
    return expected


def contents(store: ObjectStore) -> dict[bytes, bytes]:
    with Db.open(PATH, store) as db:
        return dict(db.scan())


def test_spark_compaction_that_loses_every_race_raises(spark: SparkSession, store_url: str) -> None:
    store = open_store(store_url)
    expected = fill(store)
    factory = RacedDriverStores(store_url, PATH)
    with pytest.raises(CompactionContended) as raised:
        compact(spark, store_url, PATH, subcompactions=2, options=OPTIONS, store_factory=factory)
    assert raised.value.attempts == MAX_CONSECUTIVE_CONFLICTS
    assert isinstance(raised.value.__cause__, CompactionSourceChanged)
    assert factory.driver is not None and factory.driver.edits == MAX_CONSECUTIVE_CONFLICTS
    m = ManifestStore(store, PATH).read_latest().manifest
    assert m.compacted == () and len(m.l0) == 4
    state = read_latest_state(store, PATH)
    assert state is not None
    assert [c.status for c in state[1].compactions] == ["failed"] * MAX_CONSECUTIVE_CONFLICTS
    assert contents(store) == expected
    # fewer conflicts in a row than the limit: the pass compacts, the conflicts counted
    factory = RacedDriverStores(store_url, PATH, edits=MAX_CONSECUTIVE_CONFLICTS - 1)
    stats = compact(
        spark, store_url, PATH, subcompactions=2, options=OPTIONS, store_factory=factory
    )
    assert stats is not None and stats.compactions == 1
    assert stats.failed == MAX_CONSECUTIVE_CONFLICTS - 1
    assert f"{MAX_CONSECUTIVE_CONFLICTS - 1} abandoned" in stats.summary()
    assert contents(store) == expected


def test_the_spark_compact_command_exits_nonzero_when_every_race_was_lost(
    spark: SparkSession, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = open_store(store_url)
    expected = fill(store)
    argv = ["--url", store_url, "--path", PATH, "--subcompactions", "2"]
    code = main(argv, store_factory=RacedDriverStores(store_url, PATH))
    out, err = capsys.readouterr()
    assert code != 0
    assert "nothing to compact" not in out
    assert "CompactionContended" in err and "retry later" in err
    assert ManifestStore(store, PATH).read_latest().manifest.compacted == ()
    # the other tool stopped: the command compacts, then really finds nothing to do (exit 0)
    assert main(argv) == 0
    assert "spark compaction" in capsys.readouterr().out
    assert main(argv) == 0
    assert "nothing to compact" in capsys.readouterr().out
    assert contents(store) == expected
