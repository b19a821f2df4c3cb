"""A local-filesystem store's directory, held open, with every key resolved beneath it and no
symbolic link on the way: the one guard every read, write, list and delete of a ``file://``
store goes through (SECURITY.md; issue 39, item 4).

Someone who can write into a database folder (another local user, a job with a narrower task)
could plant a link there, ``db/compacted -> /other/lake/db/compacted`` or
``db/manifest/x -> ~/.aws/credentials``; a store that opens paths by name follows it, and a GC
pass then deletes another lake's SSTs. Here no path is opened by its full name:

* the root is opened once, when the store is (``O_DIRECTORY``); links on the operator's own path
  *to* the root are resolved then (``file:///srv/lake`` may be reached through ``/srv -> /data``)
  and the directory stays pinned by its descriptor, so swapping a component above the root later
  moves nothing;
* each directory component of a key is opened relative to its parent's descriptor with
  ``O_NOFOLLOW | O_DIRECTORY``, and the last one is opened (``O_NOFOLLOW``), stat'ed
  (``fstatat(AT_SYMLINK_NOFOLLOW)``), linked, renamed or unlinked relative to its directory's
  descriptor (``openat``, ``linkat``, ``renameat``, ``unlinkat``), which never follow a link in
  the last component either. A link anywhere below the root is :class:`LinkInStore`; so is a
  name that is not a regular file (a pipe would block a reader forever);
* a listing never descends into a linked directory and leaves linked entries out (with a
  warning), so GC never sees, and never deletes, what a link points at.

There is no time-of-check-to-time-of-use window: the check *is* the open, and every later step
uses the descriptor it returned. What remains: a directory already opened may be renamed out of
the root by someone who can write its parent (then our step acts inside that directory, on
entries that person controls, never through a link); and hard links cannot be told from the
file they name. No write ever changes a file in place (a new file is staged and renamed or
linked over the name: :mod:`slatedb_core.store.local_fs`), so a planted hard link can make a read
return its target's bytes (which its planter could already read) but never a write change them,
and a delete only removes the store's own name. Walking costs a few ``openat`` calls per key,
less than obstore's own GET of the same range (bench/local_guard_bench.py).

Ranged reads (an SST's blocks: issue 42, goal 1) keep the descriptors of the walk open, for at
most :data:`HELD_FILES` objects per store (least recently read out first) and
:data:`HELD_FDS_MAX` descriptors across every store of the process, and check them again on every
read instead of opening them again: each component's name, ``fstatat``'ed relative to its held
parent without following a link, must still be the directory or file held (device and inode;
an inode held open is never reused). Any difference (a name deleted, replaced, renamed or made
a link) drops the held descriptors and the read walks as above, so it answers and fails exactly
as a fresh walk does: a read of a deleted SST is ObjectNotFound. A delete or replacement through
this store (:mod:`slatedb_core.store.local_fs`) also lets its held descriptors go at once, so a
deleted file's space is not held by a reader; one deleted by another process is held until it
leaves the cache or is read again.

Point lookups (:meth:`LocalRoot.read_held`, a block of an SST past the block cache) check only
the file's own name in its held directory, one ``fstatat`` instead of one per component (each
costs ~1.7 us, a third of such a read). A file deleted, replaced or made a link is seen as above.
A directory above it renamed or swapped after it was opened is not, and that grants nothing: the
descriptors held are the directories and the file the walk checked, inside the root when opened;
someone who could rename a directory of the store could already replace its files, which the
name check sees. The next read of the file's name in a fresh walk sees the swap: a ranged
:meth:`LocalRoot.read` checks every component, and a whole or suffix read, which walks afresh,
lets a held file go that is not the one it found. Opening an SST does one of these
(:meth:`slatedb_core.sst.reader.SstReader.open`), so its blocks come from the file whose index it
read, never from a file its name held before a folder was moved aside (review 52).
"""

from __future__ import annotations

