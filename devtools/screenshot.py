"""Screenshots of the Dagster UI for the docs, taken with Debian's headless Chromium:

* ``asset_graph.png`` (``--out``): the asset graph, the "Lineage" page with every group expanded;
* ``fleet_view.png`` (beside it): the latest materialization of ``slatedb_fleet`` in the asset's
  Events view: the headline (its description, rendered as markdown) and the fleet table;
* ``fleet_trend.png`` (beside it): the Plots view of ``slatedb_fleet``'s metadata scrolled to one
  database's trends (``--trend-key``, default ``orders/l0_ssts``).

Writes the sample databases into a temporary directory (as ``make ui`` does: one pass of every
asset and check, then several fleet_sensor ticks, so the pages show real status and history),
starts ``dagster dev`` on a free port of 127.0.0.1 with its own DAGSTER_HOME (telemetry and the
welcome dialog off), waits for it and its code location, drives one headless Chromium over the
DevTools protocol (:mod:`devtools.browser`: pages of 127.0.0.1 only), and stops every process it
started.

    python -m devtools.screenshot --out docs/img/asset_graph.png
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]

from devtools.browser import CHROMIUM, Browser, BrowserError
from devtools.devserver import (
    LOCATIONS,
    REPO,
    graphql,
    server_up,
    start_dagster_dev,
    stop_dagster_dev,
    wait_for,
    write_dagster_home,
)
from orchestration.settings import CONFIG_ENV, DEFAULT_CONFIG, STORE_URL_ENV
from slatedb_core.testing.ports import free_port

LINEAGE_PATH = "/asset-groups"
"""The "Lineage" entry of the navigation in dagster 1.13: the global asset graph, every group."""
WORK_ENV = "ASSET_GRAPH_SCREENSHOT_DIR"
"""Set to the temporary directory in the environment of every process the script starts."""
FLEET_PATH = "/assets/slatedb_fleet"
"""The fleet view's asset page; ``?view=events`` lists its materializations, the latest selected,
with its description (the headline, as markdown) and metadata (the fleet table)."""
UI_PREFERENCES = {
    "dagster-nav-collapsed": "true",
    "asset-graph-direction": '"vertical"',
}
"""localStorage entries (JSON) the UI keeps for its preferences, set before the first shot:
"Hide navigation" (the pages get the width), and the lineage graph laid out top to bottom, so the
groups, whose assets have no dependencies between them, sit side by side in a wide image instead
of one tall column zoomed out past the point where Dagster draws the nodes' details."""
ASSET_GROUPS = """
{ assetNodes { id assetKey { path } groupName repository { name location { name } } } }
"""


class ScreenshotError(RuntimeError):
    pass


def lineage_url(base: str, asset_nodes: list[dict[str, Any]]) -> str:
    """The lineage page with every group expanded (a fresh browser profile shows them collapsed).

    The page keeps its expanded groups in the ``expanded`` query parameter as a comma-separated
    list of group ids: ``global@global:<group>``, or ``<repository>@<location>:<group>`` when the
    "groups per code location" feature flag is on; both forms are listed (unknown ids are
    ignored)."""
    ids: list[str] = []
    for node in asset_nodes:
        group = node.get("groupName")
        if not group:
            continue
        repo = node["repository"]
        for gid in (f"global@global:{group}", f"{repo['name']}@{repo['location']['name']}:{group}"):
            if gid not in ids:
                ids.append(gid)
    query = urllib.parse.urlencode({"expanded": ",".join(sorted(ids))}) if ids else ""
    return f"{base}{LINEAGE_PATH}" + (f"?{query}" if query else "")


