"""The one error tree of slatedb_core.

Every error the library raises on purpose derives from :class:`SlateDBError`, so callers can catch
"anything from the store layer" with one clause and still branch on the precise cause. Object-store
failures are mapped into this tree at the store boundary (``slatedb_core.store.objectstore``); no
obstore exception type leaks past it.
"""

from __future__ import annotations

import enum


class ErrorKind(enum.Enum):
    """What the caller of a failed call should do: every error carries one as ``err.kind``.

    Branch on the kind, not on lists of classes: a new error class of a kind is handled where
    that kind is. Modelled on SlateDB's public ``ErrorKind`` (SlateDB RFC 0007), named by the
    caller's next step; docs/contributing.md, "How an error is chosen", says when to use each.
    """

    def __new__(cls, value: str, doc: str) -> ErrorKind:
        member = object.__new__(cls)
        member._value_ = value
        member.__doc__ = doc
        return member

    TRANSIENT = (
        "transient",
        "Retry the same call later: a store, a network or a contended object failed for now, "
        "and nothing the caller passed is wrong. The only kind :func:`is_retryable` accepts.",
    )
    CONFLICT = (
        "conflict",
        "Another actor changed what the call was built on (a lost create or compare-and-set "
        "race): read the latest state and redo the change on it, or drop the change.",
    )
    CLOSED = (
        "closed",
        "This handle (writer, reader, compactor, store) can serve no more calls: it was closed, "
        "fenced by a newer holder, or failed, or its view is gone. Open a new one to go on.",
    )
    INVALID = (
        "invalid",
        "The call cannot work as made: fix the argument, option, configuration, path or code it "
        "names. Nothing was changed, and the same call fails the same way again.",
    )
    DATA = (
        "data",
        "Stored objects are damaged, missing or no longer say what the call needs: stop, and "
        "let a person repair or restore them (the message names them). Retrying sees the same.",
    )
    INTERNAL = (
        "internal",
        "An invariant the protocol guarantees is broken (a bug, or a tool bypassing the "
        "protocol): stop the actors of the database and investigate.",
    )


class SlateDBError(Exception):
    """Base class of every error raised by slatedb_core. Catch it to handle "anything from the
    store" in one clause; branch on ``err.kind`` (:class:`ErrorKind`) for what to do."""

    kind: ErrorKind = ErrorKind.INTERNAL
    """What the caller should do; each class sets it, an instance may narrow it."""


class InvalidArgument(SlateDBError, ValueError):
    """A caller passed something unusable: a bad URL, path, key, option or CLI argument.

    Nothing was changed. Fix the argument the message names; retrying as is fails again."""

    kind = ErrorKind.INVALID


class ObjectNotFound(SlateDBError, FileNotFoundError):
    """The named object does not exist in the object store. Check the path (or the id) asked for;
    nothing was changed."""

    kind = ErrorKind.INVALID

    def __init__(self, path: str, message: str | None = None) -> None:
        super().__init__(message or f"object not found: {path}")
        self.path = path


class ObjectAlreadyExists(SlateDBError):
    """A create-if-absent put found an object already at the path: somebody else created it first.
    Read what is there before deciding; the engine's own callers treat it as a lost race."""

    kind = ErrorKind.CONFLICT

    def __init__(self, path: str) -> None:
        super().__init__(f"object already exists: {path}")
        self.path = path


class PreconditionFailed(SlateDBError):
    """A conditional update's expected version no longer matches the stored object. Read the
    object again and redo the update on what is there."""

    kind = ErrorKind.CONFLICT

    def __init__(self, path: str) -> None:
        super().__init__(f"precondition failed (object changed or missing): {path}")
        self.path = path


class UnsupportedOperation(SlateDBError):
    """The object store cannot do what was asked (e.g. a conditional write it does not implement).
    Use a store that can, or the two-phase CAS wrapper (docs/two-phase-cas.md)."""

    kind = ErrorKind.INVALID


