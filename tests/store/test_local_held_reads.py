"""Ranged reads of a ``file://`` store keep their descriptors open, and still answer as a fresh
walk does (slatedb_core/store/local_root.py; issue 42, goal 1: the local ranged GET opened the
file and each directory on its way for every block a point lookup read).

Each case reads a range once (so its descriptors are held), changes the object or a directory
on its way behind the store's back (as another process, or GC, would), and compares the next
ranged read with a store opened afresh (which holds nothing): bytes, metadata, or the error."""

from __future__ import annotations

import gc
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from slatedb_core.errors import SlateDBError
from slatedb_core.store import local_root
from slatedb_core.store.local_root import HELD_FILES
from slatedb_core.store.objectstore import ObstoreObjectStore
from slatedb_core.store.url import open_store

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc (Linux)")

KEY = "db/compacted/a.sst"
RANGE = (2, 6)


def _store(root: Path) -> ObstoreObjectStore:
    s = open_store(root.as_uri())
    assert isinstance(s, ObstoreObjectStore)
    return s


def _answer(store: ObstoreObjectStore, key: str = KEY) -> object:
    """What a ranged read returns (bytes and metadata) or raises (type and message)."""
    try:
        got = store.get(key, byte_range=RANGE)
    except SlateDBError as e:
        return type(e).__name__, str(e)
    return got.data, got.meta


def _open_to(root: Path) -> list[str]:
    """What this process's descriptors name under ``root``."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(root)):
            out.append(target)
    return out


def _replace_file(root: Path) -> None:
    (root / "db/compacted/new").write_bytes(b"ZYXWVUTSRQ")
    os.replace(root / "db/compacted/new", root / KEY)


def _delete_file(root: Path) -> None:
    (root / KEY).unlink()


def _file_to_link(root: Path) -> None:
    (root / "elsewhere").write_bytes(b"secret-bytes")
    (root / KEY).unlink()
    (root / KEY).symlink_to(root / "elsewhere")


def _dir_to_link(root: Path) -> None:
    shutil.copytree(root / "db/compacted", root / "copy")
    shutil.rmtree(root / "db/compacted")
    (root / "db/compacted").symlink_to(root / "copy")


def _dir_moved_and_remade(root: Path) -> None:
    os.rename(root / "db", root / "old-db")
    (root / "db/compacted").mkdir(parents=True)
    (root / KEY).write_bytes(b"abcdefghij")


def _dir_moved_away(root: Path) -> None:
    os.rename(root / "db", root / "old-db")


def _truncated(root: Path) -> None:
    with open(root / KEY, "r+b") as f:
        f.truncate(3)


def _rewritten_in_place(root: Path) -> None:
    with open(root / KEY, "r+b") as f:
        f.write(b"9876543210")


@pytest.mark.parametrize(
    "change",
    [
        _replace_file,
        _delete_file,
        _file_to_link,
        _dir_to_link,
        _dir_moved_and_remade,
        _dir_moved_away,
        _truncated,
        _rewritten_in_place,
    ],
)
def test_a_changed_object_reads_as_a_fresh_walk_reads_it(
    tmp_path: Path, change: Callable[[Path], None]
) -> None:
    store = _store(tmp_path)
    store.put(KEY, b"0123456789")
    assert store.get(KEY, byte_range=RANGE).data == b"2345"
    assert any(t.endswith(KEY) for t in _open_to(tmp_path))  # held
    change(tmp_path)
    want = _answer(_store(tmp_path))
    assert _answer(store) == want
    assert _answer(store) == want  # and again, through what the first read held


def test_a_delete_through_the_store_lets_the_file_go(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.put(KEY, b"0123456789")
    store.get(KEY, byte_range=RANGE)
    store.delete(KEY)
    assert not [t for t in _open_to(tmp_path) if "a.sst" in t]  # no deleted file held
    assert _answer(store) == _answer(_store(tmp_path))


def test_held_descriptors_are_bounded(tmp_path: Path) -> None:
    store = _store(tmp_path)
    keys = [f"db/compacted/{i:04d}.sst" for i in range(3 * HELD_FILES)]
    for k in keys:
        store.put(k, b"0123456789")
    for k in keys:
        assert store.get(k, byte_range=RANGE).data == b"2345"
    files = [t for t in _open_to(tmp_path) if t.endswith(".sst")]
    assert len(files) == HELD_FILES  # the most recently read
    assert sorted(os.path.basename(t) for t in files) == [
        os.path.basename(k) for k in keys[-HELD_FILES:]
    ]
    # a file and the two directories on its way per object, nothing more
    assert len(_open_to(tmp_path)) <= 3 * HELD_FILES + 1


def test_every_stores_held_descriptors_share_one_process_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review of issue 42's held descriptors: each store held up to 32 objects' descriptors
    (file and directories), so ten live stores took ~1,000 of a default 1,024 open-file limit.
    Every store's held descriptors now count against one budget (HELD_FDS_MAX, or a quarter of
    the soft limit)."""
    monkeypatch.setattr(local_root, "HELD_FDS_MAX", 30, raising=False)
    stores = []
    for n in range(4):
        root = tmp_path / f"s{n}"
        root.mkdir()
        store = _store(root)
        keys = [f"db/compacted/{i:04d}.sst" for i in range(20)]
        for k in keys:
            store.put(k, b"0123456789")
        for k in keys:
            assert store.get(k, byte_range=RANGE).data == b"2345"
        stores.append(store)
    # each store's root directory stays open; held objects' descriptors at most the budget
    assert len(_open_to(tmp_path)) <= 30 + len(stores)
    # reads still answer once the budget is spent, and after a store lets its files go
    assert stores[0].get("db/compacted/0000.sst", byte_range=RANGE).data == b"2345"
    del stores[1:]
    gc.collect()
    assert stores[0].get("db/compacted/0019.sst", byte_range=RANGE).data == b"2345"


