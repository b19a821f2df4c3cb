"""Reads of a projected database (SlateDB RFC 0004, "Projection"): a reader refuses reads wholly
outside the projected range and clips scans that overlap it, as the writer does, through the
CLI too."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from click.testing import CliRunner

from slatedb_core.cli.main import cli
from slatedb_core.cli.read import register
from slatedb_core.errors import InvalidArgument
from slatedb_core.keys import KeyRange
from slatedb_core.lifecycle.clone import create_clone
from slatedb_core.options import (
    DbOptions,
    DbReaderOptions,
    ReaderMode,
)
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db

register(cli)


OPTS = DbOptions(flush_interval=timedelta(milliseconds=5))


RANGE = KeyRange(b"k020", b"k060")


def key(i: int) -> bytes:
    return b"k%03d" % i


def make_db(store: ObjectStore, path: str, lo: int = 0, hi: int = 100, tag: bytes = b"v") -> None:
    """Keys [lo, hi) flushed to L0 (nothing left only in the WAL)."""
    with Db.open(path, store, OPTS) as db:
        for i in range(lo, hi):
            db.put(key(i), tag + b"%d" % i, await_durable=False)
        db.flush_memtable()


# ---- item 10: DbReader and a projected database's range -----------------------------------------
@pytest.fixture
def projected() -> ObjectStore:
    store = open_store("memory://")
    make_db(store, "src")
    create_clone("proj", "src", store, projection=RANGE)
    return store


READER_MODES = [
    pytest.param(DbReaderOptions(mode=ReaderMode.MANAGED), id="managed"),
    pytest.param(DbReaderOptions(mode=ReaderMode.FOLLOW_LATEST), id="follow-latest"),
]


@pytest.mark.parametrize("options", READER_MODES)
def test_reader_refuses_reads_wholly_outside_a_projected_range(
    projected: ObjectStore, options: DbReaderOptions
) -> None:
    """Found by the review of RELIABILITY.md findings 9, 10, 13 (was test_review_union_clone_reader.py)."""
    with DbReader.open("proj", projected, options=options) as reader:
        assert reader.get(key(30)) == b"v30"
        for outside in (key(5), key(60), key(99)):
            with pytest.raises(InvalidArgument, match="outside this database's range"):
                reader.get(outside)
        with pytest.raises(InvalidArgument, match="outside this database's range"):
            reader.get_many([key(30), key(70)])
        for start, end in ((key(60), key(80)), (None, key(20)), (key(90), None)):
            with pytest.raises(InvalidArgument, match="wholly outside"):
                reader.scan(start, end)
            with pytest.raises(InvalidArgument, match="wholly outside"):
                reader.scan_arrow(start, end)


@pytest.mark.parametrize("options", READER_MODES)
def test_reader_clips_scans_that_overlap_the_range(
    projected: ObjectStore, options: DbReaderOptions
) -> None:
    """Found by the review of RELIABILITY.md findings 9, 10, 13 (was test_review_union_clone_reader.py)."""
    with DbReader.open("proj", projected, options=options) as reader:
        assert [k for k, _ in reader.scan()] == [key(i) for i in range(20, 60)]
        assert [k for k, _ in reader.scan(key(10), key(25))] == [key(i) for i in range(20, 25)]
        table = reader.scan_arrow(key(55), None).read_all()
        assert table.column("key").to_pylist() == [key(i) for i in range(55, 60)]
        assert list(reader.scan(key(30), key(30))) == []  # an empty scan stays empty


def test_reader_and_writer_answer_alike(projected: ObjectStore) -> None:
    """One shared check: the same errors, the same clipping, from the writer and a reader.

    Found by the review of RELIABILITY.md findings 9, 10, 13 (was test_review_union_clone_reader.py)."""
    with Db.open("proj", projected, OPTS) as db:
        with pytest.raises(InvalidArgument) as from_db:
            db.get(key(70))
        with DbReader.open("proj", projected) as reader:
            with pytest.raises(InvalidArgument) as from_reader:
                reader.get(key(70))
            assert str(from_reader.value) == str(from_db.value)
            with pytest.raises(InvalidArgument) as scan_db:
                db.scan(key(70), key(80))
            with pytest.raises(InvalidArgument) as scan_reader:
                reader.scan(key(70), key(80))
            assert str(scan_reader.value) == str(scan_db.value)
            assert list(reader.scan(key(50), key(90))) == list(db.scan(key(50), key(90)))


def test_reader_at_a_checkpoint_of_a_projected_database() -> None:
    """Found by the review of RELIABILITY.md findings 9, 10, 13 (was test_review_union_clone_reader.py)."""
    store = open_store("memory://")
    make_db(store, "src")
    create_clone("proj", "src", store, projection=RANGE)
    with Db.open("proj", store, OPTS) as db:
        cp = db.create_checkpoint()
    with DbReader.open("proj", store, checkpoint=cp.id) as reader:
        with pytest.raises(InvalidArgument, match="outside this database's range"):
            reader.get(key(0))
        assert reader.get(key(59)) == b"v59"


def test_cli_get_and_scan_outside_a_projected_range_fail() -> None:
    """Found by the review of RELIABILITY.md findings 9, 10, 13 (was test_review_union_clone_reader.py)."""
    url = f"memory://review-proj-{uuid.uuid4().hex}"
    store = open_store(url)
    make_db(store, "src")
    create_clone("proj", "src", store, projection=RANGE)

    def run(*args: str) -> tuple[int, str, str]:
        r = CliRunner().invoke(cli, ["--url", url, "--path", "proj", *args])
        return r.exit_code, r.stdout, r.stderr

    code, out, err = run("get", "k070")
    assert code != 0 and "outside this database's range" in err and out == ""
    code, out, err = run("scan", "--from", "k070", "--to", "k080")
    assert code != 0 and "wholly outside" in err
    code, out, _ = run("get", "k030")
    assert code == 0 and out.strip() == "v30"
    code, out, _ = run("scan", "--from", "k055")
    assert code == 0 and [line.split("\t")[0] for line in out.splitlines()] == [
        f"k{i:03d}" for i in range(55, 60)
    ]


def test_reader_of_an_unprojected_database_reads_everything() -> None:
    """Found by the review of RELIABILITY.md findings 9, 10, 13 (was test_review_union_clone_reader.py)."""
    store = open_store("memory://")
    make_db(store, "plain", 0, 10)
    with DbReader.open("plain", store) as reader:
        assert reader.get(key(99)) is None
        assert len(list(reader.scan())) == 10