class UnsupportedFeature(SlateDBError):
    """The database uses a SlateDB feature this engine does not implement (docs/format.md, "What
    each engine ignores of the other's"), such as segmented manifests (SlateDB RFC 0024), or one
    this operation needs configured (:class:`MergeOperatorMissing`: merge operands read without
    a merge operator). Nothing was changed; the message says what to do."""

    kind = ErrorKind.INVALID

    def __init__(self, feature: str, detail: str) -> None:
        super().__init__(f"unsupported SlateDB feature: {feature}: {detail}")
        self.feature = feature


class MergeOperatorMissing(UnsupportedFeature):
    """A read or rewrite met a merge operand (SlateDB RFC 0006) of ``key`` and the database was
    opened without a merge operator. Only reads of that key fail; nothing was changed. Open the
    database with the operator its writers use (``DbOptions.merge_operator`` or
    ``DbReaderOptions.merge_operator``: a callable or a built-in name such as ``"add_int64"``)."""

    def __init__(self, key: bytes, detail: str = "") -> None:
        super().__init__(
            "merge operands",
            f"key {key!r} holds a merge operand and no merge operator was given; open the "
            "database with merge_operator= set to the operator its writers use" + detail,
        )
        self.key = key


class MergeOperatorFailed(SlateDBError):
    """The merge operator raised while folding the operands of ``key`` (SlateDB RFC 0006: the
    operator is the application's code). Nothing was changed; fix the operator or the operand."""

    kind = ErrorKind.INVALID

    def __init__(self, key: bytes, cause: BaseException) -> None:
        super().__init__(
            f"the merge operator failed on key {key!r}: {type(cause).__name__}: {cause}"
        )
        self.key = key


class ManifestV1Unrepresentable(UnsupportedFeature):
    """A ManifestV1 object (the layout SlateDB wrote before 0.17, still read by both engines;
    docs/format.md, "ManifestV1") carries a field this engine's manifest model has no place
    for, so reading it on would silently lose it: ``field`` names it, ``name`` the object.
    No field raises it today (``wal_object_store_uri``, SlateDB's mark of a separate WAL object
    store, is kept in our slot 11: docs/format.md, "ManifestV1"); it stays for a field a future
    SlateDB adds. Nothing was changed; open the database with SlateDB's own engine, whose next
    commit rewrites the manifest as ManifestV2."""

    def __init__(self, name: str, field: str, detail: str) -> None:
        super().__init__(f"ManifestV1 field {field}", f"{name}: {detail}")
        self.name = name
        self.field = field


class StoreError(SlateDBError, OSError):
    """An object-store request failed for a reason outside our control (I/O, network, server).

    Retry when ``retryable`` is set (``kind`` is :attr:`ErrorKind.TRANSIENT`); a request the
    store refused for good (access denied) has another kind, which says what to do instead. The
    outcome of a write that raised this may be unknown: it may or may not have taken effect, so
    a retry must be idempotent (every engine write is: it settles an ambiguous outcome before
    reporting one).
    """

    kind = ErrorKind.TRANSIENT

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        retryable: bool = True,
        kind: ErrorKind | None = None,
    ) -> None:
        super().__init__(message)
        self.path = path
        if kind is not None:
            self.kind = kind
        elif not retryable:
            self.kind = ErrorKind.INVALID  # refused for good: credentials, permissions, a URL

    @property
    def retryable(self) -> bool:
        """Whether repeating the request may succeed: ``kind`` is :attr:`ErrorKind.TRANSIENT`."""
        return self.kind is ErrorKind.TRANSIENT


