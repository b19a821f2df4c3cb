"""A change-feed cursor: where a consumer of ``changes`` resumes, as a value it persists.

A cursor names the next WAL SST to read and the last seq delivered (SlateDB RFC 0019 resumes by
WAL file id and leaves seq filtering to its caller; we do both, so a batch may end inside a WAL
SST and resuming delivers each change once). While a feed is still delivering the snapshot that
bootstraps it (its WAL already collected, docs/changes.md), the cursor also names the
checkpoint the snapshot reads, the manifest that checkpoint pins and the last key delivered.

A cursor the feed hands out also carries the change-feed identity of its database
(:mod:`slatedb_core.feed.identity`), so that another database's cursor is refused rather than
read at positions this one has too; a cursor without one (made by an earlier build, and
persisted since: Spark offsets, Delta commit metadata, table cursors) is still read, as before.

Encoding (stable, ASCII, safe in a URL, a file name or a JSON string)::

    c1.<wal_id>.<seq>[.d<database id>]                     the WAL phase
    c1.<wal_id>.<seq>.<checkpoint uuid>.<manifest id>.<hex of last key, may be empty>[.d<id>]

(the database id: 32 lowercase hex digits). :meth:`Cursor.decode` refuses anything else with
:class:`~slatedb_core.errors.CursorInvalid`.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from slatedb_core.errors import CursorInvalid

_U64 = 2**64
_PREFIX = "c1"
_INT = r"(0|[1-9][0-9]{0,19})"
_DB = r"(?:\.d([0-9a-f]{32}))?"
_WAL = re.compile(rf"^{_PREFIX}\.{_INT}\.{_INT}{_DB}$")
_SNAPSHOT = re.compile(
    rf"^{_PREFIX}\.{_INT}\.{_INT}\.([0-9a-f]{{8}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-"
    rf"[0-9a-f]{{12}})\.{_INT}\.((?:[0-9a-f]{{2}})*){_DB}$"
)
_DB_ID = re.compile(r"^[0-9a-f]{32}$")
MAX_ENCODED = 4096 + 128
"""The longest cursor decoded: a snapshot cursor carries a key, and SlateDB keys are short."""


@dataclass(frozen=True, slots=True)
class SnapshotPosition:
    """Where a feed is in the snapshot that bootstraps it: the checkpoint it reads, the manifest
    that checkpoint pins, and the last key delivered (None: none yet)."""

    checkpoint: uuid.UUID
    manifest_id: int
    after_key: bytes | None


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where ``changes`` resumes: ``wal_id`` is the next WAL SST to read and ``seq`` the last seq
    delivered (rows at or below it are not delivered again); ``snapshot`` is set while the
    bootstrap snapshot is still being delivered; ``db`` is the change-feed identity of the
    database that handed it out (None: a cursor made here, or by an earlier build, which any
    database reads). Persist :meth:`encode`, pass it back as ``since``."""

    wal_id: int = 1
    seq: int = 0
    snapshot: SnapshotPosition | None = None
    db: str | None = None

    def __post_init__(self) -> None:
        for name in ("wal_id", "seq"):
            v = getattr(self, name)
            if type(v) is not int or not 0 <= v < _U64:
                raise CursorInvalid(f"cursor {name} must be an int in [0, 2**64), got {v!r}")
        if self.wal_id < 1:
            raise CursorInvalid("cursor wal_id starts at 1 (WAL ids do)")
        s = self.snapshot
        if s is not None and (
            not isinstance(s, SnapshotPosition)
            or not isinstance(s.checkpoint, uuid.UUID)
            or type(s.manifest_id) is not int
            or not 0 < s.manifest_id < _U64
            or not (s.after_key is None or (isinstance(s.after_key, bytes) and s.after_key))
        ):
            raise CursorInvalid(f"cursor snapshot position is malformed: {s!r}")
        if self.db is not None and (not isinstance(self.db, str) or not _DB_ID.match(self.db)):
            raise CursorInvalid(f"cursor database id must be 32 lowercase hex digits: {self.db!r}")

    @property
    def in_snapshot(self) -> bool:
        """Whether the bootstrap snapshot is still being delivered."""
        return self.snapshot is not None

    def encode(self) -> str:
        """The cursor as a stable ASCII string (see the module docstring)."""
        head = f"{_PREFIX}.{self.wal_id}.{self.seq}"
        tail = "" if self.db is None else f".d{self.db}"
        s = self.snapshot
        if s is None:
            return head + tail
        key = "" if s.after_key is None else s.after_key.hex()
        return f"{head}.{s.checkpoint}.{s.manifest_id}.{key}{tail}"

    def of_db(self, db: str | None) -> Cursor:
        """This cursor as database ``db``'s (None: as no database's)."""
        return self if db == self.db else Cursor(self.wal_id, self.seq, self.snapshot, db)

    def __str__(self) -> str:
        return self.encode()

    @classmethod
    def decode(cls, text: str | bytes) -> Cursor:
        """The cursor :meth:`encode` made; :class:`~slatedb_core.errors.CursorInvalid` for
        anything else (a cursor is never guessed at: a wrong one would skip or repeat
        changes)."""
        if isinstance(text, bytes | bytearray | memoryview):
            try:
                text = bytes(text).decode("ascii")
            except UnicodeDecodeError:
                raise CursorInvalid("a change-feed cursor is ASCII") from None
        if not isinstance(text, str):
            raise CursorInvalid(
                f"a change-feed cursor is a str or bytes, got {type(text).__name__}"
            )
        if len(text) > MAX_ENCODED:
            raise CursorInvalid(f"a change-feed cursor is at most {MAX_ENCODED} characters")
        m = _WAL.match(text)
        if m is not None:
            return cls(int(m.group(1)), int(m.group(2)), None, m.group(3))
        m = _SNAPSHOT.match(text)
        if m is None:
            shown = text if len(text) <= 80 else text[:77] + "..."
            raise CursorInvalid(f"not a change-feed cursor (c1.<wal>.<seq>[...]): {shown!r}")
        key = bytes.fromhex(m.group(5)) or None
        pos = SnapshotPosition(uuid.UUID(m.group(3)), int(m.group(4)), key)
        return cls(int(m.group(1)), int(m.group(2)), pos, m.group(6))

    @classmethod
    def of(cls, since: Cursor | str | bytes | None) -> Cursor | None:
        """``since`` as a cursor: a cursor as it is, an encoding decoded, None as None."""
        if since is None or isinstance(since, Cursor):
            return since
        return cls.decode(since)


__all__ = ["MAX_ENCODED", "Cursor", "SnapshotPosition"]
