"""Which object store holds a database's WAL objects (WAL SSTs and fences): its main store, or a
separate WAL store (SlateDB's ``with_wal_object_store``, SlateDB RFC 0009).

The path is the same in either store, ``<db>/wal/{id:020}.sst`` (RFC 0009: "the object path
structure will remain unchanged for both stores"); manifests, compacted SSTs, compactions records
and boundary files stay in the main store. Every path that touches ``wal/`` reaches it through a
:class:`~slatedb_core.wal.log.WalLog` built from a :class:`WalLocation`, so none can read or write
WAL objects in the wrong store.

The manifest does not say where the WAL is (SlateDB 0.17's ManifestV2 has no field for it), so a
database opened without the WAL store it was written with would look like one with an empty WAL.
:func:`check_wal_present` tells the two apart from the listing every open makes anyway and raises
:class:`~slatedb_core.errors.WalStoreMissing`.

A listing cannot tell one separate WAL store from another while our writer's WAL holds nothing
the manifest records (its fence past the replay point is in no manifest). So our writer gives
each separate WAL store an id: 16 random bytes in the object ``<db>/_wal_store_id`` of that store
(outside ``wal/``, which SlateDB lists and parses as WAL ids; no GC of either engine lists it),
created before the manifest bump that records it (``Manifest.wal_store_id``). An opener whose
WAL store holds another id, or none, is refused. One GET per :class:`WalLocation` and database,
only when the manifest records an id and a separate store is given; nothing otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from slatedb_core.errors import (
    CorruptionError,
    ObjectAlreadyExists,
    ObjectNotFound,
    WalStoreMissing,
)
from slatedb_core.layout import wal_store_id_path
from slatedb_core.manifest.model import WAL_STORE_ID_SIZE, Manifest
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store


@dataclass(frozen=True, slots=True)
class WalLocation:
    """The store of a database's WAL objects: ``separate`` when one is configured, else
    ``main``. ``repr`` and messages show only the stores' redacted URLs."""

    main: ObjectStore
    separate: ObjectStore | None = None
    _ids: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)
    """The WAL store ids read (or created) so far, by database path: each is read once."""

    @property
    def store(self) -> ObjectStore:
        """The store holding ``<db>/wal/``."""
        return self.separate if self.separate is not None else self.main

    def describe(self) -> str:
        """Where WAL objects are looked for, for messages (a redacted URL)."""
        if self.separate is None:
            return f"the main store {self.main.url} (no WAL store configured)"
        return f"the WAL store {self.separate.url}"

    @classmethod
    def open(cls, main: ObjectStore, wal_url: str | None) -> WalLocation:
        """``main``'s WAL location with the WAL store ``wal_url`` (a store URL as
        :func:`~slatedb_core.store.url.open_store` takes it), if any."""
        if wal_url is None:
            return cls(main)
        return cls(main, open_store(wal_url))

    def store_id(self, db_path: str) -> bytes | None:
        """The id the separate WAL store holds for ``db_path`` (one GET, then remembered);
        None when it holds none. Raises :class:`~slatedb_core.errors.CorruptionError` when the
        object holds no id (empty, garbage, truncated: damage, which is no evidence of another
        store, issue 38 review 2 item 3); a store error propagates as it is."""
        assert self.separate is not None
        known = self._ids.get(db_path)
        if known is not None:
            return known
        try:
            data = self.separate.get(wal_store_id_path(db_path)).data
        except ObjectNotFound:
            return None
        found = _parse_id(data)
        if not found:
            raise CorruptionError(
                f"{self.separate.url}/{wal_store_id_path(db_path)}",
                f"not a WAL store id ({2 * WAL_STORE_ID_SIZE} hex digits): {len(data)} bytes",
            )
        self._ids[db_path] = found
        return found

    def claim_store_id(self, db_path: str, m: Manifest) -> bytes:
        """The separate WAL store's id for ``db_path``, created (create-if-absent) when it has
        none: what our writer records in the manifest it bumps (``m``, the one it bumps on), so
        the object exists before any manifest names it. Raises ``CorruptionError`` when the
        store's object holds no id, ``WalStoreMissing`` when it holds another id than ``m``
        records (:func:`check_store_id`: also for a bump no :func:`check_wal_present` preceded,
        such as a conditional open)."""
        assert self.separate is not None
        check_store_id(db_path, self, m)
        found = self.store_id(db_path)
        if found is None:
            fresh = os.urandom(WAL_STORE_ID_SIZE)
            try:
                self.separate.put_if_absent(wal_store_id_path(db_path), fresh.hex().encode())
            except ObjectAlreadyExists:
                pass  # another opener created it first: use theirs
            else:
                self._ids[db_path] = fresh
            found = self.store_id(db_path)
        if found is None:  # created by another opener, then deleted before our GET
            detail = f"its object {wal_store_id_path(db_path)} was deleted while being created"
            raise WalStoreMissing(db_path, self.describe(), detail)
        return found


def _parse_id(data: bytes) -> bytes:
    """The id in a ``_wal_store_id`` object (its hex text), or ``b""`` when it holds none."""
    try:
        found = bytes.fromhex(data.decode("ascii"))
    except ValueError:  # UnicodeDecodeError is one
        return b""
    return found if len(found) == WAL_STORE_ID_SIZE else b""


def slatedb_writer(m: Manifest) -> bool:
    """Whether ``m``'s writer epoch was taken by SlateDB's writer (not ours)."""
    return m.writer_epoch > 0 and m.our_writer_epoch != m.writer_epoch


