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

Every name is made, replaced or removed relative to its directory's descriptor, opened beneath
the root with no symbolic link on the way (:mod:`slatedb_core.store.local_root`, SECURITY.md).

E-tags are obstore's (``"<inode>-<mtime µs>-<size>"`` in hex), taken from the staged file, so
:func:`obstore.head` and this module agree on an object's version.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from slatedb_core.errors import InvalidArgument, ObjectAlreadyExists, ObjectNotFound
from slatedb_core.store.local_root import (
    STAGED,
    Dirs,
    LocalRoot,
    check_regular,
    local_etag,
    split_key,
)
from slatedb_core.store.objects import ObjectVersion, validate_relative_path

if TYPE_CHECKING:
    from typing_extensions import Buffer

T = TypeVar("T")

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def fsync_path(path: str) -> None:
    """``fsync`` a file or directory by name (a directory's fsync makes its entries durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalFiles:
    """The writes of one local-filesystem store rooted at ``root``. Every name is reached through
    :class:`~slatedb_core.store.local_root.LocalRoot` (``self.dirs``): relative to directory
    descriptors, never through a symbolic link (SECURITY.md)."""

    def __init__(self, root: Path, *, sync: bool = True) -> None:
        self.root = str(root)
        self.sync = sync
        self.dirs = LocalRoot(self.root)
        self._synced_dirs: set[str] = set()  # directories whose entry this object synced

    def __repr__(self) -> str:
        return f"LocalFiles({self.root!r}, sync={self.sync})"

    # ---- the one write path ---------------------------------------------------------------
    def _commit(
        self,
        path: str,
        apply: Callable[[int, str], T],
        *,
        create_parents: bool = True,
        opened: Dirs | None = None,
    ) -> T:
        """Run ``apply(dir_fd, name)`` (the link, rename or unlink that changes the name in its
        directory, opened beneath the root with no link on the way; ``opened``: already open,
        by the caller's lock), creating missing parent directories first, then make the change
        durable: fsync the parent directory and the parent of every directory on the path not
        yet known synced (module doc, step 3)."""
        self.check_key(path)
        parts = split_key(path)
        if opened is not None:
            return self._apply(parts, apply, opened, create_parents)
        with self.dirs.directory(path, parts[:-1], create=create_parents) as dirs:
            return self._apply(parts, apply, dirs, create_parents)

    def _apply(
        self, parts: list[str], apply: Callable[[int, str], T], dirs: Dirs, create_parents: bool
    ) -> T:
        result = apply(dirs.fd, parts[-1])
        self.dirs.forget("/".join(parts))  # a replaced or deleted file's held reads let go
        self._sync(dirs.fd)
        if create_parents and self.sync:
            self._synced_dirs.difference_update(dirs.made)  # made again: not synced yet
            chain: list[str] = []
            for i in range(len(parts) - 1, 0, -1):  # deepest first
                d = "/".join(parts[:i])
                if d in self._synced_dirs:
                    break
                os.fsync(dirs.fds[i - 1])  # each directory's entry lives in its parent
                chain.append(d)
            self._synced_dirs.update(chain)  # only once the whole path is synced
        return result

    def _sync(self, fd: int) -> None:
        if self.sync:
            os.fsync(fd)

    def check_key(self, path: str) -> str:
        """``path`` if it is a valid key of a local store (InvalidArgument otherwise)."""
        validate_relative_path(path)
        if STAGED.search(path):
            raise InvalidArgument(
                f"object path {path!r} ends in '#<digits>', which a local-filesystem store "
                "reserves for staged writes; choose another name"
            )
        return path

    def _stage(self, at: int, name: str, chunks: Iterable[Buffer]) -> tuple[str, ObjectVersion]:
        """Write ``chunks`` (each written as it comes) to a fresh staged file
        next to ``name`` in directory ``at``, synced; its name and version. If writing or the
        chunks raise, the staged file is removed."""
        while True:
            staged = f"{name}#{secrets.randbits(48)}"
            try:
                fd = os.open(
                    staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666, dir_fd=at
                )
                break
            except FileExistsError:
                continue
        try:
            try:
                for chunk in chunks:
                    view = memoryview(chunk).cast("B")
                    while view:
                        view = view[os.write(fd, view) :]
                    del view, chunk  # the caller may drop the chunk: nothing here keeps it
                if self.sync:
                    os.fsync(fd)
                version = ObjectVersion(local_etag(os.fstat(fd)))
            finally:
                os.close(fd)
        except BaseException:
            _remove(at, staged)
            raise
        return staged, version

    # ---- operations -------------------------------------------------------------------------
    def create(self, path: str, data: bytes) -> ObjectVersion:
        """Create-if-absent. Raises ObjectAlreadyExists."""
        return self.create_streamed(path, (data,))

    def create_streamed(self, path: str, chunks: Iterable[Buffer]) -> ObjectVersion:
        """:meth:`create` of the concatenation of ``chunks``, each written to the staged file as
        it is produced (the whole object is never in memory), then synced and linked into place
        if absent exactly as :meth:`create` does. If the chunks raise, the staged file is
        removed and nothing is at ``path``. Raises ObjectAlreadyExists."""

        def link(at: int, name: str) -> ObjectVersion:
            staged, version = self._stage(at, name, chunks)
            try:
                os.link(staged, name, src_dir_fd=at, dst_dir_fd=at, follow_symlinks=False)
            except FileExistsError:
                raise ObjectAlreadyExists(path) from None
            finally:
                _remove(at, staged)
            return version

        return self._commit(path, link)

    def overwrite(self, path: str, data: bytes, *, opened: Dirs | None = None) -> ObjectVersion:
        """Unconditional create-or-replace (atomic: a reader sees the old or the new bytes);
        ``opened``: ``path``'s directories, already open (:mod:`~slatedb_core.store.local_cas`)."""

        def rename(at: int, name: str) -> ObjectVersion:
            staged, version = self._stage(at, name, (data,))
            try:
                os.rename(staged, name, src_dir_fd=at, dst_dir_fd=at)
            except BaseException:
                _remove(at, staged)
                raise
            return version

        return self._commit(path, rename, opened=opened)

    def link(self, src: str, dst: str) -> None:
        """``dst`` as a new name of ``src``'s file (a copy without moving bytes). Raises
        ObjectNotFound (``src``) or ObjectAlreadyExists (``dst``)."""
        self.check_key(src)
        src_parts = src.split("/")

        def link(at: int, name: str) -> None:
            try:
                with self.dirs.directory(src, src_parts[:-1]) as s:
                    src_name = src_parts[-1]
                    # a regular file, not a link (LinkInStore)
                    check_regular(src, os.stat(src_name, dir_fd=s.fd, follow_symlinks=False))
                    if self.sync:  # the bytes, in case they were written with sync off
                        fd = os.open(src_name, _READ, dir_fd=s.fd)
                        try:
                            os.fsync(fd)
                        finally:
                            os.close(fd)
                    # no AT_SYMLINK_FOLLOW: a link swapped in since the check is linked as
                    # itself, inside the store, and refused by every later read
                    os.link(src_name, name, src_dir_fd=s.fd, dst_dir_fd=at, follow_symlinks=False)
            except FileExistsError:
                raise ObjectAlreadyExists(dst) from None
            except (FileNotFoundError, NotADirectoryError):
                raise ObjectNotFound(src) from None  # missing, or deleted since the check

        self._commit(dst, link)

    def delete(self, path: str, *, opened: Dirs | None = None) -> None:
        """Remove ``path``; a missing object is not an error. ``opened`` as for overwrite."""

        def unlink(at: int, name: str) -> None:
            try:
                os.unlink(name, dir_fd=at)  # unlinkat: a link here would go, never its target
            except (FileNotFoundError, NotADirectoryError):
                pass

        try:
            self._commit(path, unlink, create_parents=False, opened=opened)
        except (FileNotFoundError, NotADirectoryError):
            pass  # no such directory: nothing to delete

    def sweep_staged(self, prefix: str, *, older_than_s: float, now_s: float) -> tuple[int, int]:
        """Remove the staged writes' files under ``prefix`` (``<name>#<digits>``: what a writer
        that crashed between staging and linking leaves, and no listing shows) last modified
        more than ``older_than_s`` seconds before ``now_s``; returns (files, bytes) removed.
        A write in progress rewrites its staged file as it goes, so it is young; one frozen
        longer than that loses its staged file and its create fails (its link finds nothing),
        so nothing is reported written that is not. Each file's age is read again, relative to
        its directory, just before it is unlinked; no link is followed (module doc)."""
        cutoff = now_s - older_than_s
        files = size = 0
        for key, st in list(self.dirs.walk(prefix, staged=True)):
            if st.st_mtime > cutoff:
                continue
            parts = split_key(key)
            try:
                with self.dirs.directory(key, parts[:-1], create=False) as dirs:
                    again = os.stat(parts[-1], dir_fd=dirs.fd, follow_symlinks=False)
                    if not stat.S_ISREG(again.st_mode) or again.st_mtime > cutoff:
                        continue
                    os.unlink(parts[-1], dir_fd=dirs.fd)
            except (FileNotFoundError, NotADirectoryError):
                continue  # gone already, or its directory is
            files += 1
            size += again.st_size
        return files, size

    def ensure_root(self) -> None:
        """Create the store's directory (and missing parents), durably, and open it."""
        root = Path(self.root)
        missing = [p for p in (root, *root.parents) if not p.exists()]
        root.mkdir(parents=True, exist_ok=True)
        if self.sync:
            for d in missing:  # deepest first
                fsync_path(str(d.parent))
        _ = self.dirs.fd


def _remove(at: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=at)
    except FileNotFoundError:
        pass
