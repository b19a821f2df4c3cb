"""The keys of two-phase CAS rows: the absolute location of an object, not the URL of the store
that named it (RELIABILITY.md, review finding 12; docs/two-phase-cas.md "Keys").

An intent (or cell) is the create-if-absent of one *object*, so its key must be the same from every
store that reaches the object. Keyed by (store URL, relative path), ``s3://b/lake/prod`` +
``orders/...`` and ``s3://b/lake`` + ``prod/orders/...`` were two keys for one object, and two
writers both won it. :class:`KeyedRows` keys every row by
:class:`~slatedb_core.store.url.StoreLocation`: ``ns`` = the location's root (``s3://bucket``,
``file://``, ``memory://name``), ``dest``/``path`` = the object's name from that root, and the
temporary object a ``source`` names the same way; the store above sees its own relative paths.

Rows written under the old keys are moved once per transactional store
(:func:`migrate_legacy_keys`, run by the first :class:`~slatedb_core.store.twophase.TwoPhaseStore`
opened on it, marked done by a cell ``(slatedb:meta, intent-keys)``): an old ``ns`` is a store URL,
so its location is known, and each row moves to ``(root, base/dest)``. Where the new key is already
taken (the object had been created through two URLs: the bug itself) the new row is kept and the
old one dropped, with a warning; for a cell holding a number (a GC boundary) the larger value is
kept, since a boundary only moves forward.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import uuid
from dataclasses import dataclass

from slatedb_core.store.checksum import crc32
from slatedb_core.store.location import StoreLocation, store_location
from slatedb_core.store.txn import CELLS, INTENTS, Cell, Intent, ListedRow, TxnStore

log = logging.getLogger(__name__)

META_NS = "slatedb:meta"
MARKER = "intent-keys"
MARKER_VALUE = b"location-v1"


# ---- temporary objects: ``<dest>.<32 hex>.<crc32 8 hex>`` -----------------------------------
TEMP = re.compile(r"\.([0-9a-f]{32})\.([0-9a-f]{8})$")
DEFAULT_TEMP_MIN_AGE_S = 24 * 3600.0
"""SlateDB RFC 0001, "Transactional Store Deletion": "any other file ... older than a day"."""


def temp_name(dest: str, data: bytes) -> str:
    return f"{dest}.{uuid.uuid4().hex}.{crc32(data):08x}"


def is_temp_name(path: str) -> bool:
    return TEMP.search(path) is not None


class KeyedRows:
    """The rows of one store, addressed by that store's relative paths."""

    def __init__(self, txn: TxnStore, location: StoreLocation) -> None:
        self.txn = txn
        self.loc = location
        self.ns = location.root

    def _k(self, path: str) -> str:
        return self.loc.key(path)

    def _intent(self, i: Intent | None) -> Intent | None:
        if i is None:
            return None
        return dataclasses.replace(i, dest=self.loc.rel(i.dest), source=self.loc.rel(i.source))

    def bounds(self, prefix: str) -> tuple[str, str | None]:
        """Keys ``lo <= k < hi`` of the objects under ``prefix`` ('0' follows '/')."""
        k = self._k(prefix.rstrip("/"))
        return (k + "/", k + "0") if k else ("", None)

    # ---- intents ---------------------------------------------------------------------------
    def insert_intent(self, dest: str, source: str, size: int) -> bool:
        return self.txn.insert_intent(self.ns, self._k(dest), self._k(source), size)

    def get_intent(self, dest: str) -> Intent | None:
        return self._intent(self.txn.get_intent(self.ns, self._k(dest)))

    def commit_intent(self, dest: str, source: str) -> bool:
        return self.txn.commit_intent(self.ns, self._k(dest), self._k(source))

    def delete_intent(self, dest: str, source: str) -> bool:
        return self.txn.delete_intent(self.ns, self._k(dest), self._k(source))

    def pending_intents(self, prefix: str) -> list[Intent]:
        lo, hi = self.bounds(prefix)
        out = [self._intent(i) for i in self.txn.pending_intents(self.ns, lo, hi)]
        return [i for i in out if i is not None]

    def delete_committed_intents(self, dir_: str, last: str, keep: list[str] | None = None) -> int:
        """Committed intents of ``dir_``'s children up to ``last`` (a path in it), but ``keep``."""
        lo = self._k(dir_) + "/"
        kept = [self._k(p) for p in keep or []]
        return self.txn.delete_committed_intents(self.ns, lo, self._k(last), kept)

    # ---- cells -----------------------------------------------------------------------------
    def _cell(self, c: Cell | None) -> Cell | None:
        return None if c is None else dataclasses.replace(c, path=self.loc.rel(c.path))

    def get_cell(self, path: str) -> Cell | None:
        return self._cell(self.txn.get_cell(self.ns, self._k(path)))

    def create_cell(self, path: str, data: bytes) -> Cell | None:
        return self._cell(self.txn.create_cell(self.ns, self._k(path), data))

    def update_cell(
        self, path: str, data: bytes, *, etag: str | None, version: int | None
    ) -> Cell | None:
        cell = self.txn.update_cell(self.ns, self._k(path), data, etag=etag, version=version)
        return self._cell(cell)

    def put_cell(self, path: str, data: bytes) -> Cell:
        return dataclasses.replace(self.txn.put_cell(self.ns, self._k(path), data), path=path)

    def delete_cell(self, path: str) -> None:
        self.txn.delete_cell(self.ns, self._k(path))

    def listed_rows(self, prefix: str, start_after: str | None) -> list[ListedRow]:
        lo, hi = self.bounds(prefix)
        after = None if start_after is None else self._k(start_after)
        rows = self.txn.listed_rows(self.ns, lo, hi, after)
        return [dataclasses.replace(r, path=self.loc.rel(r.path)) for r in rows]


