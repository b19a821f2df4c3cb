"""What a path in a store holds: a sharded table, a plain database, or neither.

A table keeps its shard map under ``<table>/shardmap/`` and a database its manifests under
``<db>/manifest/`` (docs/format.md, layout in :mod:`slatedb_core.layout`). Opening one as the
other used to fail with a bare "not found", or worse, ``Db.open`` created a database inside a
table's root. Every open that finds nothing where it looked asks here, once, on that failure
path only (a LIST of at most one key), so an open that succeeds pays nothing (issue 40, item 6).
"""

from __future__ import annotations

from slatedb_core.errors import NotADatabase, NotATable
from slatedb_core.layout import MANIFEST_DIR, SHARDMAP_DIR, join
from slatedb_core.store.objectstore import ObjectStore


def _has_objects(store: ObjectStore, prefix: str) -> bool:
    """True when the first object under ``prefix/`` is a direct child of it (a shard map or a
    manifest sorts first: their names are digits); a deeper first object is another table or
    database nested there (``<path>/shardmap/<table>/...``), which says nothing of ``path``."""
    first = next(iter(store.list(prefix + "/")), None)
    return first is not None and "/" not in first.path[len(prefix) + 1 :]


def holds_table(store: ObjectStore, path: str) -> bool:
    """True when ``path`` has a shard map (``<path>/shardmap/``): it is a table's root."""
    return _has_objects(store, join(path, SHARDMAP_DIR))


def holds_database(store: ObjectStore, path: str) -> bool:
    """True when ``path`` has manifests (``<path>/manifest/``): it is a database."""
    return _has_objects(store, join(path, MANIFEST_DIR))


def refuse_table(store: ObjectStore, path: str) -> None:
    """Raise :class:`NotADatabase` when ``path``, opened as a database, is a table's root."""
    if holds_table(store, path):
        raise NotADatabase(path, store.url)


def refuse_database(store: ObjectStore, path: str) -> None:
    """Raise :class:`NotATable` when ``path``, opened as a table, is a database."""
    if holds_database(store, path):
        raise NotATable(path, store.url)
