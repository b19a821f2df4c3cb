"""Conditional update (``PutMode::Update``) for obstore's LocalStore, safe across processes.

obstore's LocalStore implements create-if-absent (hard link, atomic) but not update-if-match, and
SlateDB's own GC boundary advance silently stops working on a local filesystem because of it. We
provide it with an advisory ``flock`` on the object's current inode:

1. open the object; a missing object fails the precondition;
2. ``flock(LOCK_EX)`` the open file;
3. re-``stat`` the path: if it now names a different inode, somebody replaced the object while we
   waited for the lock, so drop the lock and start again (otherwise two updaters could each hold a
   lock on a different inode and both succeed);
4. compare the stored e-tag with the expected one;
5. write through :meth:`~slatedb_core.store.local_fs.LocalFiles.overwrite` (a staged file, synced
   and renamed over the path) while holding the lock, so the lock holder is the only one that can
   replace the inode it locked.

Unconditional overwrites and deletes of existing objects take the same lock, so they serialise
with conditional updates instead of slipping between a check and its write.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from typing import Any, TypeVar

import obstore

from slatedb_core.errors import PreconditionFailed
from slatedb_core.store.local_fs import LocalFiles
from slatedb_core.store.objects import ObjectVersion

T = TypeVar("T")


class LocalCas:
    def __init__(self, inner: Any, files: LocalFiles) -> None:
        self._inner = inner  # obstore's LocalStore over files.root, for reads
        self.files = files  # every write

    def _with_lock(self, path: str, on_missing: Callable[[], T], body: Callable[[], T]) -> T:
        full = self.files.full_path(path)
        while True:
            try:
                fd = os.open(full, os.O_RDONLY)
            except FileNotFoundError:
                return on_missing()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                locked = os.fstat(fd)
                try:
                    now = os.stat(full)
                except FileNotFoundError:
                    return on_missing()
                if (locked.st_ino, locked.st_dev) != (now.st_ino, now.st_dev):
                    continue  # replaced while we waited: lock the new inode instead
                return body()
            finally:
                os.close(fd)  # closing releases the flock

    def put_if_match(self, path: str, data: bytes, expected: ObjectVersion) -> ObjectVersion:
        def missing() -> ObjectVersion:
            raise PreconditionFailed(path)

        def update() -> ObjectVersion:
            current = obstore.head(self._inner, path)
            if expected.e_tag is not None and current.get("e_tag") != expected.e_tag:
                raise PreconditionFailed(path)
            return self.files.overwrite(path, data)

        return self._with_lock(path, missing, update)

    def put_overwrite(self, path: str, data: bytes) -> ObjectVersion:
        def write() -> ObjectVersion:
            return self.files.overwrite(path, data)

        return self._with_lock(path, write, write)

    def delete(self, path: str) -> None:
        def nothing() -> None:
            return None

        def remove() -> None:
            self.files.delete(path)

        self._with_lock(path, nothing, remove)