import errno
import logging
import os
import re
import resource
import stat
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from slatedb_core.errors import InvalidArgument, LinkInStore, ObjectNotFound, StoreError
from slatedb_core.store.objects import ObjectMeta

log = logging.getLogger(__name__)

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC  # NONBLOCK: a fifo opens at once
_NOT_A_DIR = (errno.ENOTDIR, errno.ELOOP, getattr(errno, "EMLINK", -1))  # BSDs: EMLINK


STAGED = re.compile(r"#\d+$")
"""obstore's LocalStore (and :mod:`~slatedb_core.store.local_fs`) stage a write in ``<name>#<digits>``
next to its object: such names are no objects, and listings hide them."""
_BAD_PARTS = frozenset(("", ".", ".."))
HELD_FILES = 32
"""Objects whose open descriptors (the file's and its directories') ranged reads keep."""
HELD_FDS_MAX = 512
"""Descriptors the held objects of every store in the process keep at most together; less when
the process's open-file limit is low (a quarter of its soft limit), so many live stores never
run a process out of descriptors (:func:`held_fd_budget`)."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def local_etag(st: os.stat_result) -> str:
    """The e-tag obstore's LocalStore reports for a file with this ``stat``."""
    return f'"{st.st_ino:x}-{st.st_mtime_ns // 1000:x}-{st.st_size:x}"'


