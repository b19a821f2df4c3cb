"""A ``file://`` store whose folder does not exist and cannot be created is blamed on the folder,
with what to do, not on the URL (issue 40, item 6): before the fix, ``slatedb`` said "cannot use
'file:///...' as a store directory: [Errno 1] Operation not permitted", as if the URL were
malformed."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from slatedb_core.cli.main import cli
from slatedb_core.errors import InvalidArgument, StoreDirectoryMissing
from slatedb_core.store.url import open_store, require_store_directory


@pytest.fixture
def unmakeable() -> Path:
    """A folder that does not exist under a parent even root may not write (sysfs)."""
    path = Path("/sys") / f"slatedb-missing-{uuid.uuid4().hex}" / "lake"
    try:
        os.makedirs(path)
    except OSError:
        return path
    os.removedirs(path)
    pytest.skip("/sys is writable here: no folder this test cannot create")


def test_open_store_names_the_missing_folder(unmakeable: Path) -> None:
    with pytest.raises(StoreDirectoryMissing, match=r"does not exist.*create it") as e:
        open_store(unmakeable.as_uri())
    assert isinstance(e.value, InvalidArgument)  # callers catching the old type still do
    assert str(unmakeable.parent) in str(e.value)


def test_cli_names_the_missing_folder(unmakeable: Path) -> None:
    r = CliRunner().invoke(cli, ["--url", unmakeable.as_uri(), "--path", "db", "get", "k"])
    assert r.exit_code == 1, r.output
    assert r.output.count("\n") == 1, r.output
    assert r.output.startswith("error: StoreDirectoryMissing: the store folder /sys/"), r.output
    assert "create it, or fix the URL's path" in r.output, r.output


def test_require_store_directory(tmp_path: Path) -> None:
    require_store_directory(tmp_path.as_uri())
    require_store_directory(str(tmp_path))
    require_store_directory("s3://bucket/prefix")  # not a local store: nothing to check
    with pytest.raises(StoreDirectoryMissing, match="fix --url's path"):
        require_store_directory((tmp_path / "nope").as_uri(), "--url")
    assert not (tmp_path / "nope").exists()
