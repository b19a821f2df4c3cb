"""The change feed: every committed change of a database, in commit order, resumable from a
cursor (docs/changes.md; SlateDB RFC 0019's WAL reader is the model).

:mod:`~slatedb_core.feed.changes` reads it (``ChangeFeed``, what ``Db.changes`` and
``DbReader.changes`` run), :mod:`~slatedb_core.feed.cursor` is the cursor a consumer persists,
:mod:`~slatedb_core.feed.rows` the Arrow rows of a batch, :mod:`~slatedb_core.feed.retention`
a registered consumer's checkpoint.
"""

from slatedb_core.feed.changes import ChangeBatch, ChangeFeed, ChangesOptions
from slatedb_core.feed.cursor import Cursor, SnapshotPosition
from slatedb_core.feed.rows import CHANGE_SCHEMA

__all__ = [
    "CHANGE_SCHEMA",
    "ChangeBatch",
    "ChangeFeed",
    "ChangesOptions",
    "Cursor",
    "SnapshotPosition",
]