class S3CredentialsMissing(StoreError):
    """An S3 request found no credentials: no access key in the URL or the environment, so the
    client fell back to the EC2 instance-metadata endpoint, which refused or is not there (not
    on EC2, or no instance role). Nothing was read or written. Give the keys: set
    ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` (and ``AWS_SESSION_TOKEN`` for
    temporary keys), or add ``access_key_id=...&secret_access_key=...`` to the ``s3://`` URL
    (slatedb_core/store/url.py), or run where an instance role is attached.

    Not retryable when the endpoint answered with a refusal (a 4xx other than 408 or 429: no
    role here). Retryable otherwise (``cause`` then says what happened: a timeout, a throttle,
    a 5xx): on EC2 with an instance role, a passing failure of the endpoint must not stop a
    writer's retries."""

    def __init__(self, what: str, path: str | None, cause: str | None = None) -> None:
        if cause is None:
            why = "the instance-metadata endpoint refused the request"
        else:
            why = f"fetching credentials from the instance-metadata endpoint failed: {cause}"
        super().__init__(
            f"{what}: no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and "
            "AWS_SESSION_TOKEN for temporary keys), or add access_key_id=...&"
            "secret_access_key=... to the s3:// URL, or run where an instance role is attached "
            f"({why})",
            path=path,
            retryable=cause is not None,
        )


class LinkInStore(StoreError):
    """A key of a ``file://`` store resolves through a symbolic link below the store's root (a
    directory on its path, or the key itself, is a link), or names something that is not a
    regular file (a pipe, a device). A local store never follows such a link, so nothing outside
    its directory is read, written, listed or deleted (SECURITY.md); nothing was changed. SlateDB
    and this library never create links in a store: someone planted it. Remove the link (``find
    <store dir> -type l`` lists them) after checking what it pointed at; to keep part of a lake
    elsewhere, mount that directory there instead of linking it. Not retryable."""

    kind = ErrorKind.DATA

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(
            f"{path}: {detail}; a file:// store never follows a link below its root: remove the "
            "link (find <store dir> -type l lists them), or mount the directory instead",
            path=path,
            kind=ErrorKind.DATA,
        )


class InjectedFault(StoreError):
    """A failure injected by ``slatedb_core.testing`` (tests and simulation only)."""

    def __init__(self, message: str, *, path: str | None = None, took_effect: bool = False) -> None:
        super().__init__(message, path=path, retryable=True)
        self.took_effect = took_effect


class VersionExists(SlateDBError):
    """Another actor created this sequenced object's id first (a lost create-if-absent race on a
    manifest, ``.compactions`` or shard map: docs/manifest-and-fencing.md).

    The update loop (``slatedb_core.meta.versioned``) catches it and retries on the newer version;
    a caller sees it only from a single create. Read the latest version and redo the change on it.
    ``existing`` holds the winner's bytes when they were read while resolving the conflict.
    """

    kind = ErrorKind.CONFLICT

    def __init__(self, path: str, object_id: int, existing: bytes | None = None) -> None:
        super().__init__(f"sequenced object {object_id} already exists: {path}")
        self.path = path
        self.object_id = object_id
        self.existing = existing


class ManifestVersionExists(VersionExists):
    """Another writer committed this manifest id first. Read the latest manifest and redo the
    change on it (``ManifestStore.update`` does so itself)."""