def object_meta(key: str, st: os.stat_result) -> ObjectMeta:
    """``key``'s metadata as obstore's LocalStore reports it (its time in whole microseconds)."""
    return ObjectMeta(
        path=key,
        size=st.st_size,
        last_modified=_EPOCH + timedelta(microseconds=st.st_mtime_ns // 1000),
        e_tag=local_etag(st),
    )


class LocalRoot:
    """The directory of one local store, open for the store's lifetime (closed when collected)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None
        self._lock = threading.Lock()
        self._held = _HeldFiles(HELD_FILES)
        weakref.finalize(self, self._held.close_all)

    def __repr__(self) -> str:
        return f"LocalRoot({self.path!r})"

    @property
    def fd(self) -> int:
        fd = self._fd
        if fd is None:
            with self._lock:
                if self._fd is None:
                    # the operator's path, links and all: the root may be reached through one
                    fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
                    weakref.finalize(self, os.close, fd)
                    self._fd = fd
                fd = self._fd
        return fd

    # ---- directories ----------------------------------------------------------------------
    def _open_dir(self, key: str, at: int, name: str, shown: str) -> int:
        """``name`` in the directory ``at``, opened as a directory without following a link."""
        try:
            return os.open(name, _DIR, dir_fd=at)
        except OSError as e:
            if e.errno in _NOT_A_DIR and _is_link(at, name):
                raise LinkInStore(key, f"{shown!r} is a symbolic link") from None
            raise

    def open_dirs(self, key: str, parts: list[str], *, create: bool = False) -> Dirs:
        """The directories ``parts`` (a key's leading components) opened one below the other
        from the root; ``create`` makes missing ones (and records them in ``Dirs.made``).
        Raises LinkInStore for a link, FileNotFoundError (``create`` false) for a missing one,
        NotADirectoryError for a file in the way. The caller closes the result."""
        if not _BAD_PARTS.isdisjoint(parts):
            raise InvalidArgument(f"object path {key!r} has an empty, '.' or '..' segment")
        dirs = Dirs(self.fd)
        try:
            for i, name in enumerate(parts):
                at = dirs.fds[-1]
                shown = "/".join(parts[: i + 1])
                try:
                    fd = self._open_dir(key, at, name, shown)
                except FileNotFoundError:
                    if not create:
                        raise
                    try:
                        os.mkdir(name, dir_fd=at)
                        dirs.made.append(shown)
                    except FileExistsError:
                        pass  # a racing writer made it (or planted something: opened below)
                    fd = self._open_dir(key, at, name, shown)
                dirs.fds.append(fd)
        except BaseException:
            dirs.close()
            raise
        return dirs

    @contextmanager
    def directory(self, key: str, parts: list[str], *, create: bool = False) -> Iterator[Dirs]:
        """:meth:`open_dirs`, closed on exit."""
        dirs = self.open_dirs(key, parts, create=create)
        try:
            yield dirs
        finally:
            dirs.close()

    @contextmanager
    def existing_directory(self, key: str, parts: list[str]) -> Iterator[Dirs | None]:
        """:meth:`directory` without creating, or None when one of ``parts`` is missing or a
        file (LinkInStore for a link all the same)."""
        try:
            dirs = self.open_dirs(key, parts)
        except (FileNotFoundError, NotADirectoryError):
            yield None
            return
        try:
            yield dirs
        finally:
            dirs.close()

    # ---- files ----------------------------------------------------------------------------
    def open_file(self, key: str) -> tuple[int, os.stat_result]:
        """``key``'s regular file opened for reading, and its ``fstat``: the read path's one
        walk (no context manager: this is the hot path). Raises ObjectNotFound (missing, or a
        directory, as obstore's LocalStore does) or LinkInStore; the caller closes the fd."""
        parts = split_key(key)
        at = self.fd
        opened: list[int] = []
        try:
            for i in range(len(parts) - 1):
                try:
                    at = self._open_dir(key, at, parts[i], "/".join(parts[: i + 1]))
                except (FileNotFoundError, NotADirectoryError):
                    raise ObjectNotFound(key) from None
                opened.append(at)
            try:
                fd = os.open(parts[-1], _FILE, dir_fd=at)
            except OSError as e:
                if e.errno in (errno.ENOENT, errno.ENOTDIR):
                    raise ObjectNotFound(key) from None
                if e.errno in _NOT_A_DIR or e.errno == errno.ENXIO:  # ENXIO: a socket
                    kind = "a symbolic link" if _is_link(at, parts[-1]) else "not a regular file"
                    raise LinkInStore(key, f"{key!r} is {kind}") from None
                raise
        finally:
            for d in opened:
                os.close(d)
        try:
            st = os.fstat(fd)
            check_regular(key, st)
        except BaseException:
            os.close(fd)
            raise
        return fd, st

    def _open_held(self, key: str) -> _Held:
        """:meth:`open_file`'s walk with every descriptor kept (the directories' too), for
        :meth:`read_held`: raises as :meth:`open_file` does."""
        parts = split_key(key)
        at = self.fd
        fds: list[int] = []
        ids: list[tuple[int, int]] = []
        try:
            for i in range(len(parts) - 1):
                try:
                    at = self._open_dir(key, at, parts[i], "/".join(parts[: i + 1]))
                except (FileNotFoundError, NotADirectoryError):
                    raise ObjectNotFound(key) from None
                fds.append(at)
                st = os.fstat(at)
                ids.append((st.st_dev, st.st_ino))
            try:
                fd = os.open(parts[-1], _FILE, dir_fd=at)
            except OSError as e:
                if e.errno in (errno.ENOENT, errno.ENOTDIR):
                    raise ObjectNotFound(key) from None
                if e.errno in _NOT_A_DIR or e.errno == errno.ENXIO:  # ENXIO: a socket
                    kind = "a symbolic link" if _is_link(at, parts[-1]) else "not a regular file"
                    raise LinkInStore(key, f"{key!r} is {kind}") from None
                raise
            fds.append(fd)
            st = os.fstat(fd)
            check_regular(key, st)
            ids.append((st.st_dev, st.st_ino))
        except BaseException:
            for d in fds:
                os.close(d)
            raise
        return _Held(key, parts, fds, ids, st)

    def _held_file(self, key: str) -> tuple[_Held, os.stat_result]:
        """``key``'s held descriptors, pinned, and its file's current ``stat``: the ones held
        when every name on the way still is what they hold, else a fresh walk's."""
        cache = self._held
        held = cache.pin(key)
        if held is not None:
            at = self.fd
            st: os.stat_result | None = None
            for name, fd, (dev, ino) in zip(held.parts, held.fds, held.ids, strict=True):
                try:
                    st = os.stat(name, dir_fd=at, follow_symlinks=False)
                except OSError:
                    st = None
                    break
                if st.st_ino != ino or st.st_dev != dev:
                    st = None
                    break
                at = fd
            if st is not None:
                return held, st
            cache.drop(held)
            cache.unpin(held)
        held = self._open_held(key)
        cache.add(held)
        return held, held.st

    def read_held(self, key: str, start: int, end: int) -> bytes | None:
        """Bytes [start, end) of ``key`` when its descriptors are held (a point lookup's block:
        issue 42, goal 1), without metadata; None when they are not held, or the file's name in
        its held directory no longer names the file held (deleted, replaced, made a link): then
        :meth:`read` it (validating ``key`` first), which walks, and answers and fails as a
        fresh walk does. A held key was validated by its first read. Unlike :meth:`read`, the
        directories above the file are not checked again (module doc, "Point lookups")."""
        cache = self._held
        held = cache.pin(key)
        if held is None:
            return None
        try:
            fds = held.fds
            try:
                st = os.stat(
                    held.parts[-1],
                    dir_fd=fds[-2] if len(fds) > 1 else self.fd,
                    follow_symlinks=False,
                )
            except OSError:
                st = None
            if st is None or (st.st_dev, st.st_ino) != held.ids[-1]:
                cache.drop(held)
                return None
            return self._pread(key, fds[-1], st.st_size, start, end)
        finally:
            cache.unpin(held)

    def forget(self, key: str) -> None:
        """Let ``key``'s held descriptors go (it was deleted or replaced through this store)."""
        self._held.forget(key)

    def read(
        self,
        key: str,
        byte_range: tuple[int, int] | None = None,
        *,
        suffix: int | None = None,
        unless_e_tag: str | None = None,
    ) -> tuple[bytes, ObjectMeta] | None:
        """``key``'s bytes (all, ``byte_range`` [start, end) cut at the end, or the last
        ``suffix``) and metadata; None when its e-tag is ``unless_e_tag`` (a conditional GET's
        304). A range starting at or past the end is a StoreError, as on obstore's LocalStore.
        A ranged read goes through the held descriptors (module doc)."""
        if byte_range is not None and suffix is None and unless_e_tag is None:
            held, st = self._held_file(key)
            try:
                return self._read_open(key, held.fds[-1], st, held.meta(st), byte_range, None)
            finally:
                self._held.unpin(held)
        fd, st = self.open_file(key)
        # a fresh walk found the file its name holds now: a held file that is not it (its
        # directory moved aside) must not serve the next point lookup (module doc)
        self._held.forget_unless(key, (st.st_dev, st.st_ino))
        try:
            meta = object_meta(key, st)
            if unless_e_tag is not None and meta.e_tag == unless_e_tag:
                return None
            return self._read_open(key, fd, st, meta, byte_range, suffix)
        finally:
            os.close(fd)

    @staticmethod
    def _read_open(
        key: str,
        fd: int,
        st: os.stat_result,
        meta: ObjectMeta,
        byte_range: tuple[int, int] | None,
        suffix: int | None,
    ) -> tuple[bytes, ObjectMeta]:
        """The bytes :meth:`read` returns, from the open file ``fd`` whose ``stat`` is ``st``."""
        size = st.st_size
        if suffix is not None:
            start, end = max(0, size - suffix), size
        elif byte_range is None:
            start, end = 0, size
        else:
            return LocalRoot._pread(key, fd, size, *byte_range), meta
        return _pread_all(fd, start, end), meta

    @staticmethod
    def _pread(key: str, fd: int, size: int, start: int, end: int) -> bytes:
        """Bytes [start, end) of the open file ``fd`` of ``size`` bytes, cut at its end; a
        range starting at or past the end is a StoreError, as on obstore's LocalStore."""
        if start >= size:
            raise StoreError(
                f"get {key} failed: range [{start}, {end}) starts at or past the end "
                f"of the object ({size} bytes)",
                path=key,
            )
        return _pread_all(fd, start, min(end, size))

    def lstat(self, key: str) -> os.stat_result:
        """``key``'s regular file's ``stat``, without opening it. Raises like :meth:`open_file`."""
        parts = split_key(key)
        try:
            with self.directory(key, parts[:-1]) as dirs:
                st = os.stat(parts[-1], dir_fd=dirs.fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            raise ObjectNotFound(key) from None
        check_regular(key, st)
        return st

    def walk(self, prefix: str, *, staged: bool = False) -> Iterator[tuple[str, os.stat_result]]:
        """Every regular file under the directory ``prefix`` ("" for the root), as (key, stat),
        in no particular order; links are neither listed nor followed (each is logged), other
        non-files are skipped. A link on the prefix's own path is LinkInStore; a prefix that is
        missing, or a file, lists nothing (as obstore's LocalStore does). ``staged``: list the
        staged writes' files (:data:`STAGED` names) instead of the objects."""
        parts = split_key(prefix) if prefix else []
        try:
            with self.directory(prefix, parts) as dirs:
                yield from self._walk(dirs.fd, prefix, staged)
        except (FileNotFoundError, NotADirectoryError):
            return

    def _walk(
        self, top: int, base: str, staged: bool = False
    ) -> Iterator[tuple[str, os.stat_result]]:
        """:meth:`walk` below the open directory ``top``: depth first, each directory's entries
        in ``scandir`` order with a subdirectory's listing in its place (what recursing gives),
        but with an explicit stack, so a planted tree of any depth neither exceeds Python's
        recursion limit nor, along a chain, holds one descriptor per level: a directory's is
        closed as soon as it has no subdirectory left to open (review of issue 39)."""
        stack = [_Scan.of(top, base, owned=False)]
        try:
            while stack:
                scan = stack[-1]
                if scan.next == len(scan.entries):
                    stack.pop().close()
                    continue
                name, st = scan.entries[scan.next]
                scan.next += 1
                key = f"{scan.base}/{name}" if scan.base else name
                if stat.S_ISLNK(st.st_mode):
                    log.warning(
                        "file:// store %s: %r is a symbolic link; not listed or followed "
                        "(remove it: SECURITY.md)",
                        self.path,
                        key,
                    )
                elif stat.S_ISREG(st.st_mode):
                    if (STAGED.search(name) is not None) == staged and _is_text(name):
                        yield key, st
                elif stat.S_ISDIR(st.st_mode):
                    scan.dirs_left -= 1
                    try:
                        sub = self._open_dir(key, scan.fd, name, key)
                    except LinkInStore:  # swapped for a link since the scan
                        log.warning(
                            "file:// store %s: %r became a symbolic link; skipped", self.path, key
                        )
                        continue
                    except (FileNotFoundError, NotADirectoryError):
                        continue
                    finally:
                        if scan.dirs_left == 0:
                            scan.close()  # its files' stats are taken: nothing left to open
                    stack.append(_Scan.of(sub, key, owned=True))
        finally:
            for scan in stack:
                scan.close()


class _FdBudget:
    """The descriptors every store's held objects keep, counted against one process-wide budget."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.used = 0

    def take(self, n: int) -> bool:
        """Count ``n`` more held descriptors, if the budget has room for them."""
        with self._lock:
            if self.used + n > held_fd_budget():
                return False
            self.used += n
            return True

    def give_back(self, n: int) -> None:
        with self._lock:
            self.used -= n


def held_fd_budget() -> int:
    """:data:`HELD_FDS_MAX`, or a quarter of the soft open-file limit when that is less."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return HELD_FDS_MAX if soft == resource.RLIM_INFINITY else min(HELD_FDS_MAX, soft // 4)


_BUDGET = _FdBudget()


class _Held:
    """One object's descriptors held for ranged reads: its directories' (root first) and its
    file's (last), each component's (device, inode), and the metadata last built for it."""

    __slots__ = ("_meta", "counted", "evicted", "fds", "ids", "key", "parts", "pins", "st")

    def __init__(
        self,
        key: str,
        parts: list[str],
        fds: list[int],
        ids: list[tuple[int, int]],
        st: os.stat_result,
    ) -> None:
        self.key = key
        self.parts = parts
        self.fds = fds
        self.ids = ids
        self.st = st
        self.pins = 1  # the opener's read
        self.evicted = False
        self.counted = 0  # descriptors counted in the process-wide budget (_BUDGET)
        self._meta: tuple[int, int, ObjectMeta] | None = None

    def meta(self, st: os.stat_result) -> ObjectMeta:
        """:func:`object_meta` of the file with this ``stat`` (the inode is the one held),
        built again only when its time or size changed."""
        m = self._meta
        if m is not None and m[0] == st.st_mtime_ns and m[1] == st.st_size:
            return m[2]
        meta = object_meta(self.key, st)
        self._meta = (st.st_mtime_ns, st.st_size, meta)
        return meta

    def close(self) -> None:
        fds, self.fds = self.fds, []
        for fd in fds:
            os.close(fd)
        if self.counted:
            _BUDGET.give_back(self.counted)
            self.counted = 0


class _HeldFiles:
    """At most ``capacity`` :class:`_Held` by key, least recently read first out. A read pins
    its entry; an entry evicted or dropped while pinned is closed by its last unpin, so no
    descriptor is closed (and its number reused) under a read still using it."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._items: OrderedDict[str, _Held] = OrderedDict()
        self._lock = threading.Lock()

    def pin(self, key: str) -> _Held | None:
        with self._lock:
            held = self._items.get(key)
            if held is not None:
                held.pins += 1
                self._items.move_to_end(key)
            return held

    def unpin(self, held: _Held) -> None:
        with self._lock:
            held.pins -= 1
            doomed = held.evicted and held.pins == 0
        if doomed:
            held.close()

    def add(self, held: _Held) -> None:
        """Hold ``held`` (pinned by its opener), in place of any other for its key. When the
        process-wide budget has no room for its descriptors even after this cache let its own
        oldest go, it is not held: closed at its opener's unpin, as an evicted one."""
        closing = []
        with self._lock:
            items = self._items
            old = items.pop(held.key, None)
            if old is not None:
                closing.append(self._evict(old))
            while len(items) >= self._capacity:
                closing.append(self._evict(items.popitem(last=False)[1]))
            for gone in closing:  # closed now: their descriptors free budget for the new one
                if gone is not None:
                    gone.close()
            while not _BUDGET.take(len(held.fds)):
                if not items:
                    held.evicted = True
                    return
                h = self._evict(items.popitem(last=False)[1])
                if h is not None:
                    h.close()
            held.counted = len(held.fds)
            items[held.key] = held

    def _evict(self, held: _Held) -> _Held | None:
        """Mark ``held`` out of the cache (lock held): itself when no read uses it (to close)."""
        held.evicted = True
        return held if held.pins == 0 else None

    def drop(self, held: _Held) -> None:
        """``held`` no longer names its key's object: out of the cache (closed when unpinned)."""
        with self._lock:
            if self._items.get(held.key) is held:
                del self._items[held.key]
            held.evicted = True

    def forget_unless(self, key: str, file_id: tuple[int, int]) -> None:
        """:meth:`forget` ``key`` unless the file held is ``file_id`` (device, inode): the one
        a fresh walk of its name just found."""
        with self._lock:
            held = self._items.get(key)
            if held is None or held.ids[-1] == file_id:
                return
            del self._items[key]
            doomed = self._evict(held) is not None
        if doomed:
            held.close()

    def forget(self, key: str) -> None:
        with self._lock:
            held = self._items.pop(key, None)
            doomed = held is not None and self._evict(held) is not None
        if doomed:
            assert held is not None
            held.close()

    def close_all(self) -> None:
        with self._lock:
            items = list(self._items.values())
            self._items.clear()
            doomed = [h for h in items if self._evict(h) is not None]
        for h in doomed:
            h.close()


class _Scan:
    """One directory of :meth:`LocalRoot._walk`'s stack: its entries (name, ``lstat``), taken
    when it is scanned, and the next one to visit."""

    __slots__ = ("base", "dirs_left", "entries", "fd", "next", "owned")

    def __init__(
        self, fd: int, base: str, owned: bool, entries: list[tuple[str, os.stat_result]]
    ) -> None:
        self.fd = fd
        self.base = base
        self.owned = owned
        self.entries = entries
        self.next = 0
        self.dirs_left = sum(1 for _, st in entries if stat.S_ISDIR(st.st_mode))

    @classmethod
    def of(cls, fd: int, base: str, *, owned: bool) -> _Scan:
        """The directory ``fd`` scanned (``owned``: closed with the scan, or on an error here)."""
        try:
            with os.scandir(fd) as it:
                found = list(it)
            entries = []
            for entry in found:
                try:
                    entries.append((entry.name, entry.stat(follow_symlinks=False)))
                except FileNotFoundError:
                    continue  # gone since the scan
        except BaseException:
            if owned:
                os.close(fd)
            raise
        return cls(fd, base, owned, entries)

    def close(self) -> None:
        """Close the directory if it is the walk's to close (once)."""
        if self.owned:
            self.owned = False
            os.close(self.fd)


class Dirs:
    """The directories :meth:`LocalRoot.directory` opened: ``fds[0]`` is the root's (not ours
    to close), ``fds[-1]`` (``fd``) the deepest; ``made`` names those it created."""

    __slots__ = ("fds", "made")

    def __init__(self, root_fd: int) -> None:
        self.fds = [root_fd]
        self.made: list[str] = []

    @property
    def fd(self) -> int:
        return self.fds[-1]

    def close(self) -> None:
        """Close every descriptor but the root's."""
        fds, self.fds = self.fds, self.fds[:1]
        for fd in fds[1:]:
            os.close(fd)


def _pread_all(fd: int, start: int, end: int) -> bytes:
    """Bytes [start, end) of the open file ``fd``, read on after a short read (a huge file), and
    fewer when it ends first (a file shrinking meanwhile: the caller's length check sees it)."""
    data = os.pread(fd, end - start, start)
    if len(data) < end - start:
        chunks = [data]
        got = len(data)
        while got < end - start:
            more = os.pread(fd, end - start - got, start + got)
            if not more:
                break
            chunks.append(more)
            got += len(more)
        data = b"".join(chunks)
    return data


def check_regular(key: str, st: os.stat_result) -> None:
    """ObjectNotFound for a directory (obstore's answer), LinkInStore for a link or any other
    thing that is not a regular file."""
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise ObjectNotFound(key, f"object not found: {key} (a directory)")
    kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
    raise LinkInStore(key, f"{key!r} is {kind}")


def _is_text(name: str) -> bool:
    """Whether a file name is valid UTF-8 (obstore lists no other)."""
    try:
        name.encode()
    except UnicodeEncodeError:
        return False
    return True


def split_key(key: str) -> list[str]:
    """``key``'s components; a key with an empty, '.' or '..' one never reaches the walk (the
    store validates keys first: this holds the guard by itself)."""
    parts = key.split("/")
    if not _BAD_PARTS.isdisjoint(parts):
        raise InvalidArgument(f"object path {key!r} has an empty, '.' or '..' segment")
    return parts


def _is_link(at: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=at, follow_symlinks=False).st_mode)
    except OSError:
        return False
