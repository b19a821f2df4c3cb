"""The orders as the table stores them: the key is the order id, the value the other columns as
one JSON object (what ``spark_jobs.ingest`` writes with ``value_format="json"``). Decoding them
back into the dataset's schema, querying a key range, and the new orders a writer adds while the
checkpoint is read."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from lakehouse_demo.dataset import FIRST_DAY, KEY_COLUMN, SCHEMA, DatasetOptions, generate
from slatedb_core import Table

NEW_ORDERS_SEQ_START = 5_000_000
"""Sequence numbers of the orders written while the checkpoint is read: above any the first
ingest makes, so they are new keys."""


def decode_orders(kv: pa.RecordBatch | pa.Table) -> pa.Table:
    """(key, JSON value) rows back into the orders schema."""
    values = kv.column(1)
    if len(values) == 0:
        return SCHEMA.empty_table()
    body = b"\n".join(v.as_py() for v in values)
    parsed = pajson.read_json(
        pa.BufferReader(body),
        parse_options=pajson.ParseOptions(
            explicit_schema=pa.schema([f for f in SCHEMA if f.name != KEY_COLUMN]),
            unexpected_field_behavior="ignore",
        ),
    )
    keys = pc.cast(kv.column(0), pa.string())
    return pa.Table.from_arrays([keys, *parsed.columns], schema=SCHEMA)


def query(table: Table, start: bytes, end: bytes) -> dict[str, Any]:
    """Orders in [start, end): count and total amount."""
    rows = 0
    amount = 0.0
    for batch in table.scan_arrow(start, end):
        orders = decode_orders(batch)
        rows += orders.num_rows
        amount += float(pc.sum(orders.column("amount")).as_py() or 0.0)
    return {"rows": rows, "amount": round(amount, 2)}


def encode_orders(orders: pa.Table) -> pa.Table:
    """Orders in the dataset's schema as (key, JSON value) rows, as the table stores them."""
    values = [
        json.dumps(
            {
                "customer_id": r["customer_id"],
                "amount": r["amount"],
                "currency": r["currency"],
                "status": r["status"],
                "ts": r["ts"].isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            },
            separators=(",", ":"),
        ).encode()
        for r in orders.to_pylist()
    ]
    return pa.table(
        {
            "key": pc.cast(orders.column(KEY_COLUMN), pa.binary()),
            "value": pa.array(values, pa.binary()),
        }
    )


def new_orders(n: int, batches: int, days: int, run: int) -> list[pa.Table]:
    """New orders arriving: the last two days of every region, above the first ingest's
    sequence numbers (and above those of earlier demo runs: ``run``), as (key, JSON value)
    batches."""
    opts = DatasetOptions(rows=n, days=days, seed=99 + run)
    orders = generate(opts, seq_start=NEW_ORDERS_SEQ_START + (run % 40) * 100_000)
    day = pc.cast(pc.utf8_slice_codeunits(orders.column(KEY_COLUMN), 7, 15), pa.int64())
    last_days = int((FIRST_DAY + timedelta(days=days - 2)).strftime("%Y%m%d"))
    kv = encode_orders(orders.filter(pc.greater_equal(day, last_days)))
    batch = max(1, -(-kv.num_rows // batches))
    return [kv.slice(i, batch) for i in range(0, kv.num_rows, batch)]
