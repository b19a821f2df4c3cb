"""The demo's generated sample dataset: e-commerce orders with realistic, skewed keys.

Every row is one order::

    order_id     ord-<region>-<yyyymmdd>-<seq>   the key; unique, e.g. ord-eu-20250304-0001234
    customer_id  cus-<n>                         zipf-distributed: a few customers order a lot
    amount       float64                         log-normal, rounded to cents
    currency     string                          by region (JPY, EUR, AED, BRL, USD)
    status       string                          placed / paid / shipped / ... (weighted)
    ts           timestamp[ms, UTC]              within the order's day

Regions are skewed too (``REGIONS`` weights), so shards split at region boundaries start out of
very different sizes: the rescale step has a large shard to split (eu) and two small adjacent
ones to merge (me, sa).
Generation is vectorised (numpy + Arrow compute) and seeded, so a given ``rows``/``seed`` gives
the same files on every machine.
"""

from __future__ import annotations

import datetime as dt
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from slatedb_core.errors import InvalidArgument

REGIONS: tuple[tuple[str, str, float], ...] = (
    # region, currency, share of the orders
    ("ap", "JPY", 0.20),
    ("eu", "EUR", 0.45),
    ("me", "AED", 0.04),
    ("sa", "BRL", 0.05),
    ("us", "USD", 0.26),
)
STATUSES: tuple[tuple[str, float], ...] = (
    ("placed", 0.08),
    ("paid", 0.17),
    ("shipped", 0.25),
    ("delivered", 0.44),
    ("cancelled", 0.04),
    ("returned", 0.02),
)
FIRST_DAY = dt.date(2025, 3, 1)
SEQ_DIGITS = 7
KEY_COLUMN = "order_id"
SCHEMA = pa.schema(
    [
        (KEY_COLUMN, pa.string()),
        ("customer_id", pa.string()),
        ("amount", pa.float64()),
        ("currency", pa.string()),
        ("status", pa.string()),
        ("ts", pa.timestamp("ms", tz="UTC")),
    ]
)


@dataclass(frozen=True)
class DatasetOptions:
    rows: int = 5_000_000
    days: int = 28
    customers: int = 200_000
    zipf_a: float = 1.2
    """Exponent of the customers' zipf distribution (smaller: more skew)."""
    files: int = 4
    """Parquet files written (Spark reads one partition per file at this size)."""
    seed: int = 9

    def __post_init__(self) -> None:
        if self.rows < 1 or self.days < 1 or self.customers < 1 or self.files < 1:
            raise InvalidArgument("rows, days, customers and files must be >= 1")
        if self.zipf_a <= 1.0:
            raise InvalidArgument("zipf_a must be > 1")


@dataclass(frozen=True)
class DatasetInfo:
    path: Path
    rows: int
    files: int
    bytes: int
    region_rows: dict[str, int]
    first_key: str
    last_key: str


def order_ids(region: np.ndarray, day: np.ndarray, seq: np.ndarray) -> pa.Array:
    """``ord-<region>-<yyyymmdd>-<seq>`` for parallel arrays of region index, day offset from
    FIRST_DAY and sequence number."""
    names = pa.array([r for r, _, _ in REGIONS]).take(pa.array(region))
    dates = pa.array(
        [
            (FIRST_DAY + dt.timedelta(days=int(d))).strftime("%Y%m%d")
            for d in range(int(day.max()) + 1)
        ]
    ).take(pa.array(day))
    seqs = pc.utf8_lpad(pc.cast(pa.array(seq), pa.string()), SEQ_DIGITS, "0")
    return pc.binary_join_element_wise("ord", names, dates, seqs, "-")


def generate(options: DatasetOptions, seq_start: int = 0) -> pa.Table:
    """The orders table (rows in random order, as they would arrive from many sources).
    ``seq_start`` offsets the per-(region, day) sequence numbers, for later batches of new
    orders whose keys must not collide with earlier ones."""
    rng = np.random.default_rng(options.seed + seq_start)
    n = options.rows
    weights = np.array([w for _, _, w in REGIONS])
    region = rng.choice(len(REGIONS), size=n, p=weights / weights.sum())
    day = rng.integers(0, options.days, size=n)
    # Sequence numbers per (region, day): the rank of each row inside its group.
    group = region * options.days + day
    order = np.argsort(group, kind="stable")
    sorted_groups = group[order]
    starts = np.searchsorted(sorted_groups, sorted_groups, side="left")
    seq = np.empty(n, dtype=np.int64)
    seq[order] = np.arange(n) - starts + 1 + seq_start
    customer = np.minimum(rng.zipf(options.zipf_a, size=n), options.customers)
    sw = np.array([w for _, w in STATUSES])
    status = rng.choice(len(STATUSES), size=n, p=sw / sw.sum())
    amount = np.round(rng.lognormal(mean=3.6, sigma=0.9, size=n), 2)
    day_ms = np.array(
        [
            int(dt.datetime.combine(FIRST_DAY, dt.time(), dt.UTC).timestamp() * 1000)
            + d * 86_400_000
            for d in range(options.days)
        ]
    )
    ts = day_ms[day] + rng.integers(0, 86_400_000, size=n)
    perm = rng.permutation(n)
    customers = pc.binary_join_element_wise(
        "cus", pc.utf8_lpad(pc.cast(pa.array(customer[perm]), pa.string()), 7, "0"), "-"
    )
    return pa.table(
        [
            order_ids(region[perm], day[perm], seq[perm]),
            customers,
            pa.array(amount[perm]),
            pa.array([c for _, c, _ in REGIONS]).take(pa.array(region[perm])),
            pa.array([s for s, _ in STATUSES]).take(pa.array(status[perm])),
            pa.array(ts[perm], pa.timestamp("ms", tz="UTC")),
        ],
        schema=SCHEMA,
    )


def write_dataset(table: pa.Table, path: Path, files: int) -> DatasetInfo:
    """Write ``table`` as ``files`` Parquet files under ``path`` (replacing what is there)."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    per = -(-table.num_rows // files)
    written = 0
    for i in range(files):
        part = table.slice(i * per, per)
        if part.num_rows == 0:
            break
        pq.write_table(part, path / f"part-{i:05d}.parquet", compression="zstd")
        written += 1
    return describe(path)


def describe(path: Path) -> DatasetInfo:
    """Figures of the Parquet dataset at ``path`` (read from the files, not remembered)."""
    files = sorted(path.glob("*.parquet"))
    if not files:
        raise InvalidArgument(f"no Parquet files under {path}")
    keys = pq.read_table(files, columns=[KEY_COLUMN]).column(KEY_COLUMN)
    region = pc.utf8_slice_codeunits(keys, 4, 6)
    counts = pc.value_counts(region)
    region_rows = {str(v["values"]): int(v["counts"]) for v in counts.to_pylist()}
    mm = pc.min_max(keys)
    return DatasetInfo(
        path=path,
        rows=len(keys),
        files=len(files),
        bytes=sum(f.stat().st_size for f in files),
        region_rows=dict(sorted(region_rows.items())),
        first_key=str(mm["min"]),
        last_key=str(mm["max"]),
    )


def split_points(info: DatasetInfo) -> list[bytes]:
    """Shard boundaries from the key distribution: one shard per region present (keys sort by
    region first), so the shards start as skewed as the regions are."""
    regions = [r for r in info.region_rows if info.region_rows[r] > 0]
    return [f"ord-{r}-".encode() for r in regions[1:]]
