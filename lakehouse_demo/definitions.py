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
from orchestration.resources import holds_secret, refuse_plain_secrets

STORE_URL_ENV = "LAKEHOUSE_DEMO_STORE_URL"
"""The demo's store URL under ``dagster dev``; a URL with a credential reaches the resource
through it whatever its source."""


def resource_for(
    data_dir: Path,
    store_url: str,
    *,
    new_orders: int = 20_000,
    gc_grace_s: float = 2.0,
    spark_master: str = "local[2]",
) -> DemoResource:
    return DemoResource(
        store_url=_store_url_config(store_url),
        input_dir=str((data_dir / "input").resolve()),
        delta_dir=str((data_dir / "delta" / "orders").resolve()),
        new_orders=new_orders,
        gc_grace_s=gc_grace_s,
        spark_master=spark_master,
    )


def _store_url_config(store_url: str) -> str:
    """The resource's ``store_url``: a URL that carries a credential (``make demo-s3``'s keys, a
    ``txn`` password) as ``dg.EnvVar`` of ``LAKEHOUSE_DEMO_STORE_URL``, set to it here when it
    is not already, so Dagster's snapshots (and the runs the UI shows later) hold the variable's
    name, never the URL (issue 39, item 2). The CLI runs the job in this process, which reads
    the variable when the run starts."""
    if not holds_secret("store_url", store_url):
        return store_url
    os.environ[STORE_URL_ENV] = store_url
    return dg.EnvVar(STORE_URL_ENV)


def build_definitions(demo: DemoResource) -> dg.Definitions:
    return dg.Definitions(
        assets=ASSETS, jobs=[demo_job], resources=refuse_plain_secrets({"demo": demo})
    )


def _from_env() -> DemoResource:
    data_dir = Path(os.environ.get("LAKEHOUSE_DEMO_DIR", "demo-data"))
    url = os.environ.get(STORE_URL_ENV, str((data_dir / "store").resolve()))
    return resource_for(data_dir, url)


defs = build_definitions(_from_env())