def _range_answer(store: ObstoreObjectStore) -> object:
    """What a point lookup's read (``read_range``) returns or raises (type and message)."""
    try:
        return store.read_range(KEY, *RANGE)
    except SlateDBError as e:
        return type(e).__name__, str(e)


@pytest.mark.parametrize(
    "change", [_replace_file, _delete_file, _file_to_link, _truncated, _rewritten_in_place]
)
def test_a_point_lookups_read_sees_what_a_fresh_walk_sees_of_the_file(
    tmp_path: Path, change: Callable[[Path], None]
) -> None:
    """Issue 42, goal 1: a point lookup's block read (``read_range``) checks only the file's own
    name in its held directory (one fstatat, not one per component). Whatever happens to the
    file itself it answers and fails as a fresh walk does."""
    store = _store(tmp_path)
    store.put(KEY, b"0123456789")
    assert store.read_range(KEY, *RANGE) == b"2345"
    assert any(t.endswith(KEY) for t in _open_to(tmp_path))  # held
    change(tmp_path)
    want = _range_answer(_store(tmp_path))
    assert _range_answer(store) == want
    assert _range_answer(store) == want


def test_a_point_lookups_read_never_follows_a_directory_swapped_for_a_link(
    tmp_path: Path,
) -> None:
    """A directory above the file swapped for a link after the file was held: the point
    lookup's read goes on reading the file it checked when it opened it (never the link's
    target), and every other operation, a fresh walk, refuses the link."""
    store = _store(tmp_path)
    store.put(KEY, b"0123456789")
    assert store.read_range(KEY, *RANGE) == b"2345"
    os.rename(tmp_path / "db/compacted", tmp_path / "moved")
    (tmp_path / "other").mkdir()
    (tmp_path / "other/a.sst").write_bytes(b"secret-bytes")
    (tmp_path / "db/compacted").symlink_to(tmp_path / "other")
    assert store.read_range(KEY, *RANGE) == b"2345"
    assert _answer(store)[0] == "LinkInStore"  # type: ignore[index]
    assert _range_answer(_store(tmp_path))[0] == "LinkInStore"  # type: ignore[index]


def test_a_point_lookups_read_is_counted_as_a_get(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.put(KEY, b"0123456789")
    before = store.counters.snapshot()["get"], store.counters.bytes_snapshot()["read"]
    store.read_range(KEY, *RANGE)  # walks
    store.read_range(KEY, 0, 100)  # held, cut at the end
    with pytest.raises(SlateDBError, match="past the end"):
        store.read_range(KEY, 10, 12)
    assert store.counters.snapshot()["get"] - before[0] == 3
    assert store.counters.bytes_snapshot()["read"] - before[1] == 4 + 10
