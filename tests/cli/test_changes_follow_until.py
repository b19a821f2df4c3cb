"""``slatedb changes --until CURSOR`` and ``--follow`` (issue 43 gaps, item 2): stopping at a
cursor prints the rows Python's ``Table.changes(until=)`` yields (and, for a database, the rows
a Spark micro-batch ending there reads), the last cursor line being it; following prints each
batch as writers commit it, until ``--max-batches``, ``--timeout`` or Ctrl-C. Through click's
CliRunner (and the installed ``slatedb`` script for Ctrl-C) on real stores."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slatedb_core.cli import changes as changes_cli
from slatedb_core.cli.main import cli
from slatedb_core.options import DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.table import Table
from slatedb_core.writer.db import Db
from tests.table.conftest import OPTS, fill

QUIET = DbOptions(flush_interval=timedelta(hours=1))


def run(url: str, path: str, *args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, ["--url", url, "--path", path, "changes", *args])
    return r.exit_code, r.stdout, r.stderr


def lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines()]


def kv(docs: list[dict[str, Any]]) -> list[tuple[bytes, bytes | None]]:
    return [
        (base64.b64decode(d["key"]), None if d["value"] is None else base64.b64decode(d["value"]))
        for d in docs
        if "key" in d
    ]


def cursors(docs: list[dict[str, Any]]) -> list[str]:
    return [d["cursor"] for d in docs if "cursor" in d]


@pytest.mark.parametrize("batch_rows", ["1", "10000"])
def test_until_a_database_cursor_prints_exactly_the_changes_before_it(
    tmp_path: Path, batch_rows: str
) -> None:
    """With 10,000 rows a batch, one batch crosses the cursor and is cut there."""
    url = (tmp_path / "lake").as_uri()
    store = open_store(url)
    with Db.open("orders", store, QUIET) as db:
        db.put(b"a", b"1")
        db.put(b"b", b"1")
        db.delete(b"a")
        code, out, err = run(url, "orders", "--tail", "--json")
        assert code == 0, err
        tail = lines(out)[0]["cursor"]
        db.put(b"c", b"1")  # after the tail: not printed
        db.put(b"b", b"2")
    before = [(b"a", b"1"), (b"b", b"1"), (b"a", None)]
    code, out, err = run(url, "orders", "--json", "--until", tail, "--batch-rows", batch_rows)
    assert code == 0, err
    assert kv(lines(out)) == before
    assert cursors(lines(out))[-1] == tail
    # resumed from a cursor inside, up to the same end: the rest of them
    first = cursors(lines(run(url, "orders", "--json", "--batch-rows", "1")[1]))[0]
    code, out, err = run(url, "orders", "--json", "--since", first, "--until", tail)
    assert code == 0, err
    assert kv(lines(out)) == before[1:] and cursors(lines(out))[-1] == tail
    # from the end cursor on: the changes after it, once
    code, out, err = run(url, "orders", "--json", "--since", tail)
    assert kv(lines(out)) == [(b"c", b"1"), (b"b", b"2")]
    # since == until: nothing; human output: the cursor on stderr
    code, out, err = run(url, "orders", "--since", tail, "--until", tail)
    assert code == 0 and out == "" and f"cursor: {tail}" in err
    # a table cursor, or garbage, is bad usage
    assert run(url, "orders", "--until", "t1.e30")[0] == 2
    assert run(url, "orders", "--until", "nope")[0] == 2


def test_until_a_table_cursor_prints_the_rows_of_python_until(tmp_path: Path) -> None:
    url = (tmp_path / "lake").as_uri()
    store = open_store(url)
    with Table.create("t", store, [b"m"], OPTS) as table:
        fill(table, {b"a": b"1", b"n": b"1"})
        start = table.changes_tail()
        fill(table, {b"a": b"2", b"g": b"1", b"z": b"1"})
        end = table.changes_tail()
        fill(table, {b"a": b"3"})
        table.split(0, b"f")
        fill(table, {b"b": b"1"})
        python = [
            (r["key"], r["value"])
            for b in table.changes(start, until=end)
            for r in b.rows.to_pylist()
        ]
        python_last = list(table.changes(start, until=end))[-1].cursor.encode()
    assert sorted(python) == [(b"a", b"2"), (b"g", b"1"), (b"z", b"1")]
    code, out, err = run(url, "t", "--json", "--since", start.encode(), "--until", end.encode())
    assert code == 0, err
    assert kv(lines(out)) == python
    assert cursors(lines(out))[-1] == python_last
    # --follow stops there too (the rows up to --until are all there is to wait for)
    code, out2, err = run(
        url, "t", "--json", "--follow", "--since", start.encode(), "--until", end.encode()
    )
    assert code == 0, err
    assert kv(lines(out2)) == python
    assert run(url, "t", "--until", "c1.1.0")[0] == 2  # a database cursor on a table


def _writer(url: str, path: str, keys: list[bytes], pause: float) -> threading.Thread:
    def write() -> None:
        time.sleep(pause)
        with Db.open(path, open_store(url), QUIET) as db:
            for k in keys:
                db.put(k, b"v")
                time.sleep(pause)

    t = threading.Thread(target=write, daemon=True)
    t.start()
    return t


def test_follow_prints_changes_committed_while_it_runs_then_stops_at_max_batches(
    tmp_path: Path,
) -> None:
    url = (tmp_path / "lake").as_uri()
    with Db.open("orders", open_store(url), QUIET) as db:
        db.put(b"k0", b"v")
    keys = [b"k1", b"k2", b"k3"]
    writer = _writer(url, "orders", keys, 0.2)
    started = time.monotonic()
    code, out, err = run(
        url,
        "orders",
        "--json",
        "--follow",
        "--interval",
        "0.05",
        "--batch-rows",
        "1",
        "--max-batches",
        "4",
        "--timeout",
        "30",
    )
    writer.join()
    assert code == 0, err
    docs = lines(out)
    # each batch (one row) is followed by its cursor line; k0 was there before, the rest came
    assert [k for k, _ in kv(docs)] == [b"k0", *keys]
    assert ["key" in d for d in docs] == [True, False] * 4
    assert time.monotonic() - started < 30  # stopped at --max-batches, not the timeout
    # the last cursor line resumes with nothing new
    code, out, err = run(url, "orders", "--json", "--since", cursors(docs)[-1])
    assert kv(lines(out)) == [] and code == 0


def test_follow_a_table_until_the_timeout(tmp_path: Path) -> None:
    url = (tmp_path / "lake").as_uri()
    store = open_store(url)
    with Table.create("t", store, [b"m"], OPTS) as table:
        fill(table, {b"a": b"1"})
        shard = table.shards[1].db_path
    writer = _writer(url, shard, [b"n1", b"n2"], 0.2)
    started = time.monotonic()
    code, out, err = run(url, "t", "--follow", "--interval", "0.05", "--timeout", "1.5")
    writer.join()
    assert code == 0, err
    assert time.monotonic() - started >= 1.5
    assert [line.split("\t")[2] for line in out.splitlines()] == ["a", "n1", "n2"]
    assert err.count("cursor: t1.") >= 2  # after each batch, and at the end


def test_timeout_without_follow_is_bad_usage(tmp_path: Path) -> None:
    url = (tmp_path / "lake").as_uri()
    with Db.open("orders", open_store(url), QUIET) as db:
        db.put(b"a", b"1")
    code, _, err = run(url, "orders", "--timeout", "1")
    assert code == 2 and "--timeout needs --follow" in err


def test_ctrl_c_stops_follow_with_every_line_whole(tmp_path: Path) -> None:
    """The installed script, interrupted as an operator does: exit 0, the changes printed so far
    each followed by a cursor line, the last one where to resume."""
    url = (tmp_path / "lake").as_uri()
    with Db.open("orders", open_store(url), QUIET) as db:
        db.put(b"a", b"1")
    script = Path(sys.executable).with_name("slatedb")
    proc = subprocess.Popen(
        [str(script), "--url", url, "--path", "orders", "changes", "--json", "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        assert base64.b64decode(first["key"]) == b"a"
        assert "cursor" in json.loads(proc.stdout.readline())
        with Db.open("orders", open_store(url), QUIET) as db:
            db.put(b"b", b"2")
        second = json.loads(proc.stdout.readline())
        assert base64.b64decode(second["key"]) == b"b"
        last = json.loads(proc.stdout.readline())["cursor"]
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert rest == ""  # nothing half-printed after the last whole batch
    code, out, _ = run(url, "orders", "--json", "--since", last)
    assert code == 0 and kv(lines(out)) == []


def test_follow_until_a_cursor_ahead_waits_for_it_then_stops(tmp_path: Path) -> None:
    """A cursor the WAL has not reached yet: without --follow the read ends short of it (at the
    feed's end, printing nothing more); with --follow it polls until writers commit up to it."""
    from slatedb_core.feed import Cursor

    url = (tmp_path / "lake").as_uri()
    with Db.open("orders", open_store(url), QUIET) as db:
        db.put(b"a", b"1")
        tail = Cursor.decode(lines(run(url, "orders", "--tail", "--json")[1])[0]["cursor"])
        # each put below is its own WAL SST and seq (it waits until durable): the cursor at
        # c's seq, in a WAL SST no later than d's, delivers b and c, not d
        ahead = Cursor(tail.wal_id + 2, tail.seq + 2).encode()
        code, out, err = run(url, "orders", "--json", "--since", tail.encode(), "--until", ahead)
        assert code == 0, err
        assert kv(lines(out)) == [] and cursors(lines(out)) != [ahead]

        def write() -> None:
            time.sleep(0.3)
            db.put(b"b", b"1")
            time.sleep(0.2)
            db.put(b"c", b"1")
            db.put(b"d", b"1")  # after the cursor: not printed

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        started = time.monotonic()
        code, out, err = run(
            url,
            "orders",
            "--json",
            "--follow",
            "--interval",
            "0.05",
            "--timeout",
            "20",
            "--since",
            tail.encode(),
            "--until",
            ahead,
        )
        writer.join()
    assert code == 0, err
    assert time.monotonic() - started < 20  # stopped at --until
    assert [k for k, _ in kv(lines(out))] == [b"b", b"c"]
    assert cursors(lines(out))[-1] == ahead


def test_ctrl_c_while_a_batch_prints_lets_its_cursor_line_follow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C landing between a batch's rows and its cursor line (1 in 20 interrupts of a
    running ``--follow`` in a stress run, session 49) left rows with no cursor after them: a
    script resuming from the last cursor line applied them again. The interrupt now waits for
    the cursor line."""
    url = (tmp_path / "lake").as_uri()
    with Db.open("orders", open_store(url), QUIET) as db:
        for k in (b"a", b"b", b"c"):
            db.put(k, b"1")
    real = changes_cli._print_rows

    def print_then_interrupt(*args: Any) -> None:
        real(*args)
        signal.raise_signal(signal.SIGINT)  # as the operator's Ctrl-C, mid-batch

    monkeypatch.setattr(changes_cli, "_print_rows", print_then_interrupt)
    code, out, err = run(url, "orders", "--json", "--follow", "--batch-rows", "1")
    assert code == 0, err
    docs = lines(out)
    assert [k for k, _ in kv(docs)] == [b"a"] and "cursor" in docs[-1]
    monkeypatch.undo()
    code, out, err = run(url, "orders", "--json", "--since", cursors(docs)[-1])
    assert [k for k, _ in kv(lines(out))] == [b"b", b"c"]
