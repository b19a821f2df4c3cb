"""The one small object-store interface every other module uses, and its obstore adapter.

Why a wrapper at all: obstore's stores differ in ways the protocol cannot tolerate. LocalStore has
no conditional update and lists in directory order; errors arrive as a mix of built-in and obstore
types (a missing key is the built-in ``FileNotFoundError``, an unsupported operation is
``NotImplementedError`` on LocalStore but ``NotSupportedError`` on S3). This module gives every
store the same contract:

* ``list`` returns objects sorted by path, strictly after ``start_after`` when given;
* ``put_if_absent`` / ``put_if_match`` are atomic conditional writes on every store
  (the local filesystem gets them from :mod:`slatedb_core.store.local_cas`);
* ``copy_if_absent`` is an atomic create of a copy, server-side where the store can do it;
* ``flush_and_evict`` writes bulk outputs to the device and drops them from the page cache (local
  filesystem only; see there why);
* on a local filesystem every write is on the device before it returns (files and directory
  entries synced, :mod:`slatedb_core.store.local_fs`; ``file:///dir?sync=false`` turns that off);
* on a local filesystem every operation (get, ranged and suffix get, conditional get, head,
  put, put_if_absent, put_if_match, copy_if_absent, list, delete, flush_and_evict) reaches its
  file beneath the store's root with no symbolic link on the way, through
  :class:`~slatedb_core.store.local_root.LocalRoot` (:class:`LinkInStore` otherwise;
  SECURITY.md): obstore's LocalStore, which follows links, serves none of them;
* failures are raised as :mod:`slatedb_core.errors` types only;
* every request is counted per kind in :class:`RequestCounters`.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import obstore
from obstore import exceptions as obx
from obstore.store import MemoryStore

from slatedb_core.errors import (
    ErrorKind,
    InvalidArgument,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
    S3CredentialsMissing,
    SlateDBError,
    StoreError,
    UnsupportedOperation,
)
from slatedb_core.store.engine_counters import register_store_counters
from slatedb_core.store.local_root import object_meta
from slatedb_core.store.objects import ObjectMeta as ObjectMeta
from slatedb_core.store.objects import ObjectVersion as ObjectVersion
from slatedb_core.store.objects import validate_relative_path as validate_relative_path

_datasync = getattr(os, "fdatasync", os.fsync)  # macOS has no fdatasync
_fadvise = getattr(os, "posix_fadvise", None)

if TYPE_CHECKING:
    from typing_extensions import Buffer

    from slatedb_core.store.local_cas import LocalCas
    from slatedb_core.store.local_root import LocalRoot

T = TypeVar("T")

OPS = ("get", "head", "put", "put_if_absent", "put_if_match", "copy", "list", "delete")


@dataclass(frozen=True, slots=True)
class GetResult:
    data: bytes
    meta: ObjectMeta

    @property
    def version(self) -> ObjectVersion:
        return ObjectVersion.of(self.meta)


class RequestCounters:
    """Thread-safe count of object-store requests per operation kind."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = dict.fromkeys(OPS, 0)
        self._bytes = {"read": 0, "written": 0}

    def incr(self, op: str, n: int = 1) -> None:
        """Count ``n`` requests of kind ``op``."""
        with self._lock:
            self._counts[op] = self._counts.get(op, 0) + n

    def add_get(self, n: int) -> None:
        """One GET that read ``n`` body bytes (``incr("get")`` and ``add_bytes("read", n)``
        under one lock: a point lookup's block read counts both)."""
        with self._lock:
            self._counts["get"] += 1
            self._bytes["read"] += n

    def add_bytes(self, direction: str, n: int) -> None:
        """Bytes ``read`` or ``written`` (object bodies; exported by
        :mod:`slatedb_core.store.engine_counters`)."""
        with self._lock:
            self._bytes[direction] += n

    def bytes_snapshot(self) -> dict[str, int]:
        """Bytes ``read`` and ``written`` so far."""
        with self._lock:
            return dict(self._bytes)

    def snapshot(self) -> dict[str, int]:
        """The count of each kind of request so far, as a copy."""
        with self._lock:
            return dict(self._counts)

    def total(self) -> int:
        """The number of requests of every kind so far."""
        with self._lock:
            return sum(self._counts.values())

    def reset(self) -> None:
        """Set every count back to zero."""
        with self._lock:
            for k in self._counts:
                self._counts[k] = 0