# ---- rows stored under the old keys ---------------------------------------------------------
@dataclass
class Migration:
    namespaces: int = 0
    intents: int = 0
    cells: int = 0
    conflicts: list[str] = dataclasses.field(default_factory=list)


def ensure_location_keys(txn: TxnStore) -> Migration | None:
    """Migrate the old keys once per transactional store (one SELECT when already done)."""
    if txn.get_cell(META_NS, MARKER) is not None:
        return None
    done = migrate_legacy_keys(txn)
    txn.create_cell(META_NS, MARKER, MARKER_VALUE)  # None if a concurrent run was first: fine
    return done


def migrate_legacy_keys(txn: TxnStore) -> Migration:
    """Move every row keyed by a store URL to its location key (see the module docstring).
    Idempotent; rows already keyed by location are fixed points of the mapping."""
    out = Migration()
    rows, _ = txn.execute(
        "select", f"SELECT DISTINCT ns FROM {INTENTS} UNION SELECT DISTINCT ns FROM {CELLS}", ()
    )
    for (old,) in rows:
        loc = store_location(old)
        if old == META_NS or (loc.root, loc.base) == (old, ""):
            continue
        out.namespaces += 1
        prefix = loc.base + "/" if loc.base else ""
        out.intents += _move_intents(txn, old, loc.root, prefix, out.conflicts)
        out.cells += _move_cells(txn, old, loc.root, prefix, out.conflicts)
    if out.namespaces:
        log.warning(
            "two-phase CAS: moved %d intents and %d cells of %d store URLs to location keys%s",
            out.intents,
            out.cells,
            out.namespaces,
            f"; {len(out.conflicts)} conflicts: {out.conflicts[:5]}" if out.conflicts else "",
        )
    return out


_NEW = "CAST(? AS TEXT) || "


def _move_intents(txn: TxnStore, old: str, new: str, prefix: str, conflicts: list[str]) -> int:
    _, n = txn.execute(
        "insert",
        f"INSERT INTO {INTENTS} (ns, dest, source, committed, size, created_ms) "
        f"SELECT ?, {_NEW}dest, {_NEW}source, committed, size, created_ms FROM {INTENTS} "
        "WHERE ns = ? ON CONFLICT (ns, dest) DO NOTHING",
        (new, prefix, prefix, old),
    )
    clash, _ = txn.execute(
        "select",
        f"SELECT o.dest FROM {INTENTS} o JOIN {INTENTS} n ON n.ns = ? AND "
        f"n.dest = {_NEW}o.dest WHERE o.ns = ? AND n.source <> {_NEW}o.source",
        (new, prefix, old, prefix),
    )
    conflicts += [f"{new}/{prefix}{r[0]} (intent under {old})" for r in clash]
    txn.execute(
        "delete",
        f"DELETE FROM {INTENTS} WHERE ns = ? AND EXISTS (SELECT 1 FROM {INTENTS} n WHERE "
        f"n.ns = ? AND n.dest = {_NEW}{INTENTS}.dest)",
        (old, new, prefix),
    )
    return max(n, 0)


def _number(data: bytes) -> int | None:
    text = bytes(data).strip()
    return int(text) if text.isdigit() and text.isascii() else None


def _move_cells(txn: TxnStore, old: str, new: str, prefix: str, conflicts: list[str]) -> int:
    _, n = txn.execute(
        "insert",
        f"INSERT INTO {CELLS} (ns, path, data, etag, version, modified_ms) "
        f"SELECT ?, {_NEW}path, data, etag, version, modified_ms FROM {CELLS} WHERE ns = ? "
        "ON CONFLICT (ns, path) DO NOTHING",
        (new, prefix, old),
    )
    clash, _ = txn.execute(
        "select",
        f"SELECT o.path, o.data, n.data FROM {CELLS} o JOIN {CELLS} n ON n.ns = ? AND "
        f"n.path = {_NEW}o.path WHERE o.ns = ? AND n.etag <> o.etag",
        (new, prefix, old),
    )
    for path, mine, theirs in clash:
        conflicts.append(f"{new}/{prefix}{path} (cell under {old})")
        a, b = _number(mine), _number(theirs)
        if a is not None and b is not None and a > b:  # a GC boundary only moves forward
            txn.put_cell(new, prefix + path, bytes(mine))
    txn.execute(
        "delete",
        f"DELETE FROM {CELLS} WHERE ns = ? AND EXISTS (SELECT 1 FROM {CELLS} n WHERE "
        f"n.ns = ? AND n.path = {_NEW}{CELLS}.path)",
        (old, new, prefix),
    )
    return max(n, 0)
