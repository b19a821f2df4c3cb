from __future__ import annotations

import dataclasses
import json
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slatedb_core.checkpoints import create_checkpoint
from slatedb_core.cli.checkpoints import COMMANDS, register
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CheckpointOptions
from slatedb_core.store.url import open_store
from tests.cli.cli_steps import group_with

GROUP = group_with(register)


@pytest.fixture
def lake(tmp_path: Path) -> str:
    url = (tmp_path / "lake").as_uri()
    ManifestStore(open_store(url), "orders").create_initial(Manifest())
    return url


def run(lake: str, *args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(GROUP, ["--url", lake, "--path", "orders", *args])
    return r.exit_code, r.stdout, r.stderr


def run_json(lake: str, *args: str) -> Any:
    code, out, err = run(lake, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def manifests(lake: str) -> ManifestStore:
    return ManifestStore(open_store(lake), "orders")


def test_register_adds_all_four_commands_once() -> None:
    names = {"create-checkpoint", "refresh-checkpoint", "delete-checkpoint", "list-checkpoints"}
    assert names <= set(GROUP.commands)
    assert {c.name for c in COMMANDS} == names
    assert "read-manifest" in GROUP.commands


def test_create_json_pins_next_manifest_with_lifetime_and_name(lake: str) -> None:
    before = int(time.time())
    d = run_json(lake, "create-checkpoint", "-l", "1h 30min", "-n", "nightly")
    assert d["manifest_id"] == 2 and d["name"] == "nightly" and d["expired"] is False
    assert before <= d["create_time_s"] <= int(time.time())
    assert d["expire_time_s"] - d["create_time_s"] in (5400, 5401)
    assert d["expire_time"].endswith("+00:00")
    cp = manifests(lake).read(2).manifest.checkpoint(uuid.UUID(d["id"]))
    assert cp is not None and cp.name == "nightly"


def test_create_human_output_and_no_expiry(lake: str) -> None:
    code, out, _ = run(lake, "create-checkpoint")
    assert code == 0
    (cp,) = manifests(lake).read_latest().manifest.checkpoints
    assert str(cp.id) in out and "never" in out and "created checkpoint" in out
    assert cp.expire_time_s is None


def test_create_from_source(lake: str) -> None:
    src = run_json(lake, "create-checkpoint")
    run_json(lake, "create-checkpoint")
    d = run_json(lake, "create-checkpoint", "--source", src["id"], "--lifetime", "2d")
    assert d["manifest_id"] == src["manifest_id"] == 2
    assert manifests(lake).latest_id() == 4


def test_refresh_human_and_json(lake: str) -> None:
    src = run_json(lake, "create-checkpoint", "-l", "10min")
    d = run_json(lake, "refresh-checkpoint", "-i", src["id"], "-l", "7days 30min 10s")
    assert d["id"] == src["id"] and d["manifest_id"] == src["manifest_id"]
    life = timedelta(days=7, minutes=30, seconds=10).total_seconds()
    assert d["expire_time_s"] >= int(time.time()) + life - 2
    code, out, _ = run(lake, "refresh-checkpoint", "--id", src["id"])
    assert code == 0 and src["id"] in out and "never" in out
    cp = manifests(lake).read_latest().manifest.checkpoint(uuid.UUID(src["id"]))
    assert cp is not None and cp.expire_time_s is None


def test_delete_human_and_json(lake: str) -> None:
    a = run_json(lake, "create-checkpoint")
    b = run_json(lake, "create-checkpoint")
    code, out, _ = run(lake, "delete-checkpoint", "-i", a["id"])
    assert code == 0 and a["id"] in out
    assert run_json(lake, "delete-checkpoint", "--id", b["id"]) == {"deleted": b["id"]}
    assert manifests(lake).read_latest().manifest.checkpoints == ()


def test_list_human_marks_expired_and_json_filters_by_name(lake: str) -> None:
    store = open_store(lake)
    old = create_checkpoint(
        "orders",
        store,
        CheckpointOptions(lifetime=timedelta(seconds=1), name="x"),
        now=lambda: 1_000_000.0,
    )
    live = run_json(lake, "create-checkpoint", "-n", "x", "-l", "1h")
    other = run_json(lake, "create-checkpoint", "-n", "y")
    code, out, _ = run(lake, "list-checkpoints")
    assert code == 0 and "3 checkpoint(s)" in out
    for cid in (str(old.id), live["id"], other["id"]):
        assert cid in out
    assert out.count("(expired)") == 1 and "never" in out
    rows = run_json(lake, "list-checkpoints", "-n", "x")
    assert [r["id"] for r in rows] == [str(old.id), live["id"]]
    assert [r["expired"] for r in rows] == [True, False]
    assert run_json(lake, "list-checkpoints", "--name", "nope") == []
    code, out, _ = run(lake, "list-checkpoints", "-n", "nope")
    assert code == 0 and "0 checkpoint(s)" in out


@pytest.mark.parametrize(
    "args",
    [
        ["create-checkpoint", "-s", "not-a-uuid"],
        ["create-checkpoint", "-l", "7 fortnights"],
        ["create-checkpoint", "-l", "0s"],
        ["create-checkpoint", "-l", "-1h"],
        ["refresh-checkpoint"],
        ["refresh-checkpoint", "-i", "1234"],
        ["refresh-checkpoint", "-i", str(uuid.uuid4()), "-l", "soon"],
        ["delete-checkpoint"],
        ["delete-checkpoint", "--id", "zzz"],
        ["list-checkpoints", "--bogus"],
    ],
)
def test_bad_uuid_or_lifetime_is_a_usage_error(lake: str, args: list[str]) -> None:
    code, _, err = run(lake, *args)
    assert code == 2 and "Error" in err
    assert manifests(lake).latest_id() == 1  # nothing written


def test_bad_lifetime_message_shows_the_format(lake: str) -> None:
    code, _, err = run(lake, "create-checkpoint", "-l", "soon")
    assert code == 2 and "7days 30min 10s" in err


@pytest.mark.parametrize(
    "command", ["refresh-checkpoint", "delete-checkpoint", "create-checkpoint -s"]
)
def test_unknown_id_exits_1_naming_the_error(lake: str, command: str) -> None:
    unknown = str(uuid.uuid4())
    args = command.split()
    code, _, err = (
        run(lake, *args, unknown) if args[-1] == "-s" else run(lake, *args, "-i", unknown)
    )
    assert code == 1
    assert "CheckpointNotFound" in err and unknown in err


def test_destroyed_and_missing_databases_exit_1(lake: str, tmp_path: Path) -> None:
    manifests(lake).update(lambda m: dataclasses.replace(m, destroyed_at_s=1))
    code, _, err = run(lake, "create-checkpoint")
    assert code == 1 and "DatabaseDestroyed" in err
    empty = (tmp_path / "empty").as_uri()
    code, _, err = run(empty, "list-checkpoints")
    assert code == 1 and "DatabaseNotFound" in err


def test_help_texts_describe_the_options(lake: str) -> None:
    r = CliRunner().invoke(GROUP, ["--url", lake, "--path", "p", "create-checkpoint", "--help"])
    assert r.exit_code == 0
    flat = " ".join(r.stdout.split())
    for text in ("--lifetime", "-s, --source", "-n, --name", "7days 30min 10s", "never expires"):
        assert text in flat
    r = CliRunner().invoke(GROUP, ["--url", lake, "--path", "p", "refresh-checkpoint", "--help"])
    assert "-i, --id" in r.stdout and "UUID" in r.stdout
    r = CliRunner().invoke(GROUP, ["--url", lake, "--path", "p", "list-checkpoints", "--help"])
    assert "-n, --name" in r.stdout