class ObjectVersionBehindBoundary(SlateDBError):
    """A sequenced object was created at an id the garbage collector has declared dead.

    The create itself succeeded, but only because GC had already deleted the earlier object with the
    same id: the write is stale and must never be reported as committed (RFC 0004, GC boundary
    files; docs/gc-and-boundaries.md). Read the latest version and redo the change on it.
    """

    kind = ErrorKind.CONFLICT

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
    continuing could let a stale writer succeed, so it is a hard error. Stop and investigate the
    store; restore the boundary files from ``gc/`` before any actor runs again.
    """

    kind = ErrorKind.DATA


class Fenced(SlateDBError):
    """A newer writer or compactor has taken over; this holder must stop.

    Writes not acknowledged before this error are not durable. Reopen (``Db.open``) to become the
    writer again, which fences the other one in turn, or leave the database to the newer holder.
    """

    kind = ErrorKind.CLOSED

    def __init__(self, role: str, our_epoch: int, current_epoch: int) -> None:
        super().__init__(
            f"{role} fenced: our epoch {our_epoch} is older than the current epoch {current_epoch}"
        )
        self.role = role
        self.our_epoch = our_epoch
        self.current_epoch = current_epoch


class CorruptionError(SlateDBError):
    """Stored bytes failed validation (bad magic, version, checksum, length or structure).

    Stop and repair: retrying reads the same damaged bytes. Restore the object named here from a
    copy, or restore the database from a checkpoint or clone. Nothing was written over it."""

    kind = ErrorKind.DATA

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"corrupt object {name}: {reason}")
        self.name = name
        self.reason = reason


class CommitRetriesExhausted(SlateDBError):
    """A conditional metadata update kept losing races and gave up; nothing was committed.
    Retry later, or reduce the number of actors updating the same object at once."""

    kind = ErrorKind.TRANSIENT

    def __init__(self, what: str, attempts: int) -> None:
        super().__init__(f"{what}: gave up after {attempts} conflicting attempts")
        self.attempts = attempts


class CheckpointNotFound(SlateDBError, KeyError):
    """No checkpoint with the given id exists (or it has expired). List the checkpoints
    (``slatedb list-checkpoints``) and use one that exists, or create a new one."""

    kind = ErrorKind.INVALID

    def __init__(self, checkpoint_id: object, message: str | None = None) -> None:
        super().__init__(message or f"checkpoint not found: {checkpoint_id}")
        self.checkpoint_id = checkpoint_id

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0])


class InvalidDeletion(SlateDBError):
    """A deletion was refused because it would break an invariant (latest object, live
    checkpoint). Nothing was deleted; remove what the message names first."""

    kind = ErrorKind.INVALID


class DatabaseDestroyed(SlateDBError):
    """The database has been destroyed: its manifest has ``destroyed_at_s`` set, or its objects
    are gone and its path keeps the tombstone boundaries (docs/clones-and-destroy.md)."""

    kind = ErrorKind.INVALID


class DatabaseNotFound(SlateDBError):
    """No manifest exists at the database path. Check the path, or create the database by
    opening a writer there."""

    kind = ErrorKind.INVALID


class DatabaseDeleted(DatabaseDestroyed, DatabaseNotFound):
    """The database was destroyed and its objects are gone: the path holds only the tombstone
    boundaries (docs/clones-and-destroy.md). Both a :class:`DatabaseDestroyed` (nothing may be
    created there again) and a :class:`DatabaseNotFound` (there is no database to read)."""


class NotADatabase(DatabaseNotFound):
    """The path holds a sharded table (a shard map under ``<path>/shardmap/``), not a database,
    and was opened as one (``Db.open``, ``DbReader.open``, a ``slatedb`` database command).
    Nothing was created or changed. Open it with ``Table.open`` (CLI: ``slatedb --path PATH
    table ...``), or open one of its shards' databases (``slatedb table show`` lists them)."""

    def __init__(self, path: str, store_url: str) -> None:
        super().__init__(
            f"{path!r} in {store_url} is a table (it has a shard map), not a database: open it "
            f"with Table.open (CLI: slatedb --path {path} table ...), or one of its shards' "
            "databases (slatedb table show lists them)"
        )
        self.path = path


class NotATable(DatabaseNotFound):
    """The path holds a plain database (manifests under ``<path>/manifest/``), not a sharded
    table, and was opened or created as one (``Table.open``, ``Table.create``, ``slatedb
    table ...``, the Spark ingest). Nothing was created or changed. Open it with ``Db.open`` /
    ``DbReader.open`` (CLI: ``slatedb get`` / ``scan`` without ``table``), or choose another
    path for the table."""

    def __init__(self, path: str, store_url: str) -> None:
        super().__init__(
            f"{path!r} in {store_url} is a database (it has manifests), not a table: open it "
            f"with Db.open or DbReader.open (CLI: slatedb --path {path} get/scan, without "
            "'table'), or choose another path for the table"
        )
        self.path = path


