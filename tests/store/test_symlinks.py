"""A ``file://`` store never follows a symbolic link below its root (issue 39, item 4).

Each test plants a link inside a store's directory, the way someone who can write into a
database folder but not into another lake could, and runs one store operation (or a real GC
pass) through it: nothing outside the store may be read, written, listed or deleted, and the
operation answers :class:`~slatedb_core.errors.LinkInStore` (or, for a listing, leaves the link
out). Every store here is a real obstore-backed ``file://`` store from ``open_store``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from slatedb_core.errors import (
    LinkInStore,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
)
from slatedb_core.gc import run_gc_once
from slatedb_core.store.objectstore import ObjectStore, ObjectVersion
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db
from tests.gc import ZERO

SECRET = b"another lake's bytes"


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    root = tmp_path / "lake"
    root.mkdir()
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside the store, holding one file the store must never touch."""
    d = tmp_path / "outside"
    (d / "sub").mkdir(parents=True)
    (d / "secret.sst").write_bytes(SECRET)
    (d / "sub" / "deep.sst").write_bytes(SECRET)
    return d


def untouched(outside: Path) -> None:
    assert (outside / "secret.sst").read_bytes() == SECRET
    assert (outside / "sub" / "deep.sst").read_bytes() == SECRET
    assert sorted(p.name for p in outside.iterdir()) == ["secret.sst", "sub"]
    assert sorted(p.name for p in (outside / "sub").iterdir()) == ["deep.sst"]


def dir_link(lake: Path, outside: Path) -> None:
    """``db/compacted`` is a link to the outside directory."""
    (lake / "db").mkdir()
    (lake / "db" / "compacted").symlink_to(outside, target_is_directory=True)


def file_link(lake: Path, outside: Path) -> None:
    """``db/compacted/secret.sst`` is a link to the outside file."""
    (lake / "db" / "compacted").mkdir(parents=True)
    (lake / "db" / "compacted" / "secret.sst").symlink_to(outside / "secret.sst")


PLANTS = [pytest.param(dir_link, id="dir-link"), pytest.param(file_link, id="file-link")]
KEY = "db/compacted/secret.sst"

READS: list[Any] = [
    pytest.param(lambda s: s.get(KEY), id="get"),
    pytest.param(lambda s: s.get(KEY, byte_range=(0, 5)), id="get_range"),
    pytest.param(lambda s: s.get(KEY, byte_range=(3, 3)), id="get_empty_range"),
    pytest.param(lambda s: s.get_suffix(KEY, 5), id="get_suffix"),
    pytest.param(lambda s: s.get_if_none_match(KEY, '"nope"'), id="get_if_none_match"),
    pytest.param(lambda s: s.head(KEY), id="head"),
    pytest.param(lambda s: s.exists(KEY), id="exists"),
    pytest.param(lambda s: s.flush_and_evict([KEY]), id="flush_and_evict"),
]


@pytest.mark.parametrize("plant", PLANTS)
@pytest.mark.parametrize("op", READS)
def test_a_read_through_a_link_is_refused(
    lake: Path, outside: Path, plant: Callable[[Path, Path], None], op: Any
) -> None:
    store = open_store(lake.as_uri())
    plant(lake, outside)
    with pytest.raises(LinkInStore) as e:
        op(store)
    assert "link" in str(e.value) and SECRET.decode() not in str(e.value)
    untouched(outside)


WRITES: list[Any] = [
    pytest.param(lambda s: s.put(KEY, b"planted"), id="put"),
    pytest.param(lambda s: s.put_if_absent(KEY, b"planted"), id="put_if_absent"),
    pytest.param(lambda s: s.put_if_absent("db/compacted/new.sst", b"x"), id="put_if_absent_new"),
    pytest.param(lambda s: s.put("db/compacted/new.sst", b"x"), id="put_new"),
    pytest.param(
        lambda s: s.put_if_match(KEY, b"planted", ObjectVersion(s_etag(s))), id="put_if_match"
    ),
    pytest.param(lambda s: s.delete(KEY), id="delete"),
    pytest.param(lambda s: s.delete("db/compacted/sub/deep.sst"), id="delete_deep"),
    pytest.param(lambda s: s.copy_if_absent(KEY, "db/copied.sst"), id="copy_src"),
    pytest.param(lambda s: s.copy_if_absent("db/own.sst", "db/compacted/c.sst"), id="copy_dst"),
]


def s_etag(store: ObjectStore) -> str:
    return store.head("db/own.sst").e_tag or ""


@pytest.mark.parametrize("plant", PLANTS)
@pytest.mark.parametrize("op", WRITES)
def test_a_write_or_delete_through_a_link_stays_in_the_store(
    lake: Path, outside: Path, plant: Callable[[Path, Path], None], op: Any
) -> None:
    store = open_store(lake.as_uri())
    plant(lake, outside)
    store.put("db/own.sst", b"own")
    # refused, or (a file link where another key is asked for) answered without the link
    with contextlib.suppress(LinkInStore, ObjectAlreadyExists, ObjectNotFound, PreconditionFailed):
        op(store)
    untouched(outside)
    for d, _dirs, files in os.walk(lake):  # no copy of the outside's bytes came in
        for f in files:
            p = Path(d) / f
            assert p.is_symlink() or p.read_bytes() != SECRET, p