def _config(work: Path) -> Path:
    """The repository's orchestration settings with the store and the Delta export root moved
    into ``work``, so nothing is written into the working tree."""
    raw: dict[str, Any] = yaml.safe_load(DEFAULT_CONFIG.read_text()) or {}
    raw.setdefault("store", {})["url"] = str(work / "store")
    raw.setdefault("managed", {})["export_root"] = str(work / "delta-exports")
    path = work / "slatedb.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _sample_data(env: dict[str, str], work: Path, timeout_s: float) -> None:
    command = [
        sys.executable,
        "-m",
        "devtools.sample_data",
        "--dir",
        str(work / "store"),
        "--register",
        "--materialize",
    ]
    try:
        done = subprocess.run(
            command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired as e:
        raise ScreenshotError(
            f"sample data took more than {timeout_s}s: {' '.join(command)}"
        ) from e
    if done.returncode != 0:
        raise ScreenshotError(
            f"sample data failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
        )
    print(done.stdout.strip())


@dataclass(frozen=True)
class Shot:
    """One PNG: its path and viewport size."""

    out: Path
    width: int
    height: int


_CLICK = """(() => {
  const b = [...document.querySelectorAll('button')].find(x => x.textContent.trim() === %s);
  if (!b) return false;
  b.click();
  return true;
})()"""
_TEXT_ELEMENT = (
    "[...document.querySelectorAll('div,span,h1,h2,h3,h4')]"
    ".find(x => x.children.length === 0 && x.textContent.trim() === %s)"
)


def shoot_lineage(
    browser: Browser, url: str, assets: list[dict[str, Any]], shot: Shot, settle_s: float
) -> str:
    page = lineage_url(url, assets)
    browser.resize(shot.width, shot.height)
    browser.goto(page)
    # Nodes outside the viewport are not drawn: wait for any asset's name.
    names = sorted(n["assetKey"]["path"][-1] for n in assets if n.get("groupName"))
    browser.wait_for(
        f"{json.dumps(names)}.some(n => document.body.innerText.includes(n))", "the asset graph"
    )
    time.sleep(settle_s)  # charts and layout finish drawing
    browser.screenshot(shot.out)
    return page


def shoot_fleet_view(browser: Browser, url: str, shot: Shot, settle_s: float) -> str:
    page = f"{url}{FLEET_PATH}?view=events"
    browser.resize(shot.width, shot.height)
    browser.goto(page)
    browser.wait_for(
        "document.body.innerText.includes('needs_attention')",
        "the fleet table of slatedb_fleet (no materialization yet?)",
    )
    time.sleep(settle_s)  # charts and layout finish drawing
    browser.screenshot(shot.out)
    return page


def shoot_fleet_trend(browser: Browser, url: str, shot: Shot, key: str, settle_s: float) -> str:
    page = f"{url}{FLEET_PATH}"
    browser.resize(shot.width, shot.height)
    browser.goto(page)
    browser.wait_for(_CLICK % json.dumps("Plots"), "the Plots button of the asset's metadata")
    title = _TEXT_ELEMENT % json.dumps(key)
    browser.wait_for(f"!!{title}", f"the plot of {key} (is it a trend key of slatedb_fleet?)")
    time.sleep(settle_s)  # charts and layout finish drawing
    browser.evaluate(f"{title}.scrollIntoView({{block: 'start'}})")
    time.sleep(1.0)
    browser.screenshot(shot.out)
    return f"{page} (Metadata > Plots, scrolled to {key})"


def take_screenshot(
    out: Path,
    *,
    width: int = 2560,
    height: int = 720,
    fleet: Shot | None = None,
    trend: Shot | None = None,
    trend_key: str = "orders/l0_ssts",
    settle_s: float = 3.0,
    startup_timeout_s: float = 180.0,
    sample_timeout_s: float = 600.0,
    keep: bool = False,
) -> None:
    """The asset graph into ``out``; with ``fleet`` and ``trend``, the fleet view and one
    database's plot too, from the same dagster dev and browser."""
    if not CHROMIUM.exists():
        raise ScreenshotError(
            f"{CHROMIUM} not found: install Debian's chromium (apt-get install chromium)"
        )
    graph = Shot(out.resolve(), width, height)
    work = Path(tempfile.mkdtemp(prefix="asset-graph-screenshot-"))
    try:
        home = work / "dagster_home"
        write_dagster_home(home)
        env = {k: v for k, v in os.environ.items() if k != STORE_URL_ENV}
        env.update(
            {
                "DAGSTER_HOME": str(home),
                CONFIG_ENV: str(_config(work)),
                WORK_ENV: str(work),
                "DAGSTER_DISABLE_TELEMETRY": "1",
            }
        )
        started = time.monotonic()
        _sample_data(env, work, sample_timeout_s)
        print(
            f"sample data, one pass of every asset, fleet_sensor ticks: "
            f"{time.monotonic() - started:.0f}s"
        )
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log_path = work / "dagster_dev.log"
        written: list[tuple[Shot, str]] = []
        with log_path.open("wb") as log:
            proc = start_dagster_dev(port, env, log)
            left: list[int] = []
            try:
                wait_for(lambda: server_up(url), "/server_info", startup_timeout_s, proc)
                wait_for(
                    lambda: graphql(url, LOCATIONS)["repositoriesOrError"].get("nodes"),
                    "the code location",
                    startup_timeout_s,
                    proc,
                )
                assets = wait_for(
                    lambda: graphql(url, ASSET_GROUPS)["assetNodes"],
                    "the asset nodes",
                    startup_timeout_s,
                    proc,
                )
                print(f"dagster dev up on {url} with {len(assets)} assets")
                time.sleep(settle_s)  # the daemon's first sensor ticks
                with Browser(work, graph.width, graph.height) as browser:
                    browser.goto(url)
                    for key, value in UI_PREFERENCES.items():
                        browser.evaluate(
                            f"localStorage.setItem({json.dumps(key)}, {json.dumps(value)})"
                        )
                    written.append((graph, shoot_lineage(browser, url, assets, graph, settle_s)))
                    if fleet is not None:
                        written.append((fleet, shoot_fleet_view(browser, url, fleet, settle_s)))
                    if trend is not None:
                        written.append(
                            (trend, shoot_fleet_trend(browser, url, trend, trend_key, settle_s))
                        )
            except BrowserError as e:
                raise ScreenshotError(
                    f"{e}\n--- chromium log (tail) ---\n{_tail(work / 'chromium.log')}"
                ) from e
            except ScreenshotError:
                raise
            except (RuntimeError, TimeoutError) as e:
                raise ScreenshotError(
                    f"{e}\n--- dagster dev log (tail) ---\n{_tail(log_path)}"
                ) from e
            finally:
                left = stop_dagster_dev(proc, str(home))
            if left:
                print(
                    f"warning: had to SIGKILL processes left by dagster dev: {left}",
                    file=sys.stderr,
                )
        for shot, page in written:
            print(f"wrote {shot.out} ({shot.width}x{shot.height}) from {page}")
    finally:
        if keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def _tail(path: Path, chars: int = 3000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else "(none)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--out",
        type=Path,
        default=REPO / "docs/img/asset_graph.png",
        help="the asset graph's PNG (default: docs/img/asset_graph.png); fleet_view.png "
        "and fleet_trend.png are written beside it",
    )
    p.add_argument("--width", type=int, default=2560, help="of the asset graph")
    p.add_argument("--height", type=int, default=720, help="of the asset graph")
    p.add_argument("--graph-only", action="store_true", help="only the asset graph")
    p.add_argument("--fleet-size", default="2560x1200", help="viewport of fleet_view.png (WxH)")
    p.add_argument("--trend-size", default="1800x1000", help="viewport of fleet_trend.png (WxH)")
    p.add_argument(
        "--trend-key",
        default="orders/l0_ssts",
        help="the slatedb_fleet metadata key whose plot fleet_trend.png shows",
    )
    p.add_argument(
        "--settle",
        type=float,
        default=3.0,
        help="seconds for a page to finish drawing after its content appeared",
    )
    p.add_argument(
        "--startup-timeout",
        type=float,
        default=180.0,
        help="seconds to wait for dagster dev and its code location",
    )
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    a = p.parse_args(argv)
    fleet = trend = None
    try:
        if not a.graph_only:
            fleet = Shot(a.out.resolve().with_name("fleet_view.png"), *_size(a.fleet_size))
            trend = Shot(a.out.resolve().with_name("fleet_trend.png"), *_size(a.trend_size))
        take_screenshot(
            a.out,
            width=a.width,
            height=a.height,
            fleet=fleet,
            trend=trend,
            trend_key=a.trend_key,
            settle_s=a.settle,
            startup_timeout_s=a.startup_timeout,
            keep=a.keep,
        )
    except ScreenshotError as e:
        print(f"screenshot failed: {e}", file=sys.stderr)
        return 1
    return 0


def _size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise ScreenshotError(f"a size is WIDTHxHEIGHT, e.g. 1800x1000; got {text!r}") from None
    if w < 200 or h < 200:
        raise ScreenshotError(f"a size must be at least 200x200, got {text!r}")
    return w, h


if __name__ == "__main__":
    sys.exit(main())