class ObjectStore(ABC):
    """The interface. Implementations: :class:`ObstoreObjectStore`, wrappers in ``faults``."""

    url: str
    counters: RequestCounters

    @abstractmethod
    def get(self, path: str, *, byte_range: tuple[int, int] | None = None) -> GetResult:
        """Whole object, or bytes [start, end) of it. Raises ObjectNotFound."""

    def read_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of an object (fewer when it ends first), without its metadata: a
        point lookup's block (issue 42, goal 1). This default is a ranged :meth:`get`, so every
        wrapper store keeps its own read semantics; :class:`ObstoreObjectStore` reads a local
        file through its held descriptors, with the same checks. Raises ObjectNotFound."""
        return self.get(path, byte_range=(start, end)).data

    def get_suffix(self, path: str, length: int) -> GetResult:
        """The last ``length`` bytes of an object (all of it when it is shorter); ``meta.size``
        is the whole object's. One suffix-range GET where the store has one (obstore); here a
        HEAD and a ranged GET, through the wrapper's own ``head`` and ``get``."""
        size = self.head(path).size
        return self.get(path, byte_range=(max(0, size - length), size))

    @abstractmethod
    def get_if_none_match(self, path: str, e_tag: str) -> GetResult | None:
        """Conditional GET: None when the stored e-tag still equals ``e_tag`` (HTTP 304)."""

    @abstractmethod
    def head(self, path: str) -> ObjectMeta:
        """Metadata only. Raises ObjectNotFound."""

    @abstractmethod
    def put(self, path: str, data: bytes) -> ObjectVersion:
        """Unconditional overwrite."""

    @abstractmethod
    def put_if_absent(self, path: str, data: bytes) -> ObjectVersion:
        """Atomic create. Raises ObjectAlreadyExists."""

    def create_streamed(self, path: str, chunks: Iterable[Buffer]) -> None:
        """Atomic create of ``path`` holding the concatenation of ``chunks``, which may be
        produced while the object is written (an SST encoded part by part), so the writer need
        not hold the whole object. Raises ObjectAlreadyExists, like :meth:`put_if_absent`. If
        iterating ``chunks`` raises, the exception propagates and nothing is at ``path``.

        This default joins the chunks and calls :meth:`put_if_absent`, so every wrapper store
        (faults, two-phase, no-CAS) keeps its own create semantics; :class:`ObstoreObjectStore`
        streams on a local disk and on S3. As with :func:`~slatedb_core.sst.create.create_sst`,
        an object already there holding exactly these bytes is this create's own attempt that
        landed although its answer was lost (a retried single PUT), and counts as created."""
        _create_joined(self, path, b"".join(chunks))

    @abstractmethod
    def put_if_match(self, path: str, data: bytes, expected: ObjectVersion) -> ObjectVersion:
        """Atomic update of an existing object. Raises PreconditionFailed if it changed or is gone."""

    @abstractmethod
    def copy_if_absent(self, src: str, dst: str) -> None:
        """Copy object ``src`` to a new object ``dst`` inside this store without moving its bytes
        through this process where the store can (a hard link on a local filesystem, a server-side
        copy on S3). Raises ObjectNotFound if ``src`` is missing and ObjectAlreadyExists if ``dst``
        exists.

        The create of ``dst`` is atomic like :meth:`put_if_absent`: of racing copies (or creates)
        to one ``dst`` exactly one succeeds. Counted as one ``copy`` request."""

    @abstractmethod
    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectMeta]:
        """Objects under ``prefix`` (a directory-like prefix), sorted by path."""

    @abstractmethod
    def delete(self, path: str) -> None:
        """Delete; deleting a missing object is not an error."""

    def sweep_staged(self, prefix: str, *, older_than_s: float, now_s: float) -> tuple[int, int]:
        """Remove what crashed writes left under ``prefix`` that is no object: on a local disk,
        the staged files (``<name>#<digits>``, hidden from :meth:`list`) of creates that never
        linked them, last modified more than ``older_than_s`` seconds before ``now_s``. Returns
        (files, bytes) removed. The garbage collector calls it each pass (:mod:`slatedb_core.
        gc.staged`). Stores that stage nothing visible to us (S3: a create is one PUT; memory)
        have none, and this default makes no request. A wrapper store forwards it."""
        return 0, 0

    def exists(self, path: str) -> bool:
        """Whether an object exists at ``path`` (one HEAD request)."""
        try:
            self.head(path)
        except ObjectNotFound:
            return False
        return True

    def flush_and_evict(self, paths: Sequence[str]) -> None:
        """Write these objects' data to the storage device and drop it from the operating
        system's page cache, for bulk outputs that will not be read back soon (staged ingest SSTs).
        Only a store on a local filesystem does anything; an object store keeps nothing in this
        machine's page cache, and this default does nothing. Raises ObjectNotFound for a missing
        object (on stores that act)."""
        return None  # a hint most stores ignore; wrappers pass it on


