"""The one error tree of slatedb_core.

Every error the library raises on purpose derives from :class:`SlateDBError`, so callers can catch
"anything from the store layer" with one clause and still branch on the precise cause. Object-store
failures are mapped into this tree at the store boundary (``slatedb_core.store.objectstore``); no
obstore exception type leaks past it.
"""

from __future__ import annotations


class SlateDBError(Exception):
    """Base class of every error raised by slatedb_core."""


class InvalidArgument(SlateDBError, ValueError):
    """A caller passed something unusable: a bad URL, path, key, option or CLI argument."""


class ObjectNotFound(SlateDBError, FileNotFoundError):
    """The named object does not exist in the object store."""

    def __init__(self, path: str, message: str | None = None) -> None:
        super().__init__(message or f"object not found: {path}")
        self.path = path


class ObjectAlreadyExists(SlateDBError):
    """A create-if-absent put found an object already at the path."""

    def __init__(self, path: str) -> None:
        super().__init__(f"object already exists: {path}")
        self.path = path


class PreconditionFailed(SlateDBError):
    """A conditional update's expected version no longer matches the stored object."""

    def __init__(self, path: str) -> None:
        super().__init__(f"precondition failed (object changed or missing): {path}")
        self.path = path


class UnsupportedOperation(SlateDBError):
    """The object store cannot do what was asked (e.g. a conditional write it does not implement)."""


class StoreError(SlateDBError, OSError):
    """An object-store request failed for a reason outside our control (I/O, network, server).

    The outcome of a write that raised this may be unknown: it may or may not have taken effect.
    """

    def __init__(self, message: str, *, path: str | None = None, retryable: bool = True) -> None:
        super().__init__(message)
        self.path = path
        self.retryable = retryable


class InjectedFault(StoreError):
    """A failure injected by ``slatedb_core.store.faults`` (tests and simulation only)."""

    def __init__(self, message: str, *, path: str | None = None, took_effect: bool = False) -> None:
        super().__init__(message, path=path, retryable=True)
        self.took_effect = took_effect


class ManifestVersionExists(SlateDBError):
    """Another writer committed this sequenced id first (a lost create-if-absent race).

    ``existing`` holds the winner's bytes when they were read while resolving the conflict, so the
    loser can retry on top of them without reading the latest version again.
    """

    def __init__(self, path: str, object_id: int, existing: bytes | None = None) -> None:
        super().__init__(f"sequenced object {object_id} already exists: {path}")
        self.path = path
        self.object_id = object_id
        self.existing = existing


class ObjectVersionBehindBoundary(SlateDBError):
    """A sequenced object was created at an id the garbage collector has declared dead.

    The create itself succeeded, but only because GC had already deleted the earlier object with the
    same id: the write is stale and must never be reported as committed (seed 004).
    """

    def __init__(self, path: str, object_id: int, boundary: int) -> None:
        super().__init__(
            f"sequenced object {object_id} is at or behind the GC boundary {boundary}: {path}"
        )
        self.path = path
        self.object_id = object_id
        self.boundary = boundary


class BoundaryMissing(SlateDBError):
    """A boundary file that this process observed earlier has disappeared.

    GC never deletes boundary files, so this means the store was tampered with or is inconsistent;
    continuing could let a stale writer succeed, so it is a hard error.
    """


class Fenced(SlateDBError):
    """A newer writer or compactor has taken over; this holder must stop."""

    def __init__(self, role: str, our_epoch: int, current_epoch: int) -> None:
        super().__init__(
            f"{role} fenced: our epoch {our_epoch} is older than the current epoch {current_epoch}"
        )
        self.role = role
        self.our_epoch = our_epoch
        self.current_epoch = current_epoch


class CorruptionError(SlateDBError):
    """Stored bytes failed validation (bad magic, version, checksum, length or structure)."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"corrupt object {name}: {reason}")
        self.name = name
        self.reason = reason


class CommitRetriesExhausted(SlateDBError):
    """A conditional metadata update kept losing races and gave up."""

    def __init__(self, what: str, attempts: int) -> None:
        super().__init__(f"{what}: gave up after {attempts} conflicting attempts")
        self.attempts = attempts


class CheckpointNotFound(SlateDBError, KeyError):
    """No checkpoint with the given id exists (or it has expired)."""

    def __init__(self, checkpoint_id: object, message: str | None = None) -> None:
        super().__init__(message or f"checkpoint not found: {checkpoint_id}")
        self.checkpoint_id = checkpoint_id

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0])


class InvalidDeletion(SlateDBError):
    """A deletion was refused because it would break an invariant (latest object, live checkpoint)."""


class DatabaseDestroyed(SlateDBError):
    """The database has been destroyed: its manifest has ``destroyed_at_s`` set, or its objects
    are gone and its path keeps the tombstone boundaries (docs/clones-and-destroy.md)."""


class DatabaseNotFound(SlateDBError):
    """No manifest exists at the database path."""


class DatabaseDeleted(DatabaseDestroyed, DatabaseNotFound):
    """The database was destroyed and its objects are gone: the path holds only the tombstone
    boundaries (docs/clones-and-destroy.md). Both a :class:`DatabaseDestroyed` (nothing may be
    created there again) and a :class:`DatabaseNotFound` (there is no database to read)."""


class DatabaseNotInitialized(SlateDBError):
    """The database's manifest says ``initialized=False`` (e.g. an unfinished clone)."""


class ShardMapConflict(SlateDBError):
    """A sharded table's shard map changed under a caller: a split or merge lost the race to
    another change of the same shards, or a writer was asked for a shard that is no longer in
    the latest map or is being split or merged (re-read the map and re-route)."""


class CloneConflict(SlateDBError):
    """The destination already holds a database that is not this clone (or union)."""


class CloneIncomplete(SlateDBError):
    """A clone or union cannot be completed or validated as it stands (a final checkpoint or a
    WAL SST it needs is gone)."""


class SourceCheckpointLost(CheckpointNotFound):
    """The source checkpoint is missing or expired. Subclasses CheckpointNotFound so callers that
    already handle that keep working; the message says how to recover."""


def is_retryable(err: BaseException) -> bool:
    """True for errors where repeating the same request may succeed."""
    return isinstance(err, StoreError) and err.retryable


class WalSstMissing(CorruptionError):
    """WAL SSTs that must exist are gone (seed 001 "Parallel Writes"): a hole in the WAL below
    the in-flight window of its last writer, or below an SST the manifest records as written.
    Opening past it would drop the acknowledged writes in it (and replay later ones on top of
    older values), so the writer (and recovery) stop: restore the objects named here."""

    def __init__(self, name: str, holes: tuple[tuple[int, int], ...], reason: str) -> None:
        super().__init__(name, reason)
        self.holes = holes  # (first, last) WAL id ranges, ascending

    @property
    def wal_ids(self) -> list[int]:
        """Every missing WAL id."""
        return [i for lo, hi in self.holes for i in range(lo, hi + 1)]


class BackgroundThreadDied(SlateDBError):
    """A background thread of a writer (WAL flusher, memtable flusher, manifest poller, a WAL
    create of the parallel window) stopped on an unexpected error. The writer is failed with
    this error: every waiter (durable puts, ``flush()``, ``close()``) and every later call
    raises it; the original error is its ``__cause__``."""

    def __init__(self, thread: str, error: BaseException) -> None:
        super().__init__(f"background thread {thread} died: {type(error).__name__}: {error}")
        self.thread = thread
        self.error = error
