"""The CLI's ``--merge-operator`` (issue 38, item 2: "a database that uses SlateDB's merge
operator" must be readable and maintainable from the terminal), with SlateDB 0.17's engine
writing ``add_int64`` operands through its Python binding, on the local filesystem and on the S3
server.

``get``/``scan`` fold the operands with the named built-in and print SlateDB's value; without the
option a read of an operand key fails with ``MergeOperatorMissing`` naming the key, and other
keys still read. ``compact --merge-operator`` folds them into the compacted run, which SlateDB
then reads as its own; without the option the compaction refuses and commits nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from slatedb_core.manifest.store import ManifestStore
from slatedb_core.store.objectstore import ObjectStore
from tests.interop.oracle import Oracle
from tests.interop.oracle_merge_read import AddInt64, merge, open_merge_db, open_merge_reader

pytestmark = pytest.mark.slatedb


def i64(n: int) -> bytes:
    return (n % (1 << 64)).to_bytes(8, "little")


def cli_run(url: str, *args: str, env: dict[str, str] | None = None) -> Any:
    from slatedb_core.cli.main import cli

    return CliRunner().invoke(cli, ["--url", url, "--path", "db", *args], env=env or {})


def slatedb_counts(o: Oracle, rounds: int) -> dict[bytes, bytes]:
    """SlateDB with its AddInt64: per round a base put of ``c/base``, operands of ``c/base`` and
    ``c/only-ops`` and a plain put of ``p/plain``, each round flushed to its own L0 SST, then a
    tail of operands only in its WAL. Returns SlateDB's own reads."""
    w = open_merge_db(o, AddInt64())
    w.put(b"c/base", i64(100))
    for r in range(rounds):
        merge(w, b"c/base", i64(r + 1))
        merge(w, b"c/only-ops", i64(-2))
        w.put(b"p/plain", f"plain-{r}".encode())
        w.flush_memtable()
    merge(w, b"c/base", i64(1000))  # durable, only in the WAL
    merge(w, b"c/only-ops", i64(7))
    keys = [b"c/base", b"c/only-ops", b"p/plain"]
    got = {k: w.get(k) for k in keys}
    assert got[b"c/base"] == i64(100 + sum(range(1, rounds + 1)) + 1000)
    w.shutdown()
    return {k: v for k, v in got.items() if v is not None}


def test_cli_reads_slatedb_operands_with_merge_operator(
    both_stores: tuple[Oracle, ObjectStore, str],
) -> None:
    o, _store, url = both_stores
    want = slatedb_counts(o, 2)
    for pre in (["--merge-operator", "add_int64"], []):
        env = {} if pre else {"SLATEDB_MERGE_OPERATOR": "add_int64"}  # the env var, too
        r = cli_run(url, *pre, "scan", "--format", "hex", "--json", env=env)
        assert r.exit_code == 0, r.stderr
        got = {bytes.fromhex(x["key"]): bytes.fromhex(x["value"]) for x in json.loads(r.stdout)}
        assert got == want
        r = cli_run(url, *pre, "get", "--format", "hex", "0x" + b"c/base".hex(), env=env)
        assert r.exit_code == 0 and bytes.fromhex(r.stdout.strip()) == want[b"c/base"]
    # without an operator: the operand keys fail, naming the key; a plain key reads
    r = cli_run(url, "get", "c/only-ops")
    assert r.exit_code == 1 and "MergeOperatorMissing" in r.stderr and "c/only-ops" in r.stderr
    assert "--merge-operator" in r.stderr, r.stderr
    r = cli_run(url, "get", "p/plain")
    assert r.exit_code == 0 and r.stdout.strip() == "plain-1"
    r = cli_run(url, "scan")
    assert r.exit_code == 1 and "MergeOperatorMissing" in r.stderr
    r = cli_run(url, "--merge-operator", "no_such_op", "get", "c/base")
    assert r.exit_code == 2 and "no_such_op" in r.stderr  # a usage error, nothing opened


def test_cli_compaction_folds_slatedb_operands(
    both_stores: tuple[Oracle, ObjectStore, str],
) -> None:
    """SlateDB's operands compacted by ``slatedb compact --merge-operator add_int64``: SlateDB's
    reader (with its operator) then reads the same values from our sorted run."""
    o, store, url = both_stores
    want = slatedb_counts(o, 5)  # 5 L0 SSTs: past the compactor's l0_trigger
    ms = ManifestStore(store, "db")
    before = ms.read_latest()
    r = cli_run(url, "compact", "--json")  # no operator: refused, nothing committed
    assert r.exit_code == 1 and "MergeOperatorMissing" in r.stderr, r.stderr
    assert ms.read_latest().manifest.l0 == before.manifest.l0
    r = cli_run(url, "--merge-operator", "add_int64", "compact", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["compacted"] is True
    after = ms.read_latest().manifest
    assert not after.l0 and after.compacted
    reader = open_merge_reader(o, AddInt64())
    assert {k: reader.get(k) for k in want} == want
    r = cli_run(url, "--merge-operator", "add_int64", "scan", "--format", "hex", "--json")
    got = {bytes.fromhex(x["key"]): bytes.fromhex(x["value"]) for x in json.loads(r.stdout)}
    assert got == want