def _create_joined(store: ObjectStore, path: str, data: bytes) -> None:
    """:meth:`ObjectStore.put_if_absent`, where "already exists" with the same bytes is ours
    (:meth:`ObjectStore.create_streamed`)."""
    try:
        store.put_if_absent(path, data)
    except ObjectAlreadyExists:
        if store.get(path).data != data:
            raise


def _meta(m: Any) -> ObjectMeta:
    return ObjectMeta(
        path=m["path"],
        size=m["size"],
        last_modified=m["last_modified"],
        e_tag=m.get("e_tag"),
        version=m.get("version"),
    )


def map_error(err: BaseException, path: str | None, op: str) -> SlateDBError:
    """Translate an obstore (or built-in) exception into our error tree."""
    if isinstance(err, SlateDBError):
        return err
    where = path or "<store>"
    if _NO_SUCH_BUCKET in str(err):
        # S3 answers 404 for an object of a bucket that does not exist too: that is not a
        # missing object (a missing database, a missing boundary), and a LIST never finds a
        # prefix missing (issue 40 adversarial review: a deleted bucket made the fleet scan raise)
        return StoreError(
            f"{op} {where}: the bucket does not exist (S3 NoSuchBucket): check the bucket in the "
            "store URL, or create it",
            path=path,
            kind=ErrorKind.INVALID,
        )
    if isinstance(err, FileNotFoundError | obx.NotFoundError):
        return ObjectNotFound(where)
    if isinstance(err, obx.AlreadyExistsError):
        return ObjectAlreadyExists(where)
    if isinstance(err, obx.PreconditionError):
        return PreconditionFailed(where)
    if isinstance(err, obx.NotSupportedError | NotImplementedError):
        return UnsupportedOperation(f"{op} not supported by this store ({where}): {_short(err)}")
    if isinstance(err, obx.InvalidPathError):
        return InvalidArgument(f"invalid object path {where!r}: {_short(err)}")
    if isinstance(err, obx.PermissionDeniedError | obx.UnauthenticatedError):
        return StoreError(f"{op} {where}: access denied: {_short(err)}", path=path, retryable=False)
    if isinstance(err, obx.UnknownConfigurationKeyError):
        return InvalidArgument(f"object store configuration: {_short(err)}")
    if _IMDS_HOSTS.search(str(err)):
        # obstore found no keys and fell back to the EC2 metadata endpoint, which failed:
        # say what to set (issue 40, item 6). Only the endpoint's refusal is final; a timeout,
        # a throttle or a 5xx may pass on a machine with an instance role: retryable
        if _IMDS_REFUSED.search(str(err)):
            return S3CredentialsMissing(f"{op} {where}", path)
        return S3CredentialsMissing(f"{op} {where}", path, cause=_short(err))
    return StoreError(f"{op} {where} failed: {_short(err)}", path=path)


_NO_SUCH_BUCKET = "<Code>NoSuchBucket</Code>"
"""S3's error code for a bucket that does not exist, in the body obstore quotes."""


