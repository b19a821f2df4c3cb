"""Every write to a local-filesystem store, on the device before it is acknowledged.

obstore's LocalStore writes an object by staging it in ``<path>#<n>`` and then hard-linking
(create-if-absent) or renaming (overwrite) it into place; it never calls ``fsync``. After a power
loss or a kernel crash such an object can be missing, or present with no bytes, even though its
put returned. In SlateDB's format that is not a harmless loss: a zero-byte WAL object is a writer's
fence (:mod:`slatedb_core.wal.log`), so a torn WAL SST would hide every later write, and a newer
WAL SST could survive an older one that did not (a state that never existed).

So :class:`LocalFiles` does the local writes itself, in the order SQLite and RocksDB (with sync)
use, and every one of them goes through :meth:`LocalFiles._commit`:

1. stage the bytes in ``<path>#<digits>`` (a name obstore's listing hides) and ``fsync`` the file;
2. create the name: ``link`` (create-if-absent, atomic: of racing creators exactly one wins) or
   ``rename`` (overwrite, atomic), or ``unlink`` for a delete, creating missing parent directories;
3. ``fsync`` the parent directory, and the parent of every directory on the path not yet known
   synced (up to the store root), so the new name and its path survive a crash. "Known synced"
   is per store object: a directory whose parent it synced after the directory existed. A
   directory it found already there is not enough: another writer may have just made it and
   not synced it yet (that writer's put has not returned, this one's would).

An object is therefore either absent or whole after a crash, never empty or torn, and a put that
returned is on the device. ``sync=False`` (``file:///dir?sync=false``, docs/operations.md) skips
the ``fsync`` calls and nothing else: for tests and benchmarks, never for data one wants to keep.

E-tags are obstore's (``"<inode>-<mtime µs>-<size>"`` in hex), taken from the staged file, so
:func:`obstore.head` and this module agree on an object's version.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from slatedb_core.errors import InvalidArgument, ObjectAlreadyExists, ObjectNotFound
from slatedb_core.store.objects import ObjectVersion, validate_relative_path

T = TypeVar("T")

# obstore's LocalStore reserves names ending in '#<digits>' for staged uploads (and hides them)
_STAGED = re.compile(r"#\d+$")


def local_etag(st: os.stat_result) -> str:
    """The e-tag obstore's LocalStore reports for a file with this ``stat``."""
    return f'"{st.st_ino:x}-{st.st_mtime_ns // 1000:x}-{st.st_size:x}"'


def fsync_path(path: str) -> None:
    """``fsync`` a file or directory by name (a directory's fsync makes its entries durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalFiles:
    """The writes of one local-filesystem store rooted at ``root``."""

    def __init__(self, root: Path, *, sync: bool = True) -> None:
        self.root = str(root)
        self.sync = sync
        self._synced_dirs: set[str] = set()  # directories whose entry this object synced

    def __repr__(self) -> str:
        return f"LocalFiles({self.root!r}, sync={self.sync})"

    # ---- the one write path ---------------------------------------------------------------
    def _commit(self, path: str, apply: Callable[[str], T], *, create_parents: bool = True) -> T:
        """Run ``apply(full_path)`` (the link, rename or unlink that changes the name), creating
        missing parent directories first, then make the change durable: fsync the parent
        directory and the parent of every directory on the path not yet known synced (module
        doc, step 3)."""
        full = self.full_path(path)
        parent = os.path.dirname(full)
        missing = self._missing_dirs(parent) if create_parents else []
        for d in reversed(missing):  # top-down
            try:
                os.mkdir(d)
            except FileExistsError:
                pass  # a racing writer made it; we still sync its entry below
        result = apply(full)
        self._sync(parent)
        if create_parents and self.sync:
            self._synced_dirs.difference_update(missing)  # made again: not synced yet
            chain: list[str] = []
            d = parent
            while d != self.root and d not in self._synced_dirs:  # deepest first
                chain.append(d)
                d = os.path.dirname(d)
            for d in chain:
                fsync_path(os.path.dirname(d))  # each directory's entry lives in its parent
            self._synced_dirs.update(chain)  # only once the whole path is synced
        return result

    def _sync(self, path: str) -> None:
        if self.sync:
            fsync_path(path)

    def _missing_dirs(self, parent: str) -> list[str]:
        missing: list[str] = []
        while parent != self.root and not os.path.isdir(parent):
            missing.append(parent)
            parent = os.path.dirname(parent)
        return missing

    def full_path(self, path: str) -> str:
        validate_relative_path(path)
        if _STAGED.search(path):
            raise InvalidArgument(
                f"object path {path!r} ends in '#<digits>', which a local-filesystem store "
                "reserves for staged writes; choose another name"
            )
        return os.path.join(self.root, path)

    def _stage(self, full: str, data: bytes) -> tuple[str, ObjectVersion]:
        """Write ``data`` to a fresh staged file next to ``full``, synced; its name and version."""
        while True:
            staged = f"{full}#{secrets.randbits(48)}"
            try:
                fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
                break
            except FileExistsError:
                continue
        try:
            try:
                view = memoryview(data).cast("B")
                while view:
                    view = view[os.write(fd, view) :]
                if self.sync:
                    os.fsync(fd)
                version = ObjectVersion(local_etag(os.fstat(fd)))
            finally:
                os.close(fd)
        except BaseException:
            _remove(staged)
            raise
        return staged, version

    # ---- operations -------------------------------------------------------------------------
    def create(self, path: str, data: bytes) -> ObjectVersion:
        """Create-if-absent. Raises ObjectAlreadyExists."""

        def link(full: str) -> ObjectVersion:
            staged, version = self._stage(full, data)
            try:
                os.link(staged, full)
            except FileExistsError:
                raise ObjectAlreadyExists(path) from None
            finally:
                _remove(staged)
            return version

        return self._commit(path, link)

    def overwrite(self, path: str, data: bytes) -> ObjectVersion:
        """Unconditional create-or-replace (atomic: a reader sees the old or the new bytes)."""

        def rename(full: str) -> ObjectVersion:
            staged, version = self._stage(full, data)
            try:
                os.rename(staged, full)
            except BaseException:
                _remove(staged)
                raise
            return version

        return self._commit(path, rename)

    def link(self, src: str, dst: str) -> None:
        """``dst`` as a new name of ``src``'s file (a copy without moving bytes). Raises
        ObjectNotFound (``src``) or ObjectAlreadyExists (``dst``)."""
        src_full = self.full_path(src)

        def link(full: str) -> None:
            if not os.path.isfile(src_full):
                raise ObjectNotFound(src)
            self._sync(src_full)  # the bytes, in case they were written with sync off
            try:
                os.link(src_full, full)
            except FileExistsError:
                raise ObjectAlreadyExists(dst) from None
            except FileNotFoundError:
                raise ObjectNotFound(src) from None  # deleted since the check

        self._commit(dst, link)

    def delete(self, path: str) -> None:
        """Remove ``path``; a missing object is not an error."""

        def unlink(full: str) -> None:
            try:
                os.unlink(full)
            except (FileNotFoundError, NotADirectoryError):
                pass

        self._commit(path, unlink, create_parents=False)

    def ensure_root(self) -> None:
        """Create the store's directory (and missing parents), durably."""
        root = Path(self.root)
        missing = [p for p in (root, *root.parents) if not p.exists()]
        root.mkdir(parents=True, exist_ok=True)
        for d in missing:  # deepest first
            self._sync(str(d.parent))


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