def listing_can_refuse(m: Manifest) -> bool:
    """Whether :func:`check_wal_present` of ``m`` can refuse for what a LIST finds (the rules on
    what the manifest records past its replay point, and on SlateDB's writer); when not, only
    its manifest-only rules (``Manifest.separate_wal_store``) apply and no LIST is needed."""
    if not m.initialized or m.destroyed_at_s is not None:
        return False
    recorded = max(m.wal_id_last_seen, m.next_wal_sst_id - 1)
    return recorded > m.replay_after_wal_id or slatedb_writer(m)


def check_store_id(db_path: str, where: WalLocation, m: Manifest) -> None:
    """Raise :class:`~slatedb_core.errors.WalStoreMissing` when ``m`` records the id of our
    writer's separate WAL store (``Manifest.wal_store_id``) and ``where``'s separate store
    holds another one, or none (one GET per location and database: :meth:`WalLocation.store_id`).
    Nothing to check, and no request, without a recorded id or a separate store."""
    if m.wal_store_id is None or where.separate is None or slatedb_writer(m):
        return
    found = where.store_id(db_path)
    if found != m.wal_store_id:
        held = "none" if found is None else found.hex()
        detail = (
            f"its manifest names the WAL store with id {m.wal_store_id.hex()} and this "
            f"store's {wal_store_id_path(db_path)} holds {held}"
        )
        raise WalStoreMissing(db_path, where.describe(), detail)


def check_wal_present(
    db_path: str,
    where: WalLocation,
    m: Manifest,
    after_replay_point: Sequence[int],
    *,
    at_replay_point: bool | None,
) -> None:
    """Raise :class:`~slatedb_core.errors.WalStoreMissing` when the WAL of ``m`` is not in
    ``where``: ``after_replay_point`` (the WAL ids listed past ``m.replay_after_wal_id``) is
    empty although

    * ``m`` records WAL SSTs past its replay point (``wal_id_last_seen``, ``next_wal_sst_id``):
      GC deletes WAL SSTs only at or below the replay point (SlateDB RFC 0004); or
    * ``m``'s writer epoch is SlateDB's (:func:`slatedb_writer`) and ``at_replay_point`` is
      False: SlateDB's writer creates its fence (a zero-byte WAL object) past the replay point
      right after its epoch bump (SlateDB RFC 0001), the replay point only moves onto a WAL
      object, and both GCs keep the object *at* the latest replay point. ``at_replay_point``
      None: not known (``m`` is not the latest manifest, whose replay point a GC may have
      collected, or the caller's own bump is on top of it); this rule is then skipped. Our own
      writer's epoch does not count: one that died between its bump and its fence leaves
      exactly this state, and the database must stay openable.

    * our writer recorded that it keeps the WAL in a separate store
      (``Manifest.separate_wal_store``) and ``where`` has none, whatever is listed; or our
      writer was the last to open it, with the WAL in the main store, and ``where`` has a
      separate one (a wrong ``wal_url`` would otherwise read as an empty WAL); or
    * our writer recorded the id of its separate WAL store (``Manifest.wal_store_id``) and
      ``where``'s separate store holds another one, or none (:meth:`WalLocation.store_id`,
      one GET): another store, even before anything past the replay point is recorded. The
      writer creates the id object before its bump, so one that died between its bump and its
      fence stays openable with the right store; or
    * ``m`` is SlateDB's ManifestV1 with ``wal_object_store_uri`` and ``where`` has no
      separate store (SlateDB's builders refuse the same).

    A brand-new database (no writer yet) passes, and so does one not initialized or destroyed
    (its opener's own error names that); so does a clone or union (``external_dbs``):
    it starts at its source's replay point with no WAL object there (SlateDB RFC 0004, "Clones"),
    so only what its manifest records is checked. Costs nothing but that one GET (with a
    recorded id and a separate store only): the caller's own listing answers the rest."""
    if not m.initialized or m.destroyed_at_s is not None:
        return  # a destroyed database: its opener's own error says so
    if m.separate_wal_store and where.separate is None and not slatedb_writer(m):
        # our writer recorded it (Manifest.separate_wal_store): whatever wal/ of the main store
        # holds is not this database's WAL
        detail = "our writer last opened it with a separate WAL store (DbOptions.wal_url)"
        raise WalStoreMissing(db_path, where.describe(), detail)
    if m.wal_object_store_uri is not None and where.separate is None:
        # SlateDB's ManifestV1 mark (SlateDB's builders refuse to open it without a WAL store)
        detail = "its ManifestV1 says SlateDB's writer keeps it in a separate WAL object store"
        raise WalStoreMissing(db_path, where.describe(), detail)
    check_store_id(db_path, where, m)
    if (
        where.separate is not None
        and not m.separate_wal_store
        and m.writer_epoch > 0
        and not slatedb_writer(m)
    ):
        # our writer was the last to open it, with its WAL in the main store (every build of
        # ours records a separate one): the WAL store given is not this database's WAL
        detail = "our writer last opened it with its WAL in the main store (no wal_url)"
        raise WalStoreMissing(db_path, where.describe(), detail)
    if after_replay_point:
        return  # a clone still copying its WAL: its own errors say so
    r = m.replay_after_wal_id
    recorded = max(m.wal_id_last_seen, m.next_wal_sst_id - 1)
    if recorded > r:
        detail = f"its manifest records WAL SSTs {r + 1}..{recorded} past the replay point {r}"
    elif slatedb_writer(m) and at_replay_point is False and not m.external_dbs:
        detail = (
            f"SlateDB's writer (epoch {m.writer_epoch}) opened it, which leaves a WAL fence "
            f"past the replay point {r}"
        )
    else:
        return
    raise WalStoreMissing(db_path, where.describe(), detail)
