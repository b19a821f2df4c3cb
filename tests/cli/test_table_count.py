"""``slatedb table count``, ``slatedb count`` and ``slatedb table stats`` (issue 40, item 4:
counting the demo's table by ``scan | wc -l`` took 3 minutes).

A real table on the local filesystem with three shards, written through the shards' writers:
rows flushed to L0 and rows only in the WAL, overwrites, deletes (tombstones over L0 rows and
over WAL rows), rows whose TTL has passed (which reads still return), and keys that exist only
as merge operands. Every count must equal what a scan of the same state returns, at the latest
state, at a named snapshot taken before more deletes, over a key range, and after a split whose
halves share their parent's SSTs (a projection: counted once, not twice).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner

from slatedb_core.cli.main import cli
from slatedb_core.options import DbOptions, DbReaderOptions, ReaderMode
from slatedb_core.store.url import open_store
from slatedb_core.table import Table, TableOptions

OPTS = TableOptions(
    writer=DbOptions(merge_operator="string_append"),
    reader=DbReaderOptions(mode=ReaderMode.FOLLOW_LATEST, merge_operator="string_append"),
)


def _keys(r: range) -> list[bytes]:
    return [b"k%03d" % i for i in r]


def _write(t: Table, keys: list[bytes], value: bytes | None, *, flush: bool) -> None:
    """Put (or, with None, delete) ``keys`` through their shards' writers."""
    by_shard: dict[int, list[bytes]] = {}
    for k in keys:
        by_shard.setdefault(t.shard_for(k).index, []).append(k)
    for index, ks in by_shard.items():
        with t.writer(index) as db:
            vals = pa.array([value] * len(ks), pa.binary())
            db.put_arrow(pa.table({"key": pa.array(ks, pa.binary()), "value": vals}))
            if flush:
                db.flush_memtable()


def _open(url: str) -> Table:
    """A fresh handle: its readers start from the latest state."""
    return Table.open("orders", open_store(url), OPTS)


@pytest.fixture
def table(tmp_path: Path) -> Iterator[tuple[str, Table]]:
    url = (tmp_path / "lake").as_uri()
    with Table.create("orders", open_store(url), [b"k040", b"k080"], OPTS) as t:
        _fill(t)
    with _open(url) as t:
        yield url, t


def _fill(t: Table) -> None:
    _write(t, _keys(range(120)), b"v1", flush=True)  # L0
    _write(t, _keys(range(0, 120, 3)), b"v2", flush=True)  # overwrites, L0 over L0
    _write(t, _keys(range(0, 30)), None, flush=True)  # tombstones flushed
    _write(t, _keys(range(100, 110)), None, flush=False)  # tombstones only in the WAL
    _write(t, _keys(range(5, 8)), b"back", flush=False)  # deleted keys written again
    with t.writer(2) as db:
        for k in _keys(range(112, 116)):
            db.put(k, b"short", ttl=1)  # expired before any read below (reads keep them)
        db.merge(b"k200", b"a")  # keys made of merge operands only
        db.merge(b"k200", b"b")
        db.merge(b"k201", b"c")
        db.put(b"k202", b"x")
        db.delete(b"k202")
    time.sleep(0.01)


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, ["--merge-operator", "string_append", *args])
    return r.exit_code, r.stdout, r.stderr


