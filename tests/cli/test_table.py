"""``slatedb table ...``."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import click
from click.testing import CliRunner

from slatedb_core.cli.main import cli
from slatedb_core.cli.table import register, table_group
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.table import Table, TableOptions

OPTS = TableOptions(writer=DbOptions(flush_interval=timedelta(milliseconds=5)))


def run(url: str, *args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, ["--url", url, "--path", "t", "table", *args])
    return r.exit_code, r.stdout, r.stderr


def lake(tmp_path: Path, rows: dict[bytes, bytes]) -> str:
    url = (tmp_path / "lake").as_uri()
    with Table.create("t", open_store(url), [b"g", b"p"], OPTS) as t:
        for shard in t.shards:
            with t.writer(shard.index) as db:
                for k, v in rows.items():
                    if shard.contains(k):
                        db.put(k, v, await_durable=False)
    return url


def test_the_table_group_is_registered_once() -> None:
    assert cli.commands["table"] is table_group
    group = click.Group(commands=dict(cli.commands))
    register(group)
    register(group)
    assert group.commands["table"] is table_group


def test_create_then_show_as_json(tmp_path: Path) -> None:
    url = (tmp_path / "lake").as_uri()
    code, out, err = run(
        url, "create", "--split", "67", "--split", "0x70", "--format", "hex", "--json"
    )
    assert code == 0, err
    d = json.loads(out)
    assert [(s["start"], s["end"]) for s in d["shards"]] == [
        (None, "67"),
        ("67", "70"),
        ("70", None),
    ]
    code, out, _ = run(url, "shards", "--json", "--format", "hex")
    assert code == 0 and json.loads(out) == d
    code, out, _ = run(url, "show")
    assert code == 0 and "t/shards/0000000002" in out and "+inf" in out
    code, _, err = run(url, "create")
    assert code == 1 and "TableAlreadyExists" in err  # issue 40, item 6


def test_create_rejects_bad_split_points(tmp_path: Path) -> None:
    url = (tmp_path / "lake").as_uri()
    code, _, err = run(url, "create", "--split", "p", "--split", "g")
    assert code == 1 and "InvalidArgument" in err
    code, _, err = run(url, "create", "--split", "0xzz", "--format", "hex")
    assert code == 2
    code, _, err = run(url, "show")
    assert code == 1 and "DatabaseNotFound" in err


def test_get_and_scan_across_shards(tmp_path: Path) -> None:
    rows = {b"a": b"1", b"h": b"2", b"q": b"3", b"z": b"4"}
    url = lake(tmp_path, rows)
    assert run(url, "get", "h")[:2] == (0, "2\n")
    code, _, err = run(url, "get", "nope")
    assert code == 1 and "not found: nope" in err
    code, out, _ = run(url, "get", "nope", "--json")
    assert code == 1 and json.loads(out) is None
    assert run(url, "scan")[1] == "a\t1\nh\t2\nq\t3\nz\t4\n"
    assert run(url, "scan", "--from", "b", "--to", "z")[1] == "h\t2\nq\t3\n"
    assert run(url, "scan", "--max-keys", "3")[1].count("\n") == 3
    code, out, _ = run(url, "scan", "--from", "68", "--format", "hex", "--json")
    assert code == 0 and json.loads(out)[0] == {"key": "68", "value": "32"}
    assert run(url, "scan", "--from", "z", "--to", "a")[0] == 2
    store = open_store(url)  # reads through the CLI leave no checkpoint behind
    for s in Table.open("t", store, OPTS).shards:
        assert not ManifestStore(store, s.db_path).read_latest().manifest.checkpoints or all(
            c.writer_epoch is not None
            for c in ManifestStore(store, s.db_path).read_latest().manifest.checkpoints
        )


def test_split_merge_and_resume(tmp_path: Path) -> None:
    rows = {b"a": b"1", b"h": b"2", b"m": b"3", b"q": b"4"}
    url = lake(tmp_path, rows)
    code, out, err = run(url, "split", "1", "--at", "k", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["id"] == 3 and [s["end"] for s in d["shards"]] == ["g", "k", "p", None]
    assert d["retired"] == ["t/shards/0000000002"]
    assert run(url, "split", "1", "--at", "k", "--json")[0] == 0  # already split: no-op
    assert run(url, "split", "1", "--at", "z")[0] == 2  # outside the shard
    code, _, err = run(url, "merge", "0", "--expect-map", "1")
    assert code == 1 and "ShardMapConflict" in err
    code, out, err = run(url, "merge", "0", "--expect-map", "3", "--json")
    assert code == 0, err
    assert [s["end"] for s in json.loads(out)["shards"]] == ["k", "p", None]
    assert run(url, "merge", "2")[0] == 1  # the last shard has no next one
    code, out, _ = run(url, "resume", "--json")
    assert code == 0 and json.loads(out)["pending"] == []
    assert run(url, "scan")[1] == "a\t1\nh\t2\nm\t3\nq\t4\n"


def test_gc_deletes_old_maps_and_ingest_leftovers(tmp_path: Path) -> None:
    url = lake(tmp_path, {b"a": b"1", b"z": b"2"})
    store = open_store(url)
    assert run(url, "split", "0", "--at", "c")[0] == 0
    store.put_if_absent("t/_ingest/job/0000000001.done", b"{}")
    code, out, err = run(url, "gc", "--json")  # defaults: nothing is old enough
    assert code == 0, err
    assert json.loads(out) == {
        "shard_maps": 0,
        "ingest_objects": 0,
        "ingest_bytes": 0,
        "snapshot_records": 0,
        "snapshot_checkpoints": 0,
        "overwrite_targets": 0,
        "staged_files": 0,
        "staged_bytes": 0,
    }
    code, out, err = run(url, "gc", "--min-age", "0s", "--ingest-min-age", "0s")
    assert code == 0, err
    assert "deleted 2 shard-map version(s), 1 ingest leftover(s) (2 bytes)" in out  # split: 2
    assert not list(store.list("t/_ingest/"))
    code, out, _ = run(url, "get", "z")
    assert code == 0 and "2" in out
    code, _, err = run(url, "gc", "--ingest-min-age", "soon")
    assert code == 2 and "soon" in err