_IMDS_HOSTS = re.compile(r"https?://(169\.254\.169\.254|\[fd00:ec2::254\])[:/]")
"""The EC2 instance-metadata endpoint (IPv4, IPv6): obstore asks it for credentials only when
none were configured, so a request error that names it is a missing-credentials error."""


_IMDS_REFUSED = re.compile(r"status code: 4(?!08|29)\d\d\b")
"""The metadata endpoint answered with a refusal (4xx, not a timeout 408 or a throttle 429)."""


def check_store(store: object) -> ObjectStore:
    """``store`` if it is an :class:`ObjectStore`; else InvalidArgument (a URL string passed where
    a store is expected used to fail later as a raw AttributeError, RELIABILITY.md, review finding 14)."""
    if not isinstance(store, ObjectStore):
        raise InvalidArgument(
            f"store must be an ObjectStore (see slatedb_core.open_store), got "
            f"{type(store).__name__}"
        )
    return store


def _short(err: BaseException) -> str:
    text = str(err).split("\n\nDebug source:", 1)[0]
    return text.strip().splitlines()[0] if text.strip() else type(err).__name__


STREAM_PART_BYTES = 8 << 20
"""The part size of :meth:`ObstoreObjectStore.create_streamed`'s multipart uploads (S3's minimum
part is 5 MiB)."""


class _Counted:
    """The chunks of a streamed create, passed through as they are taken: counts their bytes, and
    remembers an exception the chunks themselves raised (told apart from the store's)."""

    def __init__(self, chunks: Iterable[Buffer]) -> None:
        self._it = iter(chunks)
        self.bytes = 0
        self.raised: BaseException | None = None

    def __iter__(self) -> Iterator[Buffer]:
        return self

    def __next__(self) -> Buffer:
        try:
            chunk = next(self._it)
        except StopIteration:
            raise
        except BaseException as e:
            self.raised = e
            raise
        self.bytes += memoryview(chunk).nbytes
        return chunk


