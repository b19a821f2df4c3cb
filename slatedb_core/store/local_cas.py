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

import errno
import fcntl
import os
import stat
from collections.abc import Callable
from typing import TypeVar

from slatedb_core.errors import PreconditionFailed
from slatedb_core.store.local_fs import LocalFiles
from slatedb_core.store.local_root import Dirs, check_regular, local_etag, split_key
from slatedb_core.store.objects import ObjectVersion

T = TypeVar("T")

_LOCK = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # as local_root reads


class LocalCas:
    def __init__(self, files: LocalFiles) -> None:
        self.files = files  # every write, and the guarded walk (files.dirs) the lock opens by

    def _with_lock(
        self, path: str, on_missing: Callable[[], T], body: Callable[[os.stat_result, Dirs], T]
    ) -> T:
        """``body(stat of the locked file, its open directories)`` under the object's lock, or
        ``on_missing()``. The file is opened beneath the store's root with no link on the way
        (LinkInStore); ``body`` writes through the same directory descriptors."""
        self.files.check_key(path)
        root = self.files.dirs
        parts = split_key(path)
        name = parts[-1]
        with root.existing_directory(path, parts[:-1]) as dirs:
            if dirs is None:
                return on_missing()  # no such directory
            while True:
                try:
                    fd = os.open(name, _LOCK, dir_fd=dirs.fd)
                except FileNotFoundError:
                    return on_missing()
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENXIO, errno.EMLINK):
                        check_regular(path, os.stat(name, dir_fd=dirs.fd, follow_symlinks=False))
                    raise
                try:
                    locked = os.fstat(fd)
                    if stat.S_ISDIR(locked.st_mode):
                        return on_missing()  # no object (a write then fails on the directory)
                    check_regular(path, locked)  # a fifo or socket: refused
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    try:
                        now = os.stat(name, dir_fd=dirs.fd, follow_symlinks=False)
                    except FileNotFoundError:
                        return on_missing()
                    if (locked.st_ino, locked.st_dev) != (now.st_ino, now.st_dev):
                        continue  # replaced while we waited: lock the new inode instead
                    return body(locked, dirs)
                finally:
                    os.close(fd)  # closing releases the flock

    def put_if_match(self, path: str, data: bytes, expected: ObjectVersion) -> ObjectVersion:
        def missing() -> ObjectVersion:
            raise PreconditionFailed(path)

        def update(current: os.stat_result, dirs: Dirs) -> ObjectVersion:
            # the locked inode is the one the path names (checked above): its e-tag is current
            if expected.e_tag is not None and local_etag(current) != expected.e_tag:
                raise PreconditionFailed(path)
            return self.files.overwrite(path, data, opened=dirs)

        return self._with_lock(path, missing, update)

    def put_overwrite(self, path: str, data: bytes) -> ObjectVersion:
        def write() -> ObjectVersion:
            return self.files.overwrite(path, data)

        return self._with_lock(
            path, write, lambda _st, dirs: self.files.overwrite(path, data, opened=dirs)
        )

    def delete(self, path: str) -> None:
        def nothing() -> None:
            return None

        def remove(_st: os.stat_result, dirs: Dirs) -> None:
            self.files.delete(path, opened=dirs)

        self._with_lock(path, nothing, remove)
