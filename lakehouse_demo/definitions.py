"""Dagster definitions of the demo, for ``dagster dev -m lakehouse_demo.definitions`` (the
repository's ``workspace.yaml`` loads only the maintenance definitions) and for the CLI, which
runs the same job in-process.

Under ``dagster dev`` the resource is read from the environment: ``LAKEHOUSE_DEMO_DIR`` (default
``demo-data``) and ``LAKEHOUSE_DEMO_STORE_URL`` (default ``<dir>/store``), so the job launched from
the UI works on the data ``make demo`` left.
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from lakehouse_demo.pipeline import ASSETS, demo_job
from lakehouse_demo.resource import DemoResource


def resource_for(
    data_dir: Path,
    store_url: str,
    *,
    new_orders: int = 20_000,
    gc_grace_s: float = 2.0,
    spark_master: str = "local[2]",
) -> DemoResource:
    return DemoResource(
        store_url=store_url,
        input_dir=str((data_dir / "input").resolve()),
        delta_dir=str((data_dir / "delta" / "orders").resolve()),
        new_orders=new_orders,
        gc_grace_s=gc_grace_s,
        spark_master=spark_master,
    )


def build_definitions(demo: DemoResource) -> dg.Definitions:
    return dg.Definitions(assets=ASSETS, jobs=[demo_job], resources={"demo": demo})


def _from_env() -> DemoResource:
    data_dir = Path(os.environ.get("LAKEHOUSE_DEMO_DIR", "demo-data"))
    url = os.environ.get("LAKEHOUSE_DEMO_STORE_URL", str((data_dir / "store").resolve()))
    return resource_for(data_dir, url)


defs = build_definitions(_from_env())
