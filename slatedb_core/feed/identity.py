"""A database's change-feed identity: the random id its feed puts in every cursor, so a cursor
another database handed out is refused (docs/changes.md, "The cursor").

A cursor names WAL SST ids and seqs, and every database counts both from 1: another database's
cursor, or one of the database a clone was made from (a clone copies its parent's WAL tail, ids
and rows), names positions this one has too, and resuming there would skip or repeat changes
with no error. Neither SlateDB 0.17's manifest nor ours holds an id of the database, and a
manifest field of ours would be dropped by a SlateDB writer's rewrite; so the feed keeps one of
its own in ``<db>/changes/identity`` (:func:`~slatedb_core.layout.changes_identity_path`),
outside every directory SlateDB lists: 16 random bytes, created with a create-if-absent PUT by
the first feed call on the database (a reader's too: the feed already writes
``gc/wal.boundary`` the same way), never rewritten. A clone or union is a new path and gets its
own; a hard destroy deletes it with the database's other own objects (``changes/`` is one of
:data:`~slatedb_core.layout.OWN_DIRS`), so a database created again at the path is another
database to its old cursors. A copy of the database's objects (a restore from a backup) keeps
it: that copy's cursors are its own, and the WAL check that a cursor is not ahead of the WAL
(``ChangeFeed``) catches one from a later state than the copy.
"""

from __future__ import annotations

import json
import re
import uuid

from slatedb_core.errors import CorruptionError, ObjectAlreadyExists, ObjectNotFound
from slatedb_core.layout import changes_identity_path
from slatedb_core.store.objectstore import ObjectStore

_ID = re.compile(r"^[0-9a-f]{32}$")


def feed_identity(store: ObjectStore, db_path: str) -> str:
    """The change-feed identity of the database at ``db_path`` (32 lowercase hex digits),
    created if it has none (see the module docstring)."""
    path = changes_identity_path(db_path)
    try:
        data = bytes(store.get(path).data)
    except ObjectNotFound:
        mine = uuid.uuid4().hex
        try:
            store.put_if_absent(path, json.dumps({"id": mine}).encode())
            return mine
        except ObjectAlreadyExists:
            data = bytes(store.get(path).data)  # another feed's create won
    try:
        found = json.loads(data)["id"]
    except (ValueError, KeyError, TypeError):
        found = None
    if not isinstance(found, str) or not _ID.match(found):
        raise CorruptionError(path, 'not a change-feed identity (a JSON {"id": 32 hex digits})')
    return found


__all__ = ["feed_identity"]
