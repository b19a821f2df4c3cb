"""``slatedb fleet serve-metrics`` scraped over HTTP on 127.0.0.1 (issue 40, item 11): a real
fleet of two databases, the families and labels it exports, the engine counters, the scan
cache, and a store secret that never reaches the page."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from slatedb_core.fleet.metrics import (
    ENGINE_METRICS,
    FLEET_METRICS,
    EngineCollector,
    FleetCollector,
)
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db
from tests.fleet.fleet_steps import FAST, REPO, make_fleet

EXPORTER = (sys.executable, "-m", "slatedb_core.cli.main", "fleet", "serve-metrics")


@contextmanager
def serve(url: str, *extra: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """The exporter as an operator starts it; yields it and its /metrics address."""
    proc = subprocess.Popen(
        [*EXPORTER, "--url", url, "--port", "0", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )
    try:
        assert proc.stdout is not None
        seen = ""
        for line in proc.stdout:  # a library warning may come first
            seen += line
            if m := re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line):
                yield proc, m.group(0)
                return
        raise AssertionError(f"the exporter ended: {seen}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def scrape(address: str) -> str:
    with urllib.request.urlopen(address, timeout=30) as r:
        assert r.status == 200
        return str(r.read().decode())


def value(page: str, name: str, **labels: str) -> float:
    """The sample ``name{labels...}`` (labels matched as a subset) on a text-format page."""
    for line in page.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        if line[len(name)] in "{ " and all(got.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {name}{labels}")


def test_scrape_of_a_local_fleet_then_sigterm(tmp_path: Path) -> None:
    url = (tmp_path / "store").as_uri()
    make_fleet(url)
    with serve(url, "--min-interval", "0") as (proc, address):
        page = scrape(address)
        for name in FLEET_METRICS:
            assert f"# TYPE {name} " in page, name
        for name in ENGINE_METRICS:
            assert f"\n{name}" in page, name
        assert value(page, "slatedb_fleet_databases") == 2
        assert value(page, "slatedb_fleet_scan_ok") == 1
        for db in ("orders", "users"):
            assert value(page, "slatedb_database_state", database=db, state="live") == 1
            assert value(page, "slatedb_database_state", database=db, state="missing") == 0
            assert value(page, "slatedb_database_wal_backlog_ssts", database=db) >= 0
            assert value(page, "slatedb_database_manifest_lag", database=db) == 0
        assert value(page, "slatedb_database_sorted_runs", database="orders") == 1
        assert value(page, "slatedb_database_l0_ssts", database="orders") == 0
        assert value(page, "slatedb_database_l0_ssts", database="users") == 0
        age = value(page, "slatedb_database_last_compaction_age_seconds", database="orders")
        assert 0 <= age < 600
        assert 'slatedb_database_last_compaction_age_seconds{database="users"}' not in page

        # a database deleted outside destroy stays listed, as missing (issue 40, item 8)
        for p in sorted((tmp_path / "store" / "users").rglob("*"), reverse=True):
            p.rmdir() if p.is_dir() else p.unlink()
        page = scrape(address)
        assert value(page, "slatedb_database_state", database="users", state="missing") == 1

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


@pytest.mark.s3
def test_a_secret_in_the_store_url_never_reaches_the_page(moto_s3: object) -> None:
    from tests.conftest import MotoS3

    assert isinstance(moto_s3, MotoS3)
    secret = f"sk{uuid.uuid4().hex}"
    url = moto_s3.url(moto_s3.new_bucket()).replace("&secret_access_key=testing", "")
    url += f"&secret_access_key={secret}"
    make_fleet(url)
    with serve(url) as (proc, address):
        page = scrape(address)
        assert secret not in page, "the store secret is on the metrics page"
        assert value(page, "slatedb_database_state", database="orders", state="live") == 1
        info = [line for line in page.splitlines() if line.startswith("slatedb_fleet_info{")]
        assert 'store="s3://t-' in info[0], info  # the bucket, without the credentials
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        rest = proc.communicate(timeout=10)[0]
        assert proc.returncode == 0
        assert secret not in rest and "Traceback" not in rest


def test_a_non_loopback_host_is_refused_without_the_flag(tmp_path: Path) -> None:
    res = subprocess.run(
        [*EXPORTER, "--url", tmp_path.as_uri(), "--host", "0.0.0.0", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert res.returncode == 2
    assert "--allow-non-loopback" in res.stderr


def test_a_fast_scrape_reuses_the_last_scan(tmp_path: Path) -> None:
    url = (tmp_path / "store").as_uri()
    make_fleet(url)
    store = open_store(url)
    t = [0.0]
    collector = FleetCollector(store, min_interval_s=15, clock=lambda: t[0])
    registry = CollectorRegistry()
    registry.register(collector)
    generate_latest(registry)
    before = store.counters.total()
    t[0] = 14.0
    generate_latest(registry)
    assert store.counters.total() == before  # within the interval: no request
    t[0] = 15.0
    generate_latest(registry)
    assert store.counters.total() > before


def test_engine_counters_count_this_processes_databases(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    registry.register(EngineCollector())

    def read() -> str:
        return generate_latest(registry).decode()

    page = read()
    for name in ENGINE_METRICS:
        assert name in page, name
    puts = value(page, "slatedb_durable_put_seconds_count")
    written = value(page, "slatedb_store_bytes_total", direction="written")
    creates = value(page, "slatedb_store_requests_total", op="put_if_absent")
    hits = value(page, "slatedb_block_cache_hits_total")
    store = open_store((tmp_path / "s").as_uri())
    with Db.open("db", store, FAST) as db:
        for i in range(3):
            db.put(b"k%d" % i, b"x" * 1000)
        db.flush_memtable()
        for _ in range(2):
            assert db.get(b"k1") == b"x" * 1000
    del db, store
    page = read()
    assert value(page, "slatedb_durable_put_seconds_count") == puts + 3
    assert value(page, "slatedb_store_bytes_total", direction="written") >= written + 3000
    assert value(page, "slatedb_store_requests_total", op="put_if_absent") > creates
    assert value(page, "slatedb_block_cache_hits_total") > hits
    assert value(page, "slatedb_durable_put_seconds_bucket", le="+Inf") >= puts + 3
