"""The ten-second summary printed at the end of the demo, built only from what the run measured
(the assets' outputs) and from the files it left."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table as RichTable
from rich.text import Text

from slatedb_core.store.redact import redact_url

STEP_TITLES: dict[str, str] = {
    "setup": "0 dataset (Parquet)",
    "orders_table": "1 ingest (Spark local[2])",
    "compacted_shards": "2 compaction (Spark)",
    "daily_checkpoint": "3 named checkpoint",
    "checkpoint_read_under_writes": "4 read at checkpoint + writes",
    "rescaled_table": "5 rescale (split + merge)",
    "scratch_clone_gc": "6 clone, soft destroy, GC",
    "orders_delta_export": "7 Delta export",
}


@dataclass(frozen=True)
class RunFacts:
    """What the CLI knows besides the assets' outputs."""

    mode: str
    """'reset' or 'reuse', with what it did."""
    store_url: str
    data_dir: str
    dagster_home: str
    run_id: str
    setup: dict[str, Any]
    total_s: float
    log_path: str = ""
    """Spark's and Dagster's log output of the run."""
    store_note: str = ""


REPO = Path(__file__).resolve().parents[1]
MAKE_DEMO_DIR = "demo-data"
"""The Makefile's default ``DEMO_DIR``."""


def ui_hint(data_dir: Path) -> str:
    """The command that opens the Dagster UI on the run's instance (``<data_dir>/dagster_home``).
    ``make ui`` opens ``$(CURDIR)/$(DEMO_DIR)/dagster_home``: so ``DEMO_DIR`` relative to the
    repository (any directory can be reached that way); without the Makefile (an installed
    package), ``dagster dev`` with ``DAGSTER_HOME`` set."""
    data = Path(os.path.abspath(data_dir))
    if not (REPO / "Makefile").is_file():
        return f"DAGSTER_HOME={shlex.quote(str(data / 'dagster_home'))} dagster dev"
    rel = os.path.relpath(data, REPO)
    return "make ui" if rel == MAKE_DEMO_DIR else f"make ui DEMO_DIR={shlex.quote(rel)}"


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def step_lines(out: dict[str, dict[str, Any]], setup: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(step, seconds, what it did) per step."""
    ing = out["orders_table"]
    comp = out["compacted_shards"]
    cp = out["daily_checkpoint"]
    rd = out["checkpoint_read_under_writes"]
    rs = out["rescaled_table"]
    gc = out["scratch_clone_gc"]
    dx = out["orders_delta_export"]
    match = "= checkpoint" if dx["matches_checkpoint"] else f"!= CHECKPOINT {dx['checkpoint_rows']}"
    return [
        (
            "setup",
            f"{setup['duration_s']:.1f}",
            f"{setup['rows']:,} orders, {setup['files']} files, {_mb(setup['bytes'])} "
            f"({setup['action']})",
        ),
        (
            "orders_table",
            f"{ing['duration_s']:.1f}",
            f"{ing['rows']:,} rows -> {ing['shards']} shards, {ing['ssts']} SSTs, "
            f"{_mb(ing['bytes'])} (Spark job {ing['spark_job_s']:.1f}s)",
        ),
        (
            "compacted_shards",
            f"{comp['duration_s']:.1f}",
            f"{comp['compactions']} compactions: L0 {comp['l0_ssts_before']} -> "
            f"{comp['l0_ssts']} SSTs, {comp['sorted_runs']} sorted runs of {comp['ssts']} SSTs, "
            f"{_mb(comp['bytes_in'])} rewritten",
        ),
        (
            "daily_checkpoint",
            f"{cp['duration_s']:.1f}",
            f"'{cp['name']}' on {len(cp['checkpoints'])} shards (map {cp['shard_map_id']}), "
            f"{cp['rows']:,} rows",
        ),
        (
            "checkpoint_read_under_writes",
            f"{rd['duration_s']:.1f}",
            f"{rd['query']}: checkpoint {rd['checkpoint_rows']:,} rows in all "
            f"{rd['observations']} reads ({'unchanged' if rd['checkpoint_unchanged'] else 'CHANGED'})"
            f"; latest {rd['latest_rows_first']:,} -> {rd['latest_rows_last']:,} while "
            f"{rd['new_orders']:,} new orders arrived",
        ),
        (
            "rescaled_table",
            f"{rs['duration_s']:.1f}",
            f"split {rs['split']} ({rs['split_s']:.1f}s); merged {rs['merged']} "
            f"({rs['merge_s']:.1f}s); {rs['shards_before']} -> {rs['shards']} shards",
        ),
        (
            "scratch_clone_gc",
            f"{gc['duration_s']:.1f}",
            f"clone of {gc['clone_of']} ({gc['clone_rows']:,} rows); GC inside "
            f"{gc['gc_grace_s']:g}s grace kept it ({gc['objects_after_first_pass']} objects), "
            f"after: deleted {gc['objects_deleted']} objects, {gc['objects_left']} left (and "
            f"{gc.get('tombstone_objects', 0)} tombstone boundaries); retired "
            f"shards: {gc['retired_deleted']} of {len(gc['retired'])} deleted (the rest still "
            f"pinned by checkpoints)",
        ),
        (
            "orders_delta_export",
            f"{dx['duration_s']:.1f}",
            f"{dx['rows_read_back']:,} rows read back with deltalake "
            f"({match}), {dx['files']} files, version {dx['delta_version']}",
        ),
    ]


def render(out: dict[str, dict[str, Any]], facts: RunFacts, console: Console) -> None:
    steps = RichTable(title=None, show_edge=False, pad_edge=False, expand=False)
    steps.add_column("step", style="bold")
    steps.add_column("s", justify="right")
    steps.add_column("what happened")
    for name, secs, what in step_lines(out, facts.setup):
        steps.add_row(STEP_TITLES[name], secs, what)

    rs = out["rescaled_table"]
    shards = RichTable(show_edge=False, pad_edge=False)
    for col in ("shard db", "from", "to", "SSTs", "bytes"):
        shards.add_column(col, justify="right" if col in ("SSTs", "bytes") else "left")
    for s in rs["layout"]:
        shards.add_row(s["db"], s["start"][:28], s["end"][:28], str(s["ssts"]), _mb(s["bytes"]))

    headline = (
        f"[bold]{out['orders_table']['rows']:,}[/] rows ingested · "
        f"[bold]{rs['shards']}[/] shards · [bold]{rs['ssts']}[/] SSTs · "
        f"[bold]{_mb(rs['bytes'])}[/] in the table · total [bold]{facts.total_s:.0f}s[/]"
    )
    where = (
        f"data:   {facts.data_dir}  ({facts.mode})\n"
        f"store:  {redact_url(facts.store_url)}  table 'orders'{facts.store_note}\n"
        f"delta:  {out['orders_delta_export']['uri']}\n"
        f"runs:   {facts.dagster_home} (run {facts.run_id[:8]}); logs: {facts.log_path}\n"
        f"UI:     {ui_hint(Path(facts.data_dir))}  (DAGSTER_HOME={facts.dagster_home}), then "
        f"http://127.0.0.1:3000"
    )
    console.print(
        Panel(
            # ``where`` holds paths and a URL, not markup: a "[" in them must print as itself
            Group(headline, "", steps, "", shards, "", Text(where)),
            title="lakehouse demo: summary",
            border_style="green",
        )
    )
