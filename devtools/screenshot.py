"""Screenshot of the Dagster asset graph (the "Global asset lineage" page) for the docs, taken with
Debian's headless Chromium.

Writes the sample databases into a temporary directory (as ``make ui`` does, with one pass of
every asset and check, so the graph shows real status), starts ``dagster dev`` on a free port of
127.0.0.1 with its own DAGSTER_HOME (telemetry off), waits for it and its code location, has
Chromium screenshot the lineage page, and stops every process it started.

    python -m devtools.screenshot --out docs/img/asset_graph.png
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]

from devtools.devserver import (
    LOCATIONS,
    REPO,
    free_port,
    graphql,
    server_up,
    start_dagster_dev,
    stop_dagster_dev,
    stop_process_group,
    wait_for,
    write_dagster_home,
)
from orchestration.settings import CONFIG_ENV, DEFAULT_CONFIG, STORE_URL_ENV

CHROMIUM = Path("/usr/bin/chromium")
LINEAGE_PATH = "/asset-groups"
"""The "Lineage" entry of the navigation in dagster 1.13: the global asset graph, every group."""
WORK_ENV = "ASSET_GRAPH_SCREENSHOT_DIR"
"""Set to the temporary directory in the environment of every process the script starts."""
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ASSET_GROUPS = """
{ assetNodes { id groupName repository { name location { name } } } }
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
    command = [sys.executable, "-m", "devtools.sample_data", "--dir", str(work / "store"),
               "--register", "--materialize"]
    try:
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        raise ScreenshotError(f"sample data took more than {timeout_s}s: {' '.join(command)}") from e
    if done.returncode != 0:
        raise ScreenshotError(
            f"sample data failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
        )
    print(done.stdout.strip())


def chromium_command(url: str, out: Path, profile: Path, width: int, height: int,
                     budget_ms: int) -> list[str]:
    return [
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", f"--user-data-dir={profile}", "--hide-scrollbars",
        "--run-all-compositor-stages-before-draw", f"--window-size={width},{height}",
        f"--virtual-time-budget={budget_ms}", f"--screenshot={out}", url,
    ]


def _chromium(url: str, out: Path, work: Path, width: int, height: int, budget_ms: int,
              timeout_s: float) -> None:
    profile = Path(tempfile.mkdtemp(prefix="chromium-profile-", dir=work))
    log_path = work / "chromium.log"
    tmp_out = work / "screenshot.png"
    # Chromium puts its singleton socket under TMPDIR and aborts ("Socket path too long") when
    # that path passes the 107 bytes a Unix socket allows: give it a short TMPDIR.
    short = Path(tempfile.mkdtemp(prefix="chromium-", dir="/tmp"))
    env = {**os.environ, "TMPDIR": str(short), WORK_ENV: str(work)}
    try:
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                chromium_command(url, tmp_out, profile, width, height, budget_ms),
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True,  # its own process group: zygote, renderer and GPU go too
            )
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired as e:
                raise ScreenshotError(f"chromium did not finish within {timeout_s}s") from e
            finally:
                stop_process_group(proc)
    finally:
        shutil.rmtree(short, ignore_errors=True)
    if proc.returncode != 0 or not tmp_out.exists():
        raise ScreenshotError(
            f"chromium exited with {proc.returncode} and "
            f"{'a' if tmp_out.exists() else 'no'} screenshot:\n{log_path.read_text()[-3000:]}"
        )
    with tmp_out.open("rb") as f:
        if f.read(8) != PNG_SIGNATURE:
            raise ScreenshotError(f"chromium wrote something that is not a PNG: {tmp_out}")
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tmp_out, out)


def take_screenshot(
    out: Path,
    *,
    width: int = 1600,
    height: int = 1400,
    budget_ms: int = 20_000,
    settle_s: float = 3.0,
    startup_timeout_s: float = 180.0,
    sample_timeout_s: float = 600.0,
    keep: bool = False,
) -> None:
    if not CHROMIUM.exists():
        raise ScreenshotError(
            f"{CHROMIUM} not found: install Debian's chromium (apt-get install chromium)"
        )
    out = out.resolve()
    work = Path(tempfile.mkdtemp(prefix="asset-graph-screenshot-"))
    try:
        home = work / "dagster_home"
        write_dagster_home(home)
        env = {k: v for k, v in os.environ.items() if k != STORE_URL_ENV}
        env.update({"DAGSTER_HOME": str(home), CONFIG_ENV: str(_config(work)), WORK_ENV: str(work),
                    "DAGSTER_DISABLE_TELEMETRY": "1"})
        started = time.monotonic()
        _sample_data(env, work, sample_timeout_s)
        print(f"sample data and one pass of every asset: {time.monotonic() - started:.0f}s")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log_path = work / "dagster_dev.log"
        with log_path.open("wb") as log:
            proc = start_dagster_dev(port, env, log)
            left: list[int] = []
            try:
                wait_for(lambda: server_up(url), "/server_info", startup_timeout_s, proc)
                wait_for(lambda: graphql(url, LOCATIONS)["repositoriesOrError"].get("nodes"),
                         "the code location", startup_timeout_s, proc)
                assets = wait_for(lambda: graphql(url, ASSET_GROUPS)["assetNodes"],
                                  "the asset nodes", startup_timeout_s, proc)
                print(f"dagster dev up on {url} with {len(assets)} assets")
                time.sleep(settle_s)  # the daemon's first sensor ticks
                page = lineage_url(url, assets)
                print(f"screenshot of {page}")
                _chromium(page, out, work, width, height, budget_ms,
                          timeout_s=budget_ms / 1000 + 120)
            except ScreenshotError:
                raise
            except (RuntimeError, TimeoutError) as e:
                tail = log_path.read_text(errors="replace")[-3000:]
                raise ScreenshotError(f"{e}\n--- dagster dev log (tail) ---\n{tail}") from e
            finally:
                left = stop_dagster_dev(proc, str(home))
            if left:
                print(f"warning: had to SIGKILL processes left by dagster dev: {left}",
                      file=sys.stderr)
        print(f"wrote {out} ({width}x{height}) from {LINEAGE_PATH}")
    finally:
        if keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", type=Path, default=REPO / "docs/img/asset_graph.png",
                   help="PNG to write (default: docs/img/asset_graph.png)")
    p.add_argument("--width", type=int, default=1600)
    p.add_argument("--height", type=int, default=1400)
    p.add_argument("--budget-ms", type=int, default=20_000,
                   help="Chromium's --virtual-time-budget: how long the page may render")
    p.add_argument("--startup-timeout", type=float, default=180.0,
                   help="seconds to wait for dagster dev and its code location")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    a = p.parse_args(argv)
    try:
        take_screenshot(a.out, width=a.width, height=a.height, budget_ms=a.budget_ms,
                        startup_timeout_s=a.startup_timeout, keep=a.keep)
    except ScreenshotError as e:
        print(f"screenshot failed: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
