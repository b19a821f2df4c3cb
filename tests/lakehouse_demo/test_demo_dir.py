"""The demo's ``--dir`` is wiped only when the demo created it (issue 40, item 5): ``make demo``
deleted the whole directory, with any files in it, without asking. A directory the demo did not
create (no marker file) is refused with one line saying how to proceed; one it created is reset,
keeping its generated dataset."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakehouse_demo import workdir
from lakehouse_demo.cli import main
from slatedb_core.errors import InvalidArgument


def test_a_directory_with_a_user_file_is_refused_and_left_intact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "mine"
    d.mkdir()
    (d / "thesis.txt").write_text("years of work")
    for extra in ([], ["--reuse"]):
        code = main(["--dir", str(d), "--rows", "100", *extra])
        assert code == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1, err
        assert str(d) in err and "--dir" in err and "remove it yourself" in err
        assert (d / "thesis.txt").read_text() == "years of work"
        assert sorted(p.name for p in d.iterdir()) == ["thesis.txt"]


def test_a_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(InvalidArgument, match="not a directory"):
        workdir.prepare(f, reset=True)
    assert f.read_text() == "x"


def test_a_new_or_empty_directory_is_taken_and_marked(tmp_path: Path) -> None:
    new = tmp_path / "a" / "b"
    assert workdir.prepare(new, reset=True).startswith("fresh")
    assert (new / workdir.MARKER).is_file()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert workdir.prepare(empty, reset=True).startswith("fresh")
    assert (empty / workdir.MARKER).is_file()


def test_a_demo_directory_is_reset_keeping_its_dataset(tmp_path: Path) -> None:
    d = tmp_path / "demo"
    workdir.prepare(d, reset=True)
    (d / "input").mkdir()
    (d / "input" / "part-00000.parquet").write_bytes(b"dataset")
    (d / "store" / "orders").mkdir(parents=True)
    (d / "store" / "orders" / "x.sst").write_bytes(b"sst")
    (d / "logs").mkdir()
    (d / "logs" / "demo.log").write_text("old log")
    (d / "link").symlink_to(tmp_path)  # a symlink is removed, never followed
    (tmp_path / "outside.txt").write_text("keep")

    mode = workdir.prepare(d, reset=True)
    assert mode.startswith("reset")
    assert sorted(p.name for p in d.iterdir()) == sorted([workdir.MARKER, "input"])
    assert (d / "input" / "part-00000.parquet").read_bytes() == b"dataset"
    assert (tmp_path / "outside.txt").read_text() == "keep"


def test_a_demo_directory_is_reused_as_is(tmp_path: Path) -> None:
    d = tmp_path / "demo"
    workdir.prepare(d, reset=True)
    (d / "store").mkdir()
    (d / "store" / "x").write_bytes(b"sst")
    assert workdir.prepare(d, reset=False).startswith("reuse")
    assert (d / "store" / "x").read_bytes() == b"sst"
