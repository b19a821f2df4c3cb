"""What every step of the demo shares: the Dagster resource naming its data and knobs, how a step
hands back what it measured, and the Spark session of the Spark steps."""

from __future__ import annotations

from typing import Any

import dagster as dg
from dagster import Output
from pydantic import Field

from slatedb_core import ObjectStore, open_store

GROUP = "lakehouse_demo"
"""The Dagster asset group of the demo's steps."""


class DemoResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """Where the demo's data lives and the knobs of its steps."""

    store_url: str = Field(repr=False)
    """The object store holding the table (a directory, file:// or s3://bucket/prefix); one that
    carries a credential comes as ``dg.EnvVar`` (lakehouse_demo.definitions), and a repr of the
    resolved resource does not show it."""
    table_path: str = "orders"
    input_dir: str
    """The generated Parquet dataset."""
    delta_dir: str
    """Where the Delta export goes (a local directory)."""
    spark_master: str = "local[2]"
    new_orders: int = 20_000
    """Orders written directly while the checkpoint is read (step 4)."""
    write_batches: int = 8
    write_pause_s: float = 0.25
    """Pause between two batches of new orders, so the reader sees latest move step by step."""
    gc_grace_s: float = 2.0
    """``db_delete_grace`` of the GC pass that removes the scratch clone (short for the demo; the
    default is a day)."""
    checkpoint_lifetime_h: float = 24.0

    def store(self) -> ObjectStore:
        return open_store(self.store_url)


def metadata(values: dict[str, Any]) -> dict[str, dg.MetadataValue]:
    """A step's figures as Dagster metadata (shown in the UI)."""
    out: dict[str, dg.MetadataValue] = {}
    for k, v in values.items():
        if isinstance(v, bool):
            out[k] = dg.MetadataValue.bool(v)
        elif isinstance(v, int):
            out[k] = dg.MetadataValue.int(v)
        elif isinstance(v, float):
            out[k] = dg.MetadataValue.float(round(v, 3))
        elif isinstance(v, dict | list):
            out[k] = dg.MetadataValue.json(v)
        else:
            out[k] = dg.MetadataValue.text(str(v))
    return out


def step_output(step: dict[str, Any]) -> Output[dict[str, Any]]:
    """What a step measured: its output (the next steps and the CLI's summary read it) and its
    metadata (the snapshot, a JSON document, stays out of the metadata)."""
    return Output(step, metadata=metadata({k: v for k, v in step.items() if k != "snapshot"}))


def spark_session(master: str) -> Any:
    """The Spark session of the Spark steps (pyspark is imported only when a step needs it)."""
    from spark_jobs.session import SessionOptions, get_session

    spark = get_session(
        SessionOptions(master=master, app_name="lakehouse-demo", shuffle_partitions=4)
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark
