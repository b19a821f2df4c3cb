"""The SST fields of a distributed (Spark) compaction's options now default to None
(f10b454): the plan travels to executors pickled, and each subcompaction must still write the
blocks, bloom bits and codec its options set, or ``DbOptions``' defaults where they set none
(review 53)."""

from __future__ import annotations

import itertools
import pickle

import pytest

from slatedb_core.compactor.distributed import DistributedCompactor, DistributedPlan
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions, DbOptions
from slatedb_core.sst.format import CODECS
from slatedb_core.sst.reader import SstReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from tests.compactor.subcompaction_steps import PATH, contents, fill, run_all


def compacted(store: ObjectStore) -> list[SstReader]:
    m = ManifestStore(store, PATH).read_latest().manifest
    return [
        SstReader.open(store, f"{PATH}/compacted/{v.sst_id}.sst")
        for run in m.compacted
        for v in run.views
    ]


@pytest.mark.parametrize(
    "options",
    [
        CompactorOptions(l0_trigger=2),
        CompactorOptions(l0_trigger=2, block_size=4096, compression="zstd", bloom_bits_per_key=0),
    ],
    ids=["defaults", "explicit"],
)
def test_a_pickled_distributed_plan_writes_the_sst_fields_of_its_options(
    options: CompactorOptions,
) -> None:
    store = open_store("memory://")
    expected = {k: v for k, v in fill(store, batches=3, rows=2000).items() if v is not None}
    driver = DistributedCompactor(PATH, store, options)
    plan = driver.plan(2)
    assert plan is not None
    shipped: DistributedPlan = pickle.loads(pickle.dumps(plan))
    assert shipped.options == options and shipped.options.block_size == options.block_size
    driver.commit(plan, run_all(store, shipped))
    assert contents(store) == expected
    block, bloom, codec = options.sst_fields()
    assert (block, bloom, codec) == (
        (DbOptions.block_size, DbOptions.bloom_bits_per_key, DbOptions.compression)
        if options.block_size is None
        else (4096, 0, "zstd")
    )
    readers = compacted(store)
    assert readers
    for r in readers:
        assert r.info.compression == CODECS[codec][0]
        largest = max(b - a for a, b in itertools.pairwise(r.block_offsets))
        assert largest <= block and (block > 4096) == (largest > 4096)
        assert (r.info.filter_len == 0) == (bloom == 0)