def test_a_write_through_a_dir_link_raises_the_typed_error(lake: Path, outside: Path) -> None:
    store = open_store(lake.as_uri())
    dir_link(lake, outside)
    for op in (
        lambda: store.put("db/compacted/new.sst", b"x"),
        lambda: store.put_if_absent("db/compacted/new.sst", b"x"),
        lambda: store.delete(KEY),
        lambda: store.copy_if_absent(KEY, "db/c.sst"),
    ):
        with pytest.raises(LinkInStore, match="remove the link"):
            op()
    untouched(outside)
    assert not (lake / "db" / "c.sst").exists()


def test_a_listing_does_not_descend_through_a_link(lake: Path, outside: Path) -> None:
    store = open_store(lake.as_uri())
    store.put("db/compacted/own.sst", b"own")
    (lake / "db" / "compacted" / "evil").symlink_to(outside, target_is_directory=True)
    (lake / "db" / "compacted" / "evil.sst").symlink_to(outside / "secret.sst")
    assert [m.path for m in store.list("db")] == ["db/compacted/own.sst"]
    assert [m.path for m in store.list("")] == ["db/compacted/own.sst"]
    with pytest.raises(LinkInStore):
        list(store.list("db/compacted/evil"))
    untouched(outside)


def test_a_listing_under_a_linked_prefix_is_refused(lake: Path, outside: Path) -> None:
    store = open_store(lake.as_uri())
    dir_link(lake, outside)
    with pytest.raises(LinkInStore):
        list(store.list("db/compacted"))
    with pytest.raises(LinkInStore):
        list(store.list("db/compacted/sub"))
    assert [m.path for m in store.list("db")] == []


def test_a_gc_pass_does_not_delete_another_lakes_sst(tmp_path: Path) -> None:
    """The issue's reproduction: ``db/compacted`` of one lake links to another lake's
    ``db/compacted``; a GC pass over the first must not delete the second's SSTs."""
    other = open_store((tmp_path / "other").as_uri())
    with Db.open("db", other) as db:
        db.put(b"k", b"v")
        db.flush_memtable()
    victim_dir = tmp_path / "other" / "db" / "compacted"
    victims = sorted(p.name for p in victim_dir.iterdir())
    assert victims

    lake = open_store((tmp_path / "lake").as_uri())
    with Db.open("db", lake) as db:
        db.put(b"mine", b"v")
    compacted = tmp_path / "lake" / "db" / "compacted"
    if compacted.exists():
        for p in compacted.iterdir():
            p.unlink()
        compacted.rmdir()
    compacted.symlink_to(victim_dir, target_is_directory=True)

    try:
        run_gc_once("db", lake, ZERO)
    except LinkInStore:
        pass
    assert sorted(p.name for p in victim_dir.iterdir()) == victims
    with Db.open("db", other) as db:
        assert db.get(b"k") == b"v"


def test_the_root_may_be_reached_through_a_link(tmp_path: Path) -> None:
    """The operator's own path to the root may hold links (resolved once when the store is
    opened); only links below the root are refused."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "alias").symlink_to(real, target_is_directory=True)
    store = open_store((tmp_path / "alias" / "lake").as_uri())
    store.put("db/x", b"1")
    assert store.get("db/x").data == b"1"
    assert (real / "lake" / "db" / "x").read_bytes() == b"1"
    assert [m.path for m in store.list("db")] == ["db/x"]


def test_a_planted_fifo_is_not_an_object(lake: Path) -> None:
    """A named pipe where an SST should be would block a reader forever; it is refused."""
    store = open_store(lake.as_uri())
    store.put("db/own", b"x")
    os.mkfifo(lake / "db" / "pipe.sst")
    with pytest.raises((LinkInStore, ObjectNotFound)):
        store.get("db/pipe.sst")
    assert [m.path for m in store.list("db")] == ["db/own"]


def test_a_planted_hard_link_is_never_written_through(lake: Path, outside: Path) -> None:
    """Hard links cannot be told from the file they name (SECURITY.md), but no write changes a
    file in place: an overwrite, a conditional update or a delete of a hard-linked key replaces
    or removes the store's name and leaves the other name's bytes alone."""
    store = open_store(lake.as_uri())
    store.put("db/own", b"x")
    os.link(outside / "secret.sst", lake / "db" / "hard.sst")
    store.put("db/hard.sst", b"overwritten")
    untouched(outside)
    os.unlink(lake / "db" / "hard.sst")
    os.link(outside / "secret.sst", lake / "db" / "hard.sst")
    version = ObjectVersion(store.head("db/hard.sst").e_tag)
    store.put_if_match("db/hard.sst", b"updated", version)
    untouched(outside)
    os.unlink(lake / "db" / "hard.sst")
    os.link(outside / "secret.sst", lake / "db" / "hard.sst")
    store.delete("db/hard.sst")
    untouched(outside)


def test_the_root_is_pinned_when_the_store_is_opened(tmp_path: Path) -> None:
    """Swapping a directory above the root for a link after the store was opened moves nothing:
    the store keeps working in the directory it opened."""
    (tmp_path / "a" / "lake").mkdir(parents=True)
    store = open_store((tmp_path / "a" / "lake").as_uri())
    store.put("db/x", b"1")
    (tmp_path / "a").rename(tmp_path / "a_old")
    (tmp_path / "evil").mkdir()
    (tmp_path / "a").symlink_to(tmp_path / "evil", target_is_directory=True)
    store.put("db/y", b"2")
    assert store.get("db/x").data == b"1"
    assert (tmp_path / "a_old" / "lake" / "db" / "y").read_bytes() == b"2"
    assert list((tmp_path / "evil").iterdir()) == []
