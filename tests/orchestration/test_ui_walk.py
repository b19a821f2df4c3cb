"""A headless-Chromium walk of the UI the way an operator meets it (issue 40, item 10 and "check
the result the way a user meets it"): ``dagster dev`` on 127.0.0.1 with this project's definitions
over a temporary fleet of two databases; the fleet view names both, and health_check_job's
Launchpad has a partition picker offering them. Reuses devtools.browser and devtools.devserver
(what the screenshot test uses); skips without Debian's chromium."""

from __future__ import annotations

import os
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml  # type: ignore[import-untyped]

from devtools.browser import CHROMIUM, Browser
from devtools.devserver import (
    graphql,
    processes_with,
    server_up,
    start_dagster_dev,
    stop_dagster_dev,
    wait_for,
    write_dagster_home,
)
from devtools.sample_data import write_database
from devtools.sample_history import tick
from orchestration.partitions import DATABASES
from orchestration.settings import CONFIG_ENV, DEFAULT_CONFIG, STORE_URL_ENV, load_settings
from slatedb_core.testing.ports import free_port

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason=f"{CHROMIUM} missing: apt-get install chromium"
    ),
]

DBS = ("billing", "orders")
LOCATION = "orchestration.definitions"
LOCATIONS = "{ repositoriesOrError { ... on RepositoryConnection { nodes { name } } } }"


def _config(work: Path) -> Path:
    raw = yaml.safe_load(DEFAULT_CONFIG.read_text()) or {}
    raw["store"] = {"url": str(work / "store")}
    raw["managed"].update({"tables": [], "discover_prefix": "", "export_root": str(work / "delta")})
    raw["schedules"]["running"] = False
    raw["sensors_running"] = False
    path = work / "slatedb.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _fleet(home: Path, config: Path) -> None:
    """Two databases, their partitions and one fleet_sensor tick (the fleet view's record)."""
    from orchestration.definitions import build_definitions

    settings = load_settings(config)
    defs = build_definitions(settings)
    resources = defs.resources or {}
    store = resources["store"].open()
    for i, db in enumerate(DBS):
        write_database(store, db, prefix=f"{db}-", l0_ssts=2 + i, rows_per_sst=50)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions(DATABASES, list(DBS))
        _, report = tick(
            instance,
            defs,
            resources["store"],
            resources["managed"],
            None,
            "ui walk",
        )
        assert report.fleet_materialized, report


def _text_of(browser: Browser) -> str:
    return str(browser.evaluate("document.body.innerText"))


def test_the_fleet_view_and_the_launchpad_partition_picker(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    home = work / "dagster_home"
    write_dagster_home(home)
    config = _config(work)
    _fleet(home, config)
    env = {k: v for k, v in os.environ.items() if k != STORE_URL_ENV}
    env.update(
        {
            "DAGSTER_HOME": str(home),
            CONFIG_ENV: str(config),
            "DAGSTER_DISABLE_TELEMETRY": "1",
            "TMPDIR": str(work),
        }
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with (work / "dagster_dev.log").open("wb") as log:
        proc = start_dagster_dev(port, env, log)
        try:
            wait_for(lambda: server_up(url), "/server_info", 180, proc)
            wait_for(
                lambda: graphql(url, LOCATIONS)["repositoriesOrError"].get("nodes"),
                "the code location",
                180,
                proc,
            )
            with Browser(work, 1600, 1000) as browser:
                # the fleet view: its latest materialization's table names both databases
                browser.goto(f"{url}/assets/slatedb_fleet?view=events")
                browser.wait_for(
                    "document.body.innerText.includes('needs_attention')",
                    "the fleet table of slatedb_fleet",
                    timeout_s=120,
                )
                fleet = _text_of(browser)
                for db in DBS:
                    assert db in fleet, f"{db} not in the fleet view:\n{fleet[:3000]}"
                # the Launchpad of health_check_job: only a partitioned job has the
                # "Partitions" tab and the picker, an input "Partition"; a real click on it
                # opens the list of partition keys
                browser.goto(f"{url}/locations/{LOCATION}/jobs/health_check_job/playground")
                rect = browser.wait_for(
                    "(() => { const i = document.querySelector('input[placeholder=\"Partition\"]');"
                    " if (!i) return null; const r = i.getBoundingClientRect();"
                    " return [r.x + r.width / 2, r.y + r.height / 2]; })()",
                    "the partition picker of health_check_job's Launchpad",
                    timeout_s=120,
                )
                assert "Partitions" in _text_of(browser)
                offered = ""
                deadline = time.monotonic() + 90
                while not offered and time.monotonic() < deadline:
                    # click until the list opens: under load the first click can land before
                    # the picker has its partitions
                    for kind in ("mousePressed", "mouseReleased"):
                        browser.call(
                            "Input.dispatchMouseEvent",
                            type=kind,
                            x=rect[0],
                            y=rect[1],
                            button="left",
                            clickCount=1,
                        )
                    time.sleep(2)
                    text = _text_of(browser)
                    offered = text if all(db in text for db in DBS) else ""
                    if not offered:
                        browser.call("Input.dispatchKeyEvent", type="keyDown", key="Escape")
                assert offered, f"the picker did not offer {DBS}:\n{_text_of(browser)[-3000:]}"
        finally:
            left = stop_dagster_dev(proc, str(home))
    assert left == [], f"had to SIGKILL {left}"
    deadline = time.monotonic() + 30
    while processes_with(str(home)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert processes_with(str(home)) == []