class TableNotFound(DatabaseNotFound):
    """No table (shard map) at the path a job writes into. Nothing was changed. Create it
    first (the Spark ingest's ``--create SPLITS``, ``Table.create``, ``slatedb table create``),
    or fix the path or the store URL."""


class TableAlreadyExists(ObjectAlreadyExists):
    """``Table.create`` (the ingest's ``--create``) found a table at the path already. Nothing
    was changed. Write into it as it is (ingest without ``--create``, ``Table.open``), or
    choose another path; ``Table.open_or_create`` opens an existing table instead."""

    kind = ErrorKind.INVALID

    def __init__(self, path: str, store_url: str, object_path: str) -> None:
        SlateDBError.__init__(
            self,
            f"a table already exists at {path!r} in {store_url}: write into it as it is "
            "(Spark ingest without --create; API: Table.open or Table.open_or_create), or "
            "choose another path",
        )
        self.path = object_path
        self.table_path = path


class DatabaseNotInitialized(SlateDBError):
    """The database's manifest says ``initialized=False`` (e.g. an unfinished clone). Finish it
    by running the same clone or union again, or destroy it."""

    kind = ErrorKind.DATA


class ShardMapConflict(SlateDBError):
    """A sharded table's shard map changed under a caller: a split or merge lost the race to
    another change of the same shards, or a writer was asked for a shard that is no longer in
    the latest map or is being split or merged (re-read the map and re-route)."""

    kind = ErrorKind.CONFLICT


class MergeBlockedByBatch(ShardMapConflict):
    """A merge of two shards was refused (nothing changed, both shards writable again) because
    their exactly-once records differ: a batch (app id, version) reached one shard and not the
    other (its job failed between the shards' commits). One record per app for the merged range
    could not say which half had it (docs/format.md, "What is ours, and where it goes"). Write
    that batch again with the same app id and version (or the app's next batch), so every shard
    records it, then merge."""

    kind = ErrorKind.INVALID


class TableCreateIncomplete(DatabaseNotFound):
    """``Table.open_or_create`` lost the create to another create (of other split points)
    that made shard databases but did not commit the table's shard map within the wait: there
    is no table yet. If that create is still running, try again later; if it crashed, run it
    again (the same split points adopt the databases it made), then this open or write."""

    kind = ErrorKind.TRANSIENT


class IngestJobExpired(SlateDBError):
    """An ingest job's plan record is gone: the table GC collected the job's leftovers
    (``Table.collect_garbage``, older than ``ingest_min_age``), its done markers with them, so
    nothing can tell any more which shards the job committed. Its commits are refused, so that
    none applies twice: the refused shard wrote nothing, but other shards of the job may have
    committed before. A job without an app id and batch version cannot be completed exactly
    once any more: planning it again (a new job id) writes those shards again. Write batches
    that must apply once with an app id and batch version, whose records live in the shards and
    make a re-run write only the missing shards; and keep ``ingest_min_age`` above the longest
    job."""

    kind = ErrorKind.DATA


class OverwriteTooOld(SlateDBError):
    """A retried ``commit_overwrite`` (or ``abort_overwrite``) of an overwrite whose outcome the
    shard map no longer records: the map keeps the last ``OVERWRITES_KEPT`` overwrite outcomes
    (docs/overwrite.md, "Retries"), this one was pushed out (or predates the record), and its
    targets are gone from the map, so nothing can tell whether it committed. Nothing was
    changed. Do not plan it again blindly: that would apply it a second time over every write
    since. Read the table and decide; retry overwrites long before that many others commit."""

    kind = ErrorKind.DATA


class CloneConflict(SlateDBError):
    """The destination already holds a database that is not this clone (or union). Choose
    another destination, or destroy what is there first."""

    kind = ErrorKind.INVALID


class CloneIncomplete(SlateDBError):
    """A clone or union cannot be completed or validated as it stands (a final checkpoint or a
    WAL SST it needs is gone)."""

    kind = ErrorKind.DATA


