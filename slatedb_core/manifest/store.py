"""Fenced, retried manifest updates (docs/manifest-and-fencing.md; SlateDB RFC 0001 "Manifest
Updates"; the format is SlateDB 0.17's, docs/format.md "Manifest").

The update loop itself (read the latest, check the fence, apply the change, create id+1, back off
and retry) is :mod:`slatedb_core.meta.versioned`, shared with ``.compactions`` and the shard map;
its picture is drawn there. This module brings what is particular to manifests: the writer's and
compactor's fence (:class:`Fence`, :class:`FencedManifest`), the codec, the parent nonce, and the
settlement of a commit behind the boundary.

**A create behind the boundary is settled, never re-applied blindly.** SlateDB RFC 0026 treats a
create whose id is at or behind the boundary as failed. But the create may have been a real
commit that others built on before GC passed it while its committer was slow to check;
re-applying the change on the latest manifest would then apply it twice. Every manifest we write
records the nonce of the manifest it was built on (the ``parent`` of its
:class:`~slatedb_core.manifest.codec.Stamp`), so the committer reads the next id: built on our
nonce means committed (success, reported once); built on another means our object is a void
write (deleted, and the change re-applied). When GC has collected the next id too, or SlateDB
wrote it (SlateDB stores no nonces), the change is re-applied on the latest manifest, and it is
the change's job to notice that
its effect is already there (every change of the engine does: an SST or checkpoint already named
makes it return None, and the codec refuses a manifest naming an SST or a checkpoint id twice, so
a change is never applied twice). See docs/manifest-and-fencing.md.

**One format.** Every manifest is committed as SlateDB 0.17 writes one (format version 2); a
store given another ``format_version`` refuses to open.

**A destroyed path stays destroyed.** Deleting a destroyed database moves the boundaries to
:data:`~slatedb_core.meta.boundary.TOMBSTONE` and keeps them: every create there then fails its
boundary check, and reading the path reports :class:`DatabaseDestroyed`
(docs/clones-and-destroy.md).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NoReturn

from slatedb_core.errors import (
    CorruptionError,
    DatabaseDeleted,
    DatabaseDestroyed,
    DatabaseNotFound,
    DatabaseNotInitialized,
    Fenced,
    InvalidArgument,
    ManifestVersionExists,
    ObjectNotFound,
    ObjectVersionBehindBoundary,
)
from slatedb_core.layout import MANIFEST_DIR, MANIFEST_SUFFIX
from slatedb_core.manifest._encode import ManifestEncoder, decodes_as_given
from slatedb_core.manifest.codec import (
    FORMAT_VERSION,
    NONCE_SIZE,
    decode_stamped_manifest,
)
from slatedb_core.manifest.model import Manifest
from slatedb_core.meta.boundary import TOMBSTONE
from slatedb_core.meta.sequenced import FIRST_ID, SequencedEntry, SequencedStore
from slatedb_core.meta.versioned import RetryPolicy, VersionedStore
from slatedb_core.store.objectstore import ObjectStore

log = logging.getLogger(__name__)

Role = Literal["writer", "compactor"]
Change = Callable[[Manifest], Manifest | None]
IdChange = Callable[[Manifest, int], Manifest | None]
"""A change that also needs the id it will be committed as (e.g. a checkpoint of "this" version)."""


@dataclass(frozen=True, slots=True)
class StoredManifest:
    """A manifest together with the id it was read from or committed as, and (when known) the
    format version and nonce of that object (None if SlateDB wrote it): a commit built on it
    records the nonce as its parent."""

    id: int
    manifest: Manifest
    version: int | None = None
    nonce: bytes | None = None


@dataclass(frozen=True, slots=True)
class Fence:
    role: Role
    epoch: int

    def check(self, manifest: Manifest) -> None:
        current = manifest.writer_epoch if self.role == "writer" else manifest.compactor_epoch
        if current > self.epoch:
            raise Fenced(self.role, self.epoch, current)
        if current < self.epoch:
            raise CorruptionError(
                f"{self.role}_epoch",
                f"stored epoch {current} is behind ours {self.epoch}: epochs never decrease",
            )


class ManifestStore:
    """All manifest reads and writes of one database."""

    def __init__(
        self,
        store: ObjectStore,
        db_path: str,
        *,
        format_version: int | None = None,
        retry: RetryPolicy | None = None,
        pointer_stride: int = 16,
    ) -> None:
        if format_version not in (None, FORMAT_VERSION):
            raise InvalidArgument(
                f"manifest format version {format_version}: only {FORMAT_VERSION} (SlateDB 0.17's) "
                "is written"
            )
        self.store = store
        self.db_path = db_path
        self.format_version = format_version
        self.seq = SequencedStore(
            store,
            db_path,
            MANIFEST_DIR,
            MANIFEST_SUFFIX,
            pointer_stride=pointer_stride,
            conflict=ManifestVersionExists,
        )
        self.versions: VersionedStore[StoredManifest, Manifest] = VersionedStore(
            self.seq,
            what=f"manifest update of {db_path!r}",
            read_latest=self.read_latest,
            decode=self._decode,
            encode=self._encode,
            retry=retry,
            settle=self._settle_behind_boundary,
            build_on_winner=3,
        )
        self._encoder = ManifestEncoder()
        self._known: tuple[int, bytes, StoredManifest] | None = None
        """The last manifest read or committed, with its id and bytes: reading those bytes
        again (an open reads the latest up to four times) does not decode them again."""

    @property
    def retry(self) -> RetryPolicy:
        return self.versions.retry

    # ---- reads ---------------------------------------------------------------------------
    def _decode(self, object_id: int, data: bytes) -> StoredManifest:
        known = self._known
        if known is not None and known[0] == object_id and known[1] == data:
            return known[2]  # immutable: the same bytes decode to the same manifest
        manifest, stamp = decode_stamped_manifest(data, name=self.seq.path(object_id))
        stored = StoredManifest(object_id, manifest, stamp.version, stamp.nonce)
        data = bytes(data)
        self._known = (object_id, data, stored)
        if stamp.layout is not None:  # a commit built on it re-encodes only what it changes
            self._encoder.seed(manifest, data, stamp.layout)
        return stored

    def try_read_latest(self) -> StoredManifest | None:
        """The latest manifest, or None if there is none (see :meth:`read_latest` for a
        destroyed path, which this also reports as None)."""
        found = self.seq.read_latest_hinted()
        if found is None:
            return None
        object_id, data, pointed = found
        stored = self._decode(object_id, data)
        # A latest at or behind the boundary is a void write (SlateDB RFC 0026): only a stalled
        # zombie's, into a destroyed and collected path, can be the latest, and it is not the
        # database. Such a path has no pointer (destroy deletes it, a void create never writes it).
        if not pointed and self.is_tombstone():
            return None
        return stored

    def read_latest(self) -> StoredManifest:
        """The latest manifest. DatabaseDestroyed if the path holds the tombstone of a destroyed
        and collected database, DatabaseNotFound if it never held one."""
        stored = self.try_read_latest()
        if stored is None:
            self.raise_missing()
        return stored

    def is_tombstone(self) -> bool:
        """True if this path's database was destroyed and collected (one boundary read)."""
        return self.seq.boundary.read() >= TOMBSTONE

    def raise_missing(self) -> NoReturn:
        """Raise the error for a path without manifests: DatabaseDestroyed or DatabaseNotFound."""
        if self.is_tombstone():
            raise DatabaseDeleted(
                f"database {self.db_path!r} in {self.store.url} was destroyed; its path keeps "
                "the tombstone (docs/clones-and-destroy.md)"
            )
        raise DatabaseNotFound(f"no manifest under {self.db_path!r} in {self.store.url}")

    def read(self, object_id: int) -> StoredManifest:
        """Read and decode manifest ``object_id``; ObjectNotFound if it is gone."""
        return self._decode(object_id, self.seq.read(object_id))

    def list(self, start: int | None = None, end: int | None = None) -> list[SequencedEntry]:
        """The manifest objects with ids in ``[start, end)``, in id order."""
        return self.seq.list(start, end)

    def latest_id(self) -> int | None:
        """The highest manifest id in the store, or None when there is none."""
        return self.seq.latest_id()

    # ---- writes --------------------------------------------------------------------------
    def _encode(
        self, object_id: int, manifest: Manifest, base: StoredManifest | None
    ) -> tuple[bytes, StoredManifest]:
        """The bytes of ``manifest`` built on ``base``: a fresh nonce and the base's nonce as
        parent (module docstring)."""
        nonce = os.urandom(NONCE_SIZE)
        parent = None if base is None else base.nonce
        data = self._encoder.encode(manifest, manifest_id=object_id, nonce=nonce, parent=parent)
        stored = StoredManifest(object_id, manifest, FORMAT_VERSION, nonce)
        if decodes_as_given(manifest):  # read back only if it landed: the same bytes
            self._known = (object_id, data, stored)
        return data, stored

    def _settle_behind_boundary(
        self, ours: StoredManifest, err: ObjectVersionBehindBoundary
    ) -> bool:
        """Our create of ``ours`` succeeded but its id is at or behind the boundary (module
        docstring). True: manifest ``ours.id + 1`` was built on it, so it is committed. False:
        a void write, or no evidence left; our object is deleted and the update loop re-applies
        the change on the latest manifest. Raises DatabaseDestroyed on a tombstone."""
        object_id, nonce = ours.id, ours.nonce
        path = self.seq.path(object_id)
        if err.boundary >= TOMBSTONE:
            self._delete_void(object_id)
            raise DatabaseDeleted(
                f"database {self.db_path!r} was destroyed while {path} was being committed"
            ) from err
        parent: bytes | None = None
        try:
            data = self.seq.read(object_id + 1)
            parent = decode_stamped_manifest(data, name=self.seq.path(object_id + 1))[1].parent
        except (ObjectNotFound, CorruptionError):
            pass  # no evidence: the change decides on the latest manifest
        if parent == nonce:
            log.warning(
                "manifest %d of %r: GC passed it before its committer checked, but manifest %d "
                "was built on it: committed",
                object_id,
                self.db_path,
                object_id + 1,
            )
            return True
        self._delete_void(object_id)
        return False

    def _delete_void(self, object_id: int) -> None:
        """Remove our void write at ``object_id`` so nobody mistakes it for history. A void
        write never sits at a pinned id (a new checkpoint pins only the latest or a pinned id),
        but a pin is checked anyway: deleting a pinned manifest would break its checkpoint."""
        try:
            latest = self.try_read_latest()  # None on a tombstone, even if ours is all there is
            if (
                latest is None
                or latest.id == object_id  # a pin inside the void object itself pins nothing
                or not any(c.manifest_id == object_id for c in latest.manifest.checkpoints)
            ):
                self.seq.store.delete(self.seq.path(object_id))
        except Exception as e:  # GC will collect it anyway
            log.warning("could not delete stale manifest %d: %s", object_id, e)

    def create_initial(self, manifest: Manifest) -> StoredManifest:
        """Write the first manifest of a new database; ManifestVersionExists if one exists,
        DatabaseDestroyed if the path holds a destroyed database's tombstone."""
        return self.versions.commit(FIRST_ID, manifest, None)

    def update(
        self,
        change: Change,
        *,
        base: StoredManifest | None = None,
        fence: Fence | None = None,
        force: bool = False,
    ) -> StoredManifest:
        """Apply ``change`` to the latest manifest and commit it as the next id (see update_at)."""
        return self.update_at(lambda m, _next_id: change(m), base=base, fence=fence, force=force)

    def update_at(
        self,
        change: IdChange,
        *,
        base: StoredManifest | None = None,
        fence: Fence | None = None,
        force: bool = False,
    ) -> StoredManifest:
        """Apply ``change(manifest, next_id)`` to the latest manifest and commit it as ``next_id``,
        retrying on conflict. ``base`` is an optimistic guess of the latest (saves the read when
        right).

        ``change`` must be a pure function of its argument: it is re-applied to each newer
        manifest after a conflict. Returning None commits nothing; so does returning its argument
        unchanged, unless ``force`` (a new version with the same content: GC's barrier, see
        :mod:`slatedb_core.meta.compacted_boundary`).
        """

        def attempt(current: StoredManifest) -> Manifest | None:
            new = change(current.manifest, current.id + 1)
            if new is None or (new == current.manifest and not force):
                return None
            return new

        check = None if fence is None else (lambda current: fence.check(current.manifest))
        return self.versions.update(attempt, base=base, fence=check)

    # ---- GC hooks ------------------------------------------------------------------------
    def advance_boundary(self, target: int) -> int:
        """Declare manifest ids ``<= target`` dead (never the latest); returns the boundary."""
        return self.seq.advance_boundary(target)

    def delete(self, object_id: int, *, latest: int | None = None) -> None:
        """Delete manifest ``object_id``: only at or behind the boundary, never the latest (GC)."""
        self.seq.delete(object_id, latest=latest)


