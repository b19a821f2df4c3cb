"""A ``file://`` listing of a deeply nested folder (review of issue 39, follow-up item 2): the
guarded walk of ``slatedb_core/store/local_root.py`` recursed once per directory level, so
~1,200 nested directories raised ``StoreError: maximum recursion depth exceeded`` and GC and
the fleet scan stopped for that database. Planting such a tree needs only write access to the
database folder (the threat of SECURITY.md)."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from slatedb_core.store.url import open_store

DEPTH = 1_500


def _plant(root: Path, depth: int) -> str:
    """``depth`` nested directories under ``root`` with one file at the bottom, made relative
    to directory descriptors (the full path is longer than PATH_MAX); returns the file's key."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            sub = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = sub
        leaf = os.open("obj", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(leaf, b"bottom")
        os.close(leaf)
    finally:
        os.close(fd)
    return "/".join(["d"] * depth + ["obj"])


def _unplant(root: Path) -> None:
    """Remove :func:`_plant`'s chain one level at a time (``d/d`` moved up over ``d``): shutil's
    rmtree, which pytest cleans its old temporary directories with, recurses per level too."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        while True:
            try:
                os.rename("d/d", "up", src_dir_fd=fd, dst_dir_fd=fd)
            except FileNotFoundError:
                break
            os.rmdir("d", dir_fd=fd)
            os.rename("up", "d", src_dir_fd=fd, dst_dir_fd=fd)
        os.unlink("d/obj", dir_fd=fd)
        os.rmdir("d", dir_fd=fd)
    finally:
        os.close(fd)


@contextmanager
def _fd_limit(soft: int) -> Iterator[None]:
    """The usual default limit of open files (1024) while the listing runs."""
    old_soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (old_soft, hard))


def test_an_object_under_1500_nested_directories_is_listed(tmp_path: Path) -> None:
    store = open_store(tmp_path.as_uri())
    store.put("db/manifest/00000000000000000001.manifest", b"m")
    key = "db/" + _plant(tmp_path / "db", DEPTH)
    try:
        with _fd_limit(1024):  # a walk holding one descriptor per level would run out here
            listed = [m.path for m in store.list("db")]
            below = [m.path for m in store.list("db/d/d")]
        assert listed == [key, "db/manifest/00000000000000000001.manifest"]
        assert below == [key]
        assert store.get(key).data == b"bottom"
    finally:
        _unplant(tmp_path / "db")
    assert [m.path for m in store.list("db")] == ["db/manifest/00000000000000000001.manifest"]
