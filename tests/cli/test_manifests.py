from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slatedb_core.cli.main import cli
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import FencedManifest, ManifestStore
from slatedb_core.store.url import open_store


@pytest.fixture
def lake(tmp_path: Path) -> str:
    url = (tmp_path / "lake").as_uri()
    ms = ManifestStore(open_store(url), "orders")
    ms.create_initial(Manifest())
    w = FencedManifest.init_writer(ms)
    w.update(lambda m: dataclasses.replace(m, wal_id_last_seen=7))
    return url


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, list(args), env=env)
    return r.exit_code, r.stdout, r.stderr


def test_list_manifests_json(lake: str) -> None:
    code, out, _ = run("--url", lake, "--path", "orders", "list-manifests", "--json")
    assert code == 0
    rows = json.loads(out)
    assert [r["id"] for r in rows] == [1, 2, 3]
    assert rows[0]["path"] == "orders/manifest/00000000000000000001.manifest"


def test_list_manifests_range(lake: str) -> None:
    code, out, _ = run(
        "--url", lake, "--path", "orders", "list-manifests", "--start", "2", "--end", "3", "--json"
    )
    assert code == 0 and [r["id"] for r in json.loads(out)] == [2]


def test_read_manifest_latest_and_by_id(lake: str) -> None:
    code, out, _ = run("--url", lake, "--path", "orders", "read-manifest", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["id"] == 3 and d["writer_epoch"] == 1 and d["wal_id_last_seen"] == 7
    code, out, _ = run("--url", lake, "--path", "orders", "read-manifest", "--id", "1", "--json")
    assert json.loads(out)["writer_epoch"] == 0


def test_human_output_is_a_table(lake: str) -> None:
    code, out, _ = run("--url", lake, "--path", "orders", "read-manifest")
    assert code == 0 and "writer_epoch" in out and "orders manifest 3" in out
    code, out, _ = run("--url", lake, "--path", "orders", "list-manifests")
    assert code == 0 and "3 manifest(s)" in out


def test_url_from_environment(lake: str) -> None:
    code, out, _ = run("--path", "orders", "list-manifests", "--json", env={"SLATEDB_URL": lake})
    assert code == 0 and len(json.loads(out)) == 3


@pytest.mark.parametrize(
    "args",
    [
        ["read-manifest", "--id", "0"],
        ["read-manifest", "--id", "x"],
        ["list-manifests", "--start", "-1"],
        ["list-manifests", "--start", "5", "--end", "2"],
        ["no-such-command"],
    ],
)
def test_bad_arguments_exit_2(lake: str, args: list[str]) -> None:
    code, _, _ = run("--url", lake, "--path", "orders", *args)
    assert code == 2


def test_missing_url_is_a_usage_error() -> None:
    code, _, err = run("--path", "orders", "list-manifests", env={"SLATEDB_URL": ""})
    assert code == 2 and "--url" in err


@pytest.mark.parametrize(
    ("url", "path", "expected"),
    [
        ("gs://bucket", "orders", "InvalidArgument"),
        (None, "../orders", "InvalidArgument"),
        (None, "/abs/orders", "InvalidArgument"),
        (None, "missing", "DatabaseNotFound"),
    ],
)
def test_errors_are_typed_and_exit_1(lake: str, url: str | None, path: str, expected: str) -> None:
    code, _, err = run("--url", url or lake, "--path", path, "read-manifest")
    assert code == 1
    assert err.startswith(f"error: {expected}")


def test_unknown_manifest_id_is_object_not_found(lake: str) -> None:
    code, _, err = run("--url", lake, "--path", "orders", "read-manifest", "--id", "99")
    assert code == 1 and "ObjectNotFound" in err


def test_corrupt_manifest_is_reported_not_crashed(lake: str) -> None:
    store = open_store(lake)
    path = "orders/manifest/00000000000000000003.manifest"
    data = bytearray(store.get(path).data)
    data[-1] ^= 1
    store.put(path, bytes(data))
    code, _, err = run("--url", lake, "--path", "orders", "read-manifest")
    assert code == 1 and "CorruptionError" in err and path in err
    assert store.get(path).data == bytes(data), "reading must not modify stored data"