def _count_json(url: str, *args: str, path: str = "orders") -> dict[str, object]:
    code, out, err = run("--url", url, "--path", path, *args, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert isinstance(doc, dict)
    return doc


def test_counts_match_the_scan(table: tuple[str, Table]) -> None:
    url, t = table
    # expired rows still count: SlateDB 0.17 reads return them until a compaction drops them
    # (slatedb_core/lsm/dbstate.py), and a count is a read
    expected = 120 - 30 + 3 - 10 + 2
    assert len(list(t.scan())) == expected
    assert t.count() == expected
    by_shard = t.count_by_shard(workers=3)
    assert [n for _, n in by_shard] == [
        len(list(t.scan(s.key_range.start, s.key_range.end))) for s in t.shards
    ]
    doc = _count_json(url, "table", "count")
    assert doc["keys"] == expected
    assert [s["keys"] for s in doc["shards"]] == [n for _, n in by_shard]  # type: ignore[attr-defined]
    ranged = _count_json(url, "table", "count", "--from", "k050", "--to", "k111")
    assert ranged["keys"] == len(list(t.scan(b"k050", b"k111"))) == t.count(b"k050", b"k111")
    shard = t.shards[2]
    db = _count_json(url, "count", path=shard.db_path)
    assert db["keys"] == len(list(t.scan(shard.key_range.start, shard.key_range.end)))
    prefixed = _count_json(url, "count", "--prefix", "k20", path=shard.db_path)
    assert prefixed["keys"] == 2


def test_counts_a_named_snapshot(table: tuple[str, Table]) -> None:
    url, t = table
    snap = t.snapshot(name="before")
    at_snapshot = len(list(t.scan()))
    _write(t, _keys(range(30, 60)), None, flush=False)
    _write(t, _keys(range(300, 310)), b"new", flush=True)
    with _open(url) as fresh:
        latest = len(list(fresh.scan()))
        assert fresh.count() == latest
    # 30 deleted, 10 added, and the flush of shard 2 dropped its 4 expired rows
    assert latest == at_snapshot - 30 + 10 - 4
    with Table.open("orders", t.store, OPTS, snapshot=snap) as frozen:
        assert frozen.count() == len(list(frozen.scan())) == at_snapshot
    assert _count_json(url, "table", "count", "--snapshot", "before")["keys"] == at_snapshot
    assert _count_json(url, "table", "count")["keys"] == latest
    code, _, err = run("--url", url, "--path", "orders", "table", "count", "--snapshot", "nope")
    assert code == 1 and "nope" in err


def _stats(url: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    doc = _count_json(url, "table", "stats")
    rows, total = doc["shards"], doc["total"]
    assert isinstance(rows, list) and isinstance(total, dict)
    return rows, total


def test_split_halves_share_sstables_and_count_once(table: tuple[str, Table]) -> None:
    url, t = table
    before = len(list(t.scan()))
    parent = _stats(url)[0][1]["approximate_rows"]
    t.split(1, b"k060")
    with _open(url) as t:
        assert len(t.shards) == 4
        assert t.count() == len(list(t.scan())) == before
        assert [n for _, n in t.count_by_shard()][1:3] == [20, 20]
    rows, total = _stats(url)
    assert len(rows) == 4
    # the halves reference their parent's whole SSTs: their approximate rows are pro-rated to
    # their ranges, so together they are about the parent's, not twice it
    halves = rows[1]["approximate_rows"] + rows[2]["approximate_rows"]
    assert 0.8 * parent <= halves <= 1.2 * parent
    assert total["ssts"] == sum(r["ssts"] for r in rows)
    assert all(r["writer_epoch"] >= 1 and r["manifest_id"] >= 1 for r in rows)


def test_stats_read_sst_metadata_without_a_scan(table: tuple[str, Table]) -> None:
    url, _ = table
    stats = _count_json(url, "table", "stats")
    rows = stats["shards"]
    assert isinstance(rows, list)
    # shard 0 holds keys k000-k039 in three flushed L0 SSTs: 40 puts, 14 overwrites, 30 tombstones
    assert rows[0]["l0_ssts"] == 3 and rows[0]["sorted_runs"] == 0
    assert rows[0]["approximate_rows"] == 40 + 14 + 30
    assert rows[0]["bytes"] > 0 and rows[0]["unreadable_ssts"] == 0
    code, out, _ = run("--url", url, "--path", "orders", "table", "stats")
    assert code == 0 and "total" in out and "approximate rows" in out