class ObstoreObjectStore(ObjectStore):
    """Adapter over an obstore store (memory, local filesystem, S3)."""

    def __init__(
        self,
        inner: Any,
        *,
        url: str,
        sorted_listing: bool,
        local_cas: LocalCas | None = None,
        local_root: os.PathLike[str] | str | None = None,
    ) -> None:
        self._inner = inner
        self.url = url
        self.counters = RequestCounters()
        register_store_counters(self, self.counters)
        self._sorted_listing = sorted_listing
        # On LocalStore, obstore has no PutMode::Update; local_cas provides a cross-process one,
        # and does every write of a local store (local_cas.files: synced, see local_fs).
        self._local_cas = local_cas
        # the directory a LocalStore keeps its objects in (None: not a local filesystem)
        self._local_root = None if local_root is None else os.fspath(local_root)
        # every operation of a local store: keys resolved beneath the root, no link followed
        self._dirs: LocalRoot | None = None if local_cas is None else local_cas.files.dirs
        # obstore's MemoryStore keeps the buffer it is given, without a copy: a caller reusing a
        # bytearray (the bulk encoders' scratch) would rewrite an object already acknowledged.
        # Local files and S3 uploads copy the bytes out before the put returns.
        self._keeps_buffers = isinstance(inner, MemoryStore)

    @property
    def inner(self) -> Any:
        return self._inner

    def __repr__(self) -> str:
        return f"ObstoreObjectStore({self.url!r})"

    def _local_get(
        self, path: str, read: Callable[[LocalRoot], tuple[bytes, ObjectMeta] | None]
    ) -> GetResult | None:
        """A read of a local-filesystem store, through the guard (module doc): counted, with
        our errors."""
        assert self._dirs is not None
        self.counters.incr("get")
        try:
            validate_relative_path(path)
            got = read(self._dirs)
        except Exception as e:
            raise map_error(e, path, "get") from e
        if got is None:
            return None
        self.counters.add_bytes("read", len(got[0]))
        return GetResult(got[0], got[1])

    def get(self, path: str, *, byte_range: tuple[int, int] | None = None) -> GetResult:
        if self._dirs is not None and (byte_range is None or byte_range[1] > byte_range[0] >= 0):
            got = self._local_get(path, lambda d: d.read(path, byte_range))
            assert got is not None
            return got
        self.counters.incr("get")
        try:
            if byte_range is None:
                res = obstore.get(self._inner, path)
                data = res.bytes()
                self.counters.add_bytes("read", len(data))
                return GetResult(bytes(data), _meta(res.meta))
            start, end = byte_range
            if start < 0 or end < start:
                raise InvalidArgument(f"bad byte range {byte_range!r} for {path}")
            if end == start:
                return GetResult(b"", self.head(path))
            res = obstore.get(self._inner, path, options={"range": (start, end)})
            got = GetResult(bytes(res.bytes()), _meta(res.meta))
            self.counters.add_bytes("read", len(got.data))
            return got
        except Exception as e:
            raise map_error(e, path, "get") from e

    def read_range(self, path: str, start: int, end: int) -> bytes:
        dirs = self._dirs
        if dirs is None or not end > start >= 0:
            return self.get(path, byte_range=(start, end)).data
        try:
            data = dirs.read_held(path, start, end)
            if data is None:
                validate_relative_path(path)
                got = dirs.read(path, (start, end))
                assert got is not None  # None only answers an unless_e_tag
                data = got[0]
        except Exception as e:
            self.counters.incr("get")
            raise map_error(e, path, "get") from e
        self.counters.add_get(len(data))
        return data

    def get_suffix(self, path: str, length: int) -> GetResult:
        if self._dirs is not None and length > 0:
            got = self._local_get(path, lambda d: d.read(path, suffix=length))
            assert got is not None
            return got
        self.counters.incr("get")
        if length <= 0:
            raise InvalidArgument(f"bad suffix length {length} for {path}")
        try:
            res = obstore.get(self._inner, path, options={"range": {"suffix": length}})
            got = GetResult(bytes(res.bytes()), _meta(res.meta))
            self.counters.add_bytes("read", len(got.data))
            return got
        except Exception as e:
            raise map_error(e, path, "get") from e

    def get_if_none_match(self, path: str, e_tag: str) -> GetResult | None:
        if self._dirs is not None:
            return self._local_get(path, lambda d: d.read(path, unless_e_tag=e_tag))
        self.counters.incr("get")
        try:
            res = obstore.get(self._inner, path, options={"if_none_match": e_tag})
            got = GetResult(bytes(res.bytes()), _meta(res.meta))
            self.counters.add_bytes("read", len(got.data))
            return got
        except obx.NotModifiedError:
            return None
        except Exception as e:
            raise map_error(e, path, "get") from e

    def head(self, path: str) -> ObjectMeta:
        self.counters.incr("head")
        try:
            if self._dirs is not None:
                return object_meta(path, self._dirs.lstat(validate_relative_path(path)))
            return _meta(obstore.head(self._inner, path))
        except Exception as e:
            raise map_error(e, path, "head") from e

    def _put(self, op: str, path: str, data: bytes, mode: Any) -> ObjectVersion:
        self.counters.incr(op)
        if self._keeps_buffers and type(data) is not bytes:
            data = bytes(data)  # bytes are immutable: only other buffers need the copy
        try:
            r = obstore.put(self._inner, path, data, mode=mode, use_multipart=False)
            return ObjectVersion(r.get("e_tag"), r.get("version"))
        except Exception as e:
            raise map_error(e, path, op) from e

    def _local(self, op: str, path: str, write: Callable[[LocalCas], T]) -> T:
        """A write of a local-filesystem store: ``write(local_cas)``, which reaches the disk
        through :class:`~slatedb_core.store.local_fs.LocalFiles` (synced unless the store was
        opened with ``sync=false``), counted and with our errors."""
        assert self._local_cas is not None
        self.counters.incr(op)
        try:
            return write(self._local_cas)
        except Exception as e:
            raise map_error(e, path, op) from e

    def put(self, path: str, data: bytes) -> ObjectVersion:
        self.counters.add_bytes("written", len(data))
        if self._local_cas is not None:
            return self._local("put", path, lambda cas: cas.put_overwrite(path, data))
        return self._put("put", path, data, "overwrite")

    def put_if_absent(self, path: str, data: bytes) -> ObjectVersion:
        self.counters.add_bytes("written", len(data))
        if self._local_cas is not None:
            return self._local("put_if_absent", path, lambda cas: cas.files.create(path, data))
        return self._put("put_if_absent", path, data, "create")

    def create_streamed(self, path: str, chunks: Iterable[Buffer]) -> None:
        """:meth:`ObjectStore.create_streamed`, streaming where the store can. Counted as one
        ``put_if_absent``.

        * local filesystem: the chunks are written to the staged file one by one as they come,
          then the file is synced and linked into place if absent, and the directory synced
          (:meth:`~slatedb_core.store.local_fs.LocalFiles.create_streamed`): the durability of
          :meth:`put_if_absent` (acknowledged means on the device);
        * S3 and memory: joined, one conditional PUT (:meth:`ObjectStore.create_streamed`).
          obstore's multipart upload pulls the chunks inside its own runtime, and a chunk
          encoded while the sources are read through this store (a compaction's output) then
          calls obstore from inside that runtime: the process panics ("Cannot start a runtime
          from within a runtime"; tests/store/test_create_streamed.py). A streamed S3 create
          needs the parts driven from Python (one request per part), not yet done."""
        if self._local_cas is not None:
            files = self._local_cas.files
            counted = _Counted(chunks)
            self.counters.incr("put_if_absent")
            try:
                files.create_streamed(path, counted)
            except Exception as e:
                if counted.raised is e:
                    raise  # the caller's own error (an encoder's), not the store's
                raise map_error(e, path, "put_if_absent") from e
            finally:
                self.counters.add_bytes("written", counted.bytes)
            return
        super().create_streamed(path, chunks)

    def put_if_match(self, path: str, data: bytes, expected: ObjectVersion) -> ObjectVersion:
        if expected.e_tag is None and expected.version is None:
            raise InvalidArgument("put_if_match needs an e-tag or a version to compare against")
        self.counters.add_bytes("written", len(data))
        if self._local_cas is not None:
            return self._local(
                "put_if_match", path, lambda cas: cas.put_if_match(path, data, expected)
            )
        mode: dict[str, str] = {}
        if expected.e_tag is not None:
            mode["e_tag"] = expected.e_tag
        if expected.version is not None:
            mode["version"] = expected.version
        try:
            return self._put("put_if_match", path, data, mode)
        except ObjectNotFound as e:  # some servers answer 404 for If-Match on a missing key
            raise PreconditionFailed(path) from e

    def copy_if_absent(self, src: str, dst: str) -> None:
        """``obstore.copy(..., overwrite=False)``: a hard link on LocalStore (so ``src`` and
        ``dst`` share one inode, and LocalStore's inode-derived e-tag), a native copy-if-absent on
        MemoryStore, and on S3 (configured with ``copy_if_not_exists = multipart`` by
        :func:`~slatedb_core.store.url.open_store`) a multipart upload made of one server-side
        ``UploadPartCopy`` of ``src``, completed with ``If-None-Match: *`` (S3 has no conditional
        ``CopyObject``; single-part copies are limited to 5 GiB objects).

        A store whose obstore backend has no conditional copy (``NotSupported``, e.g. an S3Store
        built without ``copy_if_not_exists``) falls back to GET ``src`` + :meth:`put_if_absent`
        ``dst``: the bytes pass through this process, but the create stays atomic. A head of
        ``dst`` followed by an unconditional copy is not used, because a racing create between the
        two would be silently overwritten. The fallback's requests are counted as a ``get`` and a
        ``put_if_absent`` on top of the ``copy``.

        Like ``put_if_absent``, a retried request whose first attempt landed answers
        ObjectAlreadyExists; callers that copy to a fresh name treat that as their own copy (see
        :meth:`slatedb_core.writer.db.Db.ingest_ssts`)."""
        if self._local_cas is not None:
            self._local("copy", dst, lambda cas: cas.files.link(src, dst))
            return
        self.counters.incr("copy")
        try:
            obstore.copy(self._inner, src, dst, overwrite=False)
            return
        except (obx.NotSupportedError, NotImplementedError):
            pass  # no conditional copy on this backend: fall back below
        except (FileNotFoundError, obx.NotFoundError) as e:
            raise map_error(e, src, "copy") from e  # the missing object is the source
        except Exception as e:
            raise map_error(e, dst, "copy") from e
        data = self.get(src).data
        self.put_if_absent(dst, data)

    def flush_and_evict(self, paths: Sequence[str]) -> None:
        """On a local filesystem: ``fdatasync`` each object's file, then
        ``posix_fadvise(DONTNEED)`` its pages (clean now, so the kernel frees them at once).

        Why: a bulk writer (a Spark ingest task stages hundreds of MB of SSTs) otherwise leaves
        every byte it wrote in the page cache, where it crowds out data that is read, and grows
        the cache by fresh pages on every write. On virtual machines that back guest memory
        lazily, a fresh page costs a host allocation on first touch: writing 18 MB files took
        0.9 s of CPU per 432 MB into fresh page cache here, and 0.1 s when each file was flushed
        and evicted before the next was written, because the next write reuses the freed pages
        (plus 0.17 s of waiting for the device, at 2.5 GB/s). RocksDB's
        ``use_direct_io_for_flush_and_compaction`` serves the same purpose.

        The data is on the device when this returns. With the store's default ``sync=true``
        the objects were synced, names included, when they were written
        (:mod:`slatedb_core.store.local_fs`), and this only evicts them.
        """
        if self._dirs is None:
            return
        for path in paths:  # not counted: no request reaches a store
            try:
                fd, _st = self._dirs.open_file(validate_relative_path(path))
            except SlateDBError:
                raise
            except OSError as e:
                raise StoreError(f"flush {path}: {e}", path=path) from e
            try:
                _datasync(fd)
                if _fadvise is not None:  # not on macOS: the data is synced, the cache kept
                    _fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            except OSError as e:
                raise StoreError(f"flush {path}: {e}", path=path) from e
            finally:
                os.close(fd)

    def sweep_staged(self, prefix: str, *, older_than_s: float, now_s: float) -> tuple[int, int]:
        if self._local_cas is None:
            return 0, 0
        try:
            validate_relative_path(prefix.rstrip("/"), what="sweep prefix", allow_empty=True)
            self.counters.incr("list")
            return self._local_cas.files.sweep_staged(
                prefix.rstrip("/"), older_than_s=older_than_s, now_s=now_s
            )
        except Exception as e:
            raise map_error(e, prefix, "sweep staged") from e

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectMeta]:
        self.counters.incr("list")
        norm = prefix.rstrip("/")
        if self._dirs is not None:
            try:
                validate_relative_path(norm, what="list prefix", allow_empty=True)
                local = [object_meta(k, st) for k, st in self._dirs.walk(norm)]
            except Exception as e:
                raise map_error(e, prefix, "list") from e
            local.sort(key=lambda m: m.path)
            return iter([m for m in local if start_after is None or m.path > start_after])
        try:
            stream = obstore.list(self._inner, norm or None, offset=start_after, chunk_size=1000)
            if self._sorted_listing:
                return self._stream(stream, start_after)
            # LocalStore walks the directory in inode order; sort so every store agrees.
            items = [_meta(m) for batch in stream for m in batch]
        except Exception as e:
            raise map_error(e, prefix, "list") from e
        items.sort(key=lambda m: m.path)
        if start_after is not None:
            items = [m for m in items if m.path > start_after]
        return iter(items)

    def _stream(self, stream: Any, start_after: str | None) -> Iterator[ObjectMeta]:
        first = True
        try:
            for batch in stream:
                if not first:
                    self.counters.incr("list")  # each further page is another request
                first = False
                for m in batch:
                    if start_after is None or m["path"] > start_after:
                        yield _meta(m)
        except Exception as e:
            raise map_error(e, None, "list") from e

    def delete(self, path: str) -> None:
        if self._local_cas is not None:
            with contextlib.suppress(ObjectNotFound):
                self._local("delete", path, lambda cas: cas.delete(path))
            return
        self.counters.incr("delete")
        try:
            obstore.delete(self._inner, path)
        except (FileNotFoundError, obx.NotFoundError):
            return
        except Exception as e:
            raise map_error(e, path, "delete") from e