class SourceCheckpointLost(CheckpointNotFound):
    """The source checkpoint is missing or expired. Subclasses CheckpointNotFound so callers that
    already handle that keep working; the message says how to recover."""

    kind = ErrorKind.DATA


def is_retryable(err: BaseException) -> bool:
    """True for errors where repeating the same request may succeed: a :class:`SlateDBError` of
    kind :attr:`ErrorKind.TRANSIENT` (the kind decides; no class list)."""
    return isinstance(err, SlateDBError) and err.kind is ErrorKind.TRANSIENT


class WalSstMissing(CorruptionError):
    """WAL SSTs that must exist are gone (docs/manifest-and-fencing.md, parallel writes): a hole
    in the WAL below the in-flight window of its last writer, or below an SST the manifest records as written.
    Opening past it would drop the acknowledged writes in it (and replay later ones on top of
    older values), so the writer (and recovery) stop: restore the objects named here."""

    def __init__(self, name: str, holes: tuple[tuple[int, int], ...], reason: str) -> None:
        super().__init__(name, reason)
        self.holes = holes  # (first, last) WAL id ranges, ascending

    @property
    def wal_ids(self) -> list[int]:
        """Every missing WAL id."""
        return [i for lo, hi in self.holes for i in range(lo, hi + 1)]


class WalStoreMissing(SlateDBError):
    """The database's WAL objects are not in the store we read its WAL from: the manifest (or
    the fence every writer leaves, SlateDB RFC 0001) says WAL SSTs exist past the replay point,
    and none is there. The usual cause is a database written with a separate WAL object store
    (SlateDB's ``with_wal_object_store``, SlateDB RFC 0009) opened without it: reading on would
    serve stale values and a write would go where SlateDB never looks. Open it with the WAL
    store URL it was written with (``--wal-url`` / ``DbOptions.wal_url``); nothing was written."""

    kind = ErrorKind.INVALID

    def __init__(self, db_path: str, where: str, detail: str) -> None:
        super().__init__(
            f"{db_path!r}: no WAL SSTs in {where} although {detail}; open it with the WAL store "
            "URL it was written with (--wal-url / DbOptions.wal_url)"
        )
        self.db_path = db_path


class BackgroundThreadDied(SlateDBError):
    """A background thread of a writer (WAL flusher, memtable flusher, manifest poller, a WAL
    create of the parallel window) stopped on an unexpected error. The writer is failed with
    this error: every waiter (durable puts, ``flush()``, ``close()``) and every later call
    raises it; the original error is its ``__cause__``."""

    kind = ErrorKind.CLOSED

    def __init__(self, thread: str, error: BaseException) -> None:
        super().__init__(f"background thread {thread} died: {type(error).__name__}: {error}")
        self.thread = thread
        self.error = error


class DbClosed(SlateDBError):
    """The Db was closed (or failed and was closed); open it again to use it. Writes acknowledged
    before the close are durable; others may not be."""

    kind = ErrorKind.CLOSED


class ReaderClosed(DbClosed):
    """The DbReader was closed; open a new one to read."""


class SstMissing(SlateDBError):
    """An SST or WAL SST that a reader's or writer's state references is gone from the object
    store.

    GC removed it (its checkpoint expired or was deleted, or an unpinned reader fell behind a
    compaction). Answering from what is left could return an older value or miss a key, so the
    read fails instead. Reopen the reader (on a newer checkpoint, or with a pinning reader mode).
    A writer (``Db``) reloads its manifest first and retries a get; a scan raises this after the
    reload, and the same scan started again reads the new state. When the latest manifest still
    names the SST, it was lost, not collected: restore it from a backup.
    """

    kind = ErrorKind.CLOSED

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(f"SST missing under a read: {path}: {detail}")
        self.path = path


class CursorInvalid(InvalidArgument):
    """A change-feed cursor (``changes(since=...)``) that is not one: not a string or bytes that
    :meth:`slatedb_core.feed.Cursor.decode` made, damaged, or of a newer encoding. Pass back the
    cursor a batch of ``changes`` returned, unchanged; nothing was read."""


