"""The mixed workload (writers in turn, compactor, GC with min_age 0, readers) over S3 with faults
injected on the wire; see :mod:`tests.http_faults.workload` for what is checked."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from slatedb_core.store.url import open_store
from tests.conftest import MotoS3
from tests.http_faults.proxy import Fault, FaultProxy, FaultRates
from tests.http_faults.store_url_steps import proxied_url
from tests.http_faults.workload import Workload, WorkloadConfig, verify

pytestmark = pytest.mark.s3


@pytest.fixture
def bucket(moto_s3: MotoS3) -> str:
    return moto_s3.new_bucket()


@pytest.fixture
def proxy(moto_s3: MotoS3) -> Iterator[FaultProxy]:
    with FaultProxy(("127.0.0.1", moto_s3.port), seed=1) as p:
        yield p


def _run(
    moto_s3: MotoS3, bucket: str, proxy: FaultProxy, rates: FaultRates, config: WorkloadConfig
) -> None:
    proxy.set_rates(rates)
    started = time.monotonic()
    workload = Workload(open_store(proxied_url(proxy.endpoint, bucket)), config)
    outcome = workload.run()
    ran_s = time.monotonic() - started
    proxy.set_rates(FaultRates())
    figures = verify(outcome, open_store(moto_s3.url(bucket)), workload)
    print(
        f"\nseed={config.seed} writers={config.writers} ran {ran_s:.1f}s; proxy: "
        f"{proxy.counters.summary()}\n"
        f"  {figures}; reads={outcome.reads} checkpoint_reads={outcome.checkpoint_reads} "
        f"checkpoints={len(outcome.checkpoints)} compactions={outcome.compactions} "
        f"gc_passes={outcome.gc_passes} (failed {outcome.gc_failed_passes})\n"
        f"  writers ended by: {[log.ended_by for log in outcome.logs]}; tolerated errors: "
        f"{dict(outcome.errors)}"
    )
    for text in outcome.unexpected + outcome.violations:  # in full: pytest truncates asserts
        print(f"  FAIL: {text}")
    assert not outcome.unexpected, outcome.unexpected
    assert not outcome.violations, outcome.violations
    assert figures["acked_writes"] > 0 and outcome.reads > 0
    assert [log.ended_by for log in outcome.logs[:-1]] == ["fenced"] * (config.writers - 1)
    assert proxy.counters.faults() > 0


@pytest.mark.slow  # moved to the slow suite: make test stays well under 20 minutes
def test_mixed_workload_loses_nothing_through_5xx_resets_drops_and_latency(
    moto_s3: MotoS3, bucket: str, proxy: FaultProxy
) -> None:
    _run(
        moto_s3,
        bucket,
        proxy,
        FaultRates.uniform(0.05),
        WorkloadConfig(seed=1, writers=3, turn_s=4.0),
    )
    injected = [f for f in Fault if f is not Fault.STALL]
    assert all(proxy.counters[f.value] > 0 for f in injected) and proxy.counters["latency"] > 0


@pytest.mark.slow  # ~20 s: the clean-clone CI's make test took 20 min 22 s with it
def test_mixed_workload_where_every_put_answer_may_be_dropped(
    moto_s3: MotoS3, bucket: str, proxy: FaultProxy
) -> None:
    """Only PUTs fail, most of them after taking effect: conditional creates keep meeting their
    own objects on retry (412) and must recognise them by content."""
    rates = FaultRates(
        drop_after_apply=0.15, error_after=0.05, error_before=0.02, methods=frozenset({"PUT"})
    )
    _run(moto_s3, bucket, proxy, rates, WorkloadConfig(seed=2, writers=2, turn_s=3.0))


# ``HTTP_FAULT_SEEDS=1,2,3 pytest -m slow tests/http_faults`` runs a longer campaign.
HEAVY_SEEDS = [int(x) for x in os.environ.get("HTTP_FAULT_SEEDS", "11,12,13").split(",") if x]


@pytest.mark.slow
@pytest.mark.parametrize("seed", HEAVY_SEEDS)
def test_mixed_workload_heavy(moto_s3: MotoS3, bucket: str, proxy: FaultProxy, seed: int) -> None:
    _run(
        moto_s3,
        bucket,
        proxy,
        FaultRates.uniform(0.06, latency_s=(0.005, 0.1)),
        # ~30 % of requests fail; an open that replays ~100 WAL SSTs then often needs many tries
        WorkloadConfig(
            seed=seed, writers=4, turn_s=20.0, readers=3, open_attempts=60, deadline_s=400
        ),
    )