class FencedManifest:
    """A writer's or compactor's handle: bumps its epoch once, then fences every later update."""

    def __init__(self, store: ManifestStore, fence: Fence, stored: StoredManifest) -> None:
        self.store = store
        self.fence = fence
        self._stored = stored

    @property
    def stored(self) -> StoredManifest:
        return self._stored

    @property
    def epoch(self) -> int:
        return self.fence.epoch

    @classmethod
    def init(
        cls, store: ManifestStore, role: Role, extra: IdChange | None = None
    ) -> FencedManifest:
        """Bump ``role``'s epoch by one in a single committed update (plus ``extra`` changes).

        The new epoch is derived from the manifest it is committed on top of, so it is unique:
        two racing holders can never both commit the same epoch.
        """
        field = "writer_epoch" if role == "writer" else "compactor_epoch"

        def bump(m: Manifest, next_id: int) -> Manifest:
            if m.destroyed_at_s is not None:
                raise DatabaseDestroyed(f"database {store.db_path!r} was destroyed")
            if not m.initialized:
                raise DatabaseNotInitialized(f"database {store.db_path!r} is not initialized")
            epoch = getattr(m, field) + 1
            ours = "our_writer_epoch" if role == "writer" else "our_compactor_epoch"
            bumped = dataclasses.replace(m, **{field: epoch, ours: epoch})
            if extra is None:
                return bumped
            return extra(bumped, next_id) or bumped

        stored = store.update_at(bump)
        epoch = getattr(stored.manifest, field)
        return cls(store, Fence(role, epoch), stored)

    @classmethod
    def init_writer(cls, store: ManifestStore, extra: IdChange | None = None) -> FencedManifest:
        """Fence out every earlier writer (bump the writer epoch); returns the fenced manifest."""
        return cls.init(store, "writer", extra)

    @classmethod
    def init_compactor(cls, store: ManifestStore, extra: IdChange | None = None) -> FencedManifest:
        """Fence out every earlier compactor (bump its epoch); returns the fenced manifest."""
        return cls.init(store, "compactor", extra)

    def refresh(self) -> StoredManifest:
        """Re-read the latest manifest; raises Fenced if a newer holder exists."""
        latest = self.store.read_latest()
        self.fence.check(latest.manifest)
        self._stored = latest
        return latest

    def update(self, change: Change) -> StoredManifest:
        """A fenced update, optimistic on our last known manifest."""
        self._stored = self.store.update(change, base=self._stored, fence=self.fence)
        return self._stored

    def update_at(self, change: IdChange) -> StoredManifest:
        """A fenced update whose change also receives the id it will be committed as."""
        self._stored = self.store.update_at(change, base=self._stored, fence=self.fence)
        return self._stored