class ChangesCollected(SlateDBError):
    """The changes after a change-feed cursor are gone: the garbage collector deleted the WAL
    SSTs (or the snapshot checkpoint) the cursor resumes from, so resuming would skip changes
    in silence. The consumer fell behind the retention: start again from a snapshot
    (``changes(since=None)``) and register it as a named consumer (``consumer=``), whose
    checkpoint keeps its changes until it has read them (docs/changes.md)."""

    kind = ErrorKind.DATA

    def __init__(self, db_path: str, detail: str) -> None:
        super().__init__(f"{db_path!r}: the changes after this cursor were collected: {detail}")
        self.db_path = db_path


class InputColumnMissing(InvalidArgument):
    """A job's option names a column its input does not have (``--key-column``,
    ``--value-column``, ...). Checked on the driver before Spark starts; nothing was changed.
    Pass one of the columns the message lists."""


class CatalogOptionsMissing(InvalidArgument):
    """``format("slatedb")`` was handed no options at all: what Spark's catalog does for a table
    used by name (``SELECT``, ``spark.table``, ``INSERT INTO``, ``insertInto``, ``CREATE TABLE
    ... AS SELECT``): PySpark 4.3 does not pass a table's OPTIONS to a Python data source, so the
    store and the table are unknown. Nothing was read or written. Read and write with
    ``spark.read``/``df.write`` and ``.option("url", ...)``, ``.option("path", ...)``
    (docs/spark.md)."""


class StoreDirectoryMissing(InvalidArgument):
    """A ``file://`` store URL (or path) names a folder that does not exist where it must
    (a job that only writes into an existing table), or that cannot be created. Nothing was
    changed. Create the folder, or fix the URL's path."""

    def __init__(self, directory: str, detail: str) -> None:
        super().__init__(f"the store folder {directory} {detail}")
        self.directory = directory


class UnionError(InvalidArgument):
    """The inputs of a union cannot be combined (overlap, gaps, uncompacted WAL, ...). Nothing was
    written; fix the inputs the message names (compact or flush them first, or choose ranges that
    tile)."""


class CompactionSourceChanged(SlateDBError):
    """The latest manifest no longer holds a compaction's sources as planned; nothing was committed
    and the outputs are garbage (GC collects them). Expected now and then (another tool edited the
    tree): plan again."""

    kind = ErrorKind.CONFLICT


class CompactionContended(SlateDBError):
    """A compaction pass gave up without committing anything: every compaction it tried, ``attempts``
    in a row, found its sources changed in the manifest before its commit
    (:class:`CompactionSourceChanged`). Something outside the compactor protocol keeps changing the
    L0 views or sorted runs (a compactor or tool that does not take over ``compactor_epoch``, or
    one run by hand). Nothing of the pass is visible and its outputs are garbage for the GC. The
    database still needs compacting: retry later, or stop the other compactor or tool first. The
    last conflict is ``__cause__``."""

    kind = ErrorKind.TRANSIENT

    def __init__(self, db_path: str, attempts: int, last: str) -> None:
        super().__init__(
            f"compaction of {db_path!r} gave up: its sources changed before each of {attempts} "
            f"commits in a row, so nothing was compacted (last: {last}); another compactor or tool "
            "keeps changing the database's L0 views or sorted runs: retry later, or stop the other "
            "compactor or tool first"
        )
        self.db_path = db_path
        self.attempts = attempts


class CompactionCancelled(SlateDBError):
    """The compactor was stopped while the compaction ran; nothing was committed. A compactor
    started again (a new one) redoes it."""

    kind = ErrorKind.CLOSED


class WalEpochConflict(SlateDBError):
    """Two writers hold the same epoch: impossible unless the manifest protocol was bypassed.
    Stop every writer of the database and investigate."""

    kind = ErrorKind.INTERNAL


class WalWindowClosed(SlateDBError):
    """The WAL window was closed (its Db closed or crashed). Reopen the Db."""

    kind = ErrorKind.CLOSED
