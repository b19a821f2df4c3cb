"""A table opened as a database, and a database opened as a table, say which it is and what to
use (issue 40, item 6): through the public API and the ``slatedb`` CLI. Before the fix,
``Db.open`` on a table's root created a database inside it, ``DbReader.open`` and
``Table.open`` said only "not found"."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from slatedb_core import Db, DbReader, Table, open_store
from slatedb_core.cli.main import cli
from slatedb_core.errors import NotADatabase, NotATable
from slatedb_core.layout import MANIFEST_DIR, join
from slatedb_core.store.objectstore import ObjectStore


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[tuple[str, ObjectStore]]:
    url = (tmp_path / "lake").as_uri()
    store = open_store(url)
    Table.create("orders", store, split_points=[b"m"]).close()
    db = Db.open("plain", store)
    db.put(b"a", b"1")
    db.close()
    yield url, store


def test_db_open_on_a_table_refuses_and_creates_nothing(lake: tuple[str, ObjectStore]) -> None:
    _, store = lake
    with pytest.raises(NotADatabase, match=r"is a table.*Table\.open"):
        Db.open("orders", store)
    assert list(store.list(join("orders", MANIFEST_DIR) + "/")) == []


def test_reader_open_on_a_table_refuses(lake: tuple[str, ObjectStore]) -> None:
    _, store = lake
    with pytest.raises(NotADatabase, match="is a table"):
        DbReader.open("orders", store)


def test_table_open_and_create_on_a_database_refuse(lake: tuple[str, ObjectStore]) -> None:
    _, store = lake
    with pytest.raises(NotATable, match=r"is a database.*Db\.open"):
        Table.open("plain", store)
    with pytest.raises(NotATable):
        Table.create("plain", store)
    with pytest.raises(NotATable):
        Table.open_or_create("plain", store)
    assert list(store.list("plain/shardmap/")) == []


def test_cli_database_command_on_a_table(lake: tuple[str, ObjectStore]) -> None:
    url, _ = lake
    for args in (["get", "a"], ["scan"], ["list-checkpoints"]):
        r = CliRunner().invoke(cli, ["--url", url, "--path", "orders", *args])
        assert r.exit_code == 1, (args, r.output)
        lines = r.output.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in r.output, r.output
        assert "NotADatabase" in lines[0] and "table ..." in lines[0], r.output


def test_cli_table_command_on_a_database(lake: tuple[str, ObjectStore]) -> None:
    url, _ = lake
    r = CliRunner().invoke(cli, ["--url", url, "--path", "plain", "table", "show"])
    assert r.exit_code == 1, r.output
    assert r.output.count("\n") == 1 and "NotATable" in r.output, r.output
    assert "get/scan" in r.output, r.output


def test_missing_paths_still_say_not_found(lake: tuple[str, ObjectStore]) -> None:
    url, _ = lake
    r = CliRunner().invoke(cli, ["--url", url, "--path", "nothing", "get", "a"])
    assert r.exit_code == 1 and "DatabaseNotFound" in r.output, r.output
    r = CliRunner().invoke(cli, ["--url", url, "--path", "nothing", "table", "show"])
    assert r.exit_code == 1 and "DatabaseNotFound" in r.output, r.output


def test_a_table_nested_under_a_new_path_does_not_make_it_a_table(
    lake: tuple[str, ObjectStore],
) -> None:
    """Review of issue 40, item 6: a table at ``metrics/shardmap`` made ``Db.open("metrics")`` of a
    new database fail as "a table", and a database at ``sales/manifest`` made ``Table.create``
    at ``sales`` fail as "a database": the check took any object under the folder as proof."""
    _, store = lake
    Table.create("metrics/shardmap", store, []).close()
    Db.open("metrics", store).close()
    Db.open("sales/manifest", store).close()
    Table.create("sales", store, []).close()
