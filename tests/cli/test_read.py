from __future__ import annotations

import json
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from slatedb_core.cli.main import cli
from slatedb_core.cli.read import parse_key, prefix_end, register, show
from slatedb_core.options import DbOptions, DbReaderOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db

register(cli)

WRITES = ("put", "put_if_absent", "put_if_match", "delete")


@pytest.fixture
def lake(tmp_path: Path) -> str:
    """orders: apple, apricot, banana in L0; cherry and a binary key only in the WAL."""
    url = (tmp_path / "lake").as_uri()
    with Db.open(
        "orders", open_store(url), DbOptions(flush_interval=timedelta(milliseconds=10))
    ) as db:
        db.put(b"apple", b"red", await_durable=False)
        db.put(b"apricot", b"orange", await_durable=False)
        db.put(b"banana", b"yellow", await_durable=False)
        db.flush_memtable()
        db.put(b"cherry", b"dark\tred")
        db.put(b"\xffbin", b"\x00\x01\xfe")
    return url


def run(url: str, *args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, ["--url", url, "--path", "orders", *args])
    return r.exit_code, r.stdout, r.stderr


def test_scan_prints_every_key_in_order_with_escapes(lake: str) -> None:
    code, out, _ = run(lake, "scan")
    assert code == 0
    assert out.splitlines() == [
        "apple\tred",
        "apricot\torange",
        "banana\tyellow",
        "cherry\tdark\\tred",
        "\\xffbin\t\\x00\\x01\\xfe",
    ]


def test_scan_prefix_range_and_max_keys(lake: str) -> None:
    code, out, _ = run(lake, "scan", "--prefix", "ap")
    assert code == 0 and [line.split("\t")[0] for line in out.splitlines()] == ["apple", "apricot"]
    code, out, _ = run(lake, "scan", "--from", "apricot", "--to", "cherry")
    assert code == 0 and [line.split("\t")[0] for line in out.splitlines()] == ["apricot", "banana"]
    code, out, err = run(lake, "scan", "--max-keys", "2")
    assert code == 0 and len(out.splitlines()) == 2 and "max-keys" in err
    code, out, _ = run(lake, "scan", "--prefix", "zz")
    assert code == 0 and out == ""


def test_scan_hex_and_json(lake: str) -> None:
    code, out, _ = run(lake, "scan", "--format", "hex", "--prefix", "0xff", "--json")
    assert code == 0
    assert json.loads(out) == [{"key": "ff62696e", "value": "0001fe"}]
    code, out, _ = run(lake, "scan", "--json", "--prefix", "b")
    assert json.loads(out) == [{"key": "banana", "value": "yellow"}]
    code, out, _ = run(lake, "scan", "--json", "--prefix", "nothing")
    assert code == 0 and json.loads(out) == []


def test_get_in_utf8_hex_and_json(lake: str) -> None:
    assert run(lake, "get", "cherry") == (0, "dark\\tred\n", "")
    code, out, _ = run(lake, "get", "--format", "hex", "6170706c65")
    assert code == 0 and out == "726564\n"
    code, out, _ = run(lake, "get", "--format", "hex", "0xFF62696E", "--json")
    assert code == 0 and json.loads(out) == {"key": "ff62696e", "value": "0001fe"}


def test_get_of_a_missing_key_exits_1(lake: str) -> None:
    code, out, err = run(lake, "get", "durian")
    assert code == 1 and out == "" and "not found: durian" in err
    code, out, _ = run(lake, "get", "durian", "--json")
    assert code == 1 and json.loads(out) is None


def test_cli_reads_a_checkpoint_and_never_writes() -> None:
    url = f"memory://cli-{uuid.uuid4().hex}"  # one shared store object per name: shared counters
    store = open_store(url)
    with Db.open("orders", store, DbOptions(flush_interval=timedelta(milliseconds=10))) as db:
        db.put(b"apple", b"red")
        with DbReader.open(
            "orders", store, options=DbReaderOptions(checkpoint_lifetime=None)
        ) as managed:
            cp = managed.checkpoint_id
            assert cp is not None
            db.put(b"apple", b"green")
            db.flush_memtable()
            before = store.counters.snapshot()
            objects = [m.path for m in store.list("orders")]
            assert run(url, "get", "apple", "--checkpoint", str(cp)) == (0, "red\n", "")
            assert run(url, "get", "apple") == (0, "green\n", "")
            code, out, _ = run(url, "scan", "--checkpoint", str(cp), "--prefix", "apple")
            assert code == 0 and out == "apple\tred\n"
            after = store.counters.snapshot()
            assert after["get"] > before["get"]
            assert all(after[op] == before[op] for op in WRITES)
            assert [m.path for m in store.list("orders")] == objects


def test_unknown_checkpoint_is_a_typed_error(lake: str) -> None:
    code, _, err = run(lake, "get", "apple", "--checkpoint", str(uuid.uuid4()))
    assert code == 1 and err.startswith("error: CheckpointNotFound")


@pytest.mark.parametrize(
    "args",
    [
        ["get", "--format", "hex", "zz"],
        ["get", "--format", "hex", "0x"],
        ["get", "apple", "--checkpoint", "not-a-uuid"],
        ["scan", "--prefix", "a", "--from", "b"],
        ["scan", "--from", "c", "--to", "a"],
        ["scan", "--max-keys", "0"],
        ["scan", "--format", "base64"],
    ],
)
def test_bad_usage_exits_2(lake: str, args: list[str]) -> None:
    code, _, _ = run(lake, *args)
    assert code == 2


def test_missing_database_exits_1(tmp_path: Path) -> None:
    code, _, err = run((tmp_path / "empty").as_uri(), "scan")
    assert code == 1 and err.startswith("error: DatabaseNotFound")


def test_helpers() -> None:
    assert prefix_end(b"ab") == b"ac"
    assert prefix_end(b"a\xff") == b"b"
    assert prefix_end(b"\xff\xff") is None
    assert show(b"caf\xc3\xa9 \\ \x07", "utf8") == "café \\\\ \\x07"
    assert show("\u200b".encode(), "utf8") == "\\u200b"
    assert parse_key("0x6b6579", "hex", "KEY") == b"key" == parse_key("6b6579", "hex", "KEY")
    assert parse_key("k\udcff", "utf8", "KEY") == b"k\xff"
