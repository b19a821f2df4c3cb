"""The change feed of a sharded table: every shard's change feed under one combined cursor,
surviving split, merge and overwrite so that a consumer sees each key's changes in order, once
(docs/changes.md, "Tables"; issue 43, item 2).

Each key belongs to one shard at a time, so a key's changes are in order when each shard's are
(:class:`~slatedb_core.feed.ChangeFeed`) and a shard's are delivered only after those of the
shards it came from. A rescale (:mod:`slatedb_core.table.rescale`) fences and flushes its
sources before it clones (split) or unions (merge) them, so a retired source's feed has an end,
and its targets start from their first manifest: a clone's or union's manifest 1 holds the
sources' rows at seqs up to its ``last_l0_seq``, and its own writes come after, in WAL SSTs
after its ``replay_after_wal_id`` (a clone's copied WAL tail holds rows at or below that seq
only). So a target's feed starts at ``Cursor(replay_after_wal_id + 1, last_l0_seq)`` of its
manifest 1, once every source's feed was read to its end.

A call reads, in this order: the retired shards the cursor still names, to their end; the
shards between them and the latest map's (a shard split again before the consumer saw it:
found through each database's origin record, :mod:`slatedb_core.lifecycle.origin`, which names
its parent or union sources and outlives GC), from manifest 1 to their end; then the latest
map's shards, from their cursors or manifest 1. A retired shard read to its end stays in the
cursor marked done until every shard after it has a cursor of its own, then it is dropped.

An overwrite's targets (:mod:`slatedb_core.table.overwrite`) are new databases with no origin:
the table's contents were replaced, not changed. Once the replaced shards are read to their end
(their seal fenced and flushed them), the feed delivers a delete of every live key of each (in
key order, a cursor inside them names the last key deleted: state ``x<hex>``), then each new
shard from its start (a snapshot of its contents, :class:`~slatedb_core.feed.ChangeFeed`'s
bootstrap), then its changes: per key, the old changes, its delete, its new value. A shard the
map lists as retired that the cursor never read (a rescale's target between the cursor and the
overwrite) is :class:`~slatedb_core.errors.ChangesCollected` rather than keys left undeleted. A
database the table GC already deleted (a retired shard after ``db_delete_grace``, or a
manifest 1 GC collected) is ChangesCollected too, never a silent gap.

An overwrite's new shard is read from its build: the first manifest of the database that holds
data (the overwrite's ingest, :mod:`slatedb_core.table.overwrite` step 1, before any writer of
its own), delivered as snapshot rows in key order (state ``s<id>.<hex>``: that manifest and the
last key delivered),
then its WAL after that manifest's replay point, rows above its ``last_l0_seq``. So a read
between two cursors (``until``, a Spark micro-batch) yields the same rows every time, and
needs no bootstrap.

A registered consumer (``ChangesOptions.consumer``) holds every shard under the per-table name
:func:`shard_consumer` (a consumer of the same name reading a shard database directly is
another one). Each live shard's hold moves when its feed resumes (:mod:`slatedb_core.feed.
retention`); a split or merge carries it to the targets before the swap. A retired shard keeps
the hold (a destroyed database the GC does not delete while a checkpoint holds it) until a call
resumes from a cursor past it: one that names it done, or neither names it nor needs it on the
way to the latest map's shards; only then is it released, so a consumer that crashed before
persisting its last cursor finds everything its persisted one needs. When a rescale target's
manifest 1 is gone, where its own changes start is read from the manifest the consumer's
carried checkpoint pins (committed before any write into the target).

The combined cursor, :class:`~slatedb_core.table.changes_cursor.TableCursor`, names the map
version and each shard database's state; :mod:`slatedb_core.table.changes_cursor` encodes it.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core.errors import (
    ChangesCollected,
    CursorInvalid,
    DatabaseDestroyed,
    DatabaseNotFound,
    InvalidArgument,
    ObjectNotFound,
)
from slatedb_core.feed import ChangeFeed, ChangesOptions, Cursor
from slatedb_core.feed.identity import feed_identity
from slatedb_core.feed.retention import CONSUMER_PREFIX, ConsumerHold, consumer_holds, release
from slatedb_core.feed.rows import (
    CHANGE_SCHEMA,
    change_rows,
    delivered_by,
    delivered_rows,
    empty_changes,
)
from slatedb_core.keys import KeyRange
from slatedb_core.layout import changes_identity_path, join
from slatedb_core.lifecycle.origin import CloneOrigin, read_origin
from slatedb_core.lsm.dbstate import DbState, build_handles
from slatedb_core.lsm.memtable import Memtable
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore, StoredManifest
from slatedb_core.meta.sequenced import FIRST_ID
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table.changes_cursor import (
    CLEARING,
    DB_ID,
    DONE,
    SEEDING,
    TableCursor,
    is_clearing,
    is_seeding,
    seeding_state,
)
from slatedb_core.table.shardmap import ShardMap, ShardMapStore

_CursorNow = Callable[..., "TableCursor"]
"""The table cursor now, after setting one shard's entry (when given)."""
_NAME_BASED = 5
"""The UUID version of a checkpoint ``carry_consumers`` adds (``uuid.uuid5``)."""
SHARD_CONSUMER_PREFIX = "table:"
"""A table consumer's name on each shard database is this prefix and its name."""


@dataclass(frozen=True, slots=True)
class TableChangeBatch:
    """A batch of one shard's changes (``CHANGE_SCHEMA``) and the table cursor to persist once
    it is applied; ``db_path`` is the shard's database (rows may be none: the cursor moved)."""

    rows: pa.RecordBatch
    cursor: TableCursor
    db_path: str


class TableChangeFeed:
    """The change feed of the table at ``path`` (see the module docstring); ``options`` apply
    to every shard's feed (a registered consumer holds each shard under
    :func:`shard_consumer`)."""

    def __init__(
        self,
        path: str,
        store: ObjectStore,
        maps: ShardMapStore,
        options: ChangesOptions | None = None,
        *,
        wal_url: str | None = None,
    ) -> None:
        self.path = path
        self.store = store
        self.maps = maps
        self.options = options or ChangesOptions()
        self.wal_url = wal_url
        self.consumer: str | None = None
        """The consumer's name on the shard databases (None: unregistered)."""
        if self.options.consumer is not None:
            self.consumer = shard_consumer(self.options.consumer)
        self.shard_options = dataclasses.replace(self.options, consumer=self.consumer)
        """What each shard's feed runs with."""

    def changes(
        self,
        since: TableCursor | str | bytes | None = None,
        until: TableCursor | str | bytes | None = None,
    ) -> Iterator[TableChangeBatch]:
        """Every change of the table after ``since`` (None: from each shard's start), shard by
        shard, each key's in order; see the module docstring. With ``until`` (a cursor
        :meth:`tail` handed out), only the changes ``until`` has delivered: planned on its
        shard map, each live shard read up to its entry, so a read between the same two
        cursors yields the same rows however the table changed since (a split after
        ``until`` included); the last batch's cursor is then ``until``'s equivalent."""
        return self._changes(TableCursor.of(since), TableCursor.of(until))

    def tail(self) -> TableCursor:
        """The table cursor at the end of every live shard's WAL now (the latest map's
        shards, each at :meth:`ChangeFeed.tail`): ``changes(since=t)`` delivers what is
        committed after the call, ``changes(since, until=t)`` what is committed before it (a
        streaming source's latest offset). One shard-map read, then a manifest read and a
        LIST per shard; nothing is registered."""
        m = self.maps.read_latest()
        unregistered = dataclasses.replace(self.options, consumer=None)
        tails: list[tuple[str, Cursor | str | None]] = []
        for s in m.shards:
            try:
                tails.append((self._rel(s.db_path), self._feed(s.db_path, unregistered).tail()))
            except (ObjectNotFound, DatabaseNotFound) as e:
                raise ChangesCollected(
                    self.path, f"shard database {s.db_path!r} is gone: {e}"
                ) from e
        return TableCursor(m.id, tuple(tails))

    def advance(self, cursor: TableCursor | str | bytes | None) -> None:
        """Move the consumer's holds to keep only what ``cursor`` still needs (done by
        :meth:`changes` with its ``since``; a streaming source calls it once a batch ending at
        ``cursor`` is committed). InvalidArgument without a consumer."""
        if self.consumer is None:
            raise InvalidArgument("no consumer: set ChangesOptions.consumer")
        m = self.maps.read_latest()
        entries, order, _ = self._plan(m, TableCursor.of(cursor))
        self._hold(m, entries, order)

    def release(self) -> None:
        """Unregister the consumer: delete its hold on every shard database of the latest map
        and every retired one it lists (InvalidArgument without a consumer)."""
        if self.consumer is None:
            raise InvalidArgument("no consumer: set ChangesOptions.consumer")
        m = self.maps.read_latest()
        for db_path in [*(s.db_path for s in m.shards), *m.retired]:
            self._release(db_path)

    def consumers(self) -> dict[str, ConsumerHold | None]:
        """The consumer's hold on each live shard database (the latest map's shards, by path,
        in key order): its checkpoint there and what it keeps (``wal_behind``, ``expired``:
        :meth:`ChangeFeed.consumers`), or None where it holds none (never registered there,
        released, or its expired checkpoint removed by the GC). A retired shard's hold is not
        listed. One shard-map read, then one or two manifest reads per shard; nothing is
        registered or moved. InvalidArgument without a consumer."""
        if self.consumer is None:
            raise InvalidArgument("no consumer: set ChangesOptions.consumer")
        now_s = time.time()
        out: dict[str, ConsumerHold | None] = {}
        for s in self.maps.read_latest().shards:
            holds = consumer_holds(ManifestStore(self.store, s.db_path), now_s)
            out[s.db_path] = next((h for h in holds if h.name == self.consumer), None)
        return out

    def _release(self, db_path: str) -> None:
        """Delete the consumer's hold on ``db_path`` when it has one (one manifest read)."""
        assert self.consumer is not None
        name = CONSUMER_PREFIX + self.consumer
        manifests = ManifestStore(self.store, db_path)
        try:
            if not any(c.name == name for c in manifests.read_latest().manifest.checkpoints):
                return
            release(manifests, self.consumer)
        except (ObjectNotFound, DatabaseNotFound, DatabaseDestroyed):
            pass  # deleted by the GC: it holds nothing

    def earliest(self) -> TableCursor:
        """The table cursor before its first change: the first shard map's shards, each from
        its start (WAL SST 1), so the feed follows every rescale since through the origin
        records (unlike ``since=None``, which starts at the latest map's shards and, with
        ``bootstrap``, snapshots a rescale target's inherited rows). ChangesCollected once
        the first map is gone."""
        try:
            m = self.maps.read(FIRST_ID)
        except ObjectNotFound:
            raise ChangesCollected(
                self.path, "the table's first shard map is gone: start from since=None"
            ) from None
        return TableCursor(m.id, tuple((self._rel(s.db_path), None) for s in m.shards))

    def _until_map(self, since: TableCursor | None, until: TableCursor) -> ShardMap:
        """The shard map ``until`` was planned on; CursorInvalid unless its shards are that
        map's (a cursor :meth:`tail` made) and ``since`` is not planned on a later map."""
        if since is not None and since.map_id > until.map_id:
            raise CursorInvalid(f"until (map {until.map_id}) is before since (map {since.map_id})")
        try:
            m = self.maps.read(until.map_id)
        except ObjectNotFound:
            raise ChangesCollected(
                self.path,
                f"shard map {until.map_id} of the until cursor is gone (the table GC collected it)",
            ) from None
        live = {self._rel(s.db_path) for s in m.shards}
        if {rel for rel, _ in until.shards} != live or not all(
            isinstance(c, Cursor) for _, c in until.shards
        ):
            raise CursorInvalid(
                "an until cursor names the shards of its map, each at a cursor (use tail())"
            )
        return m

    # ---- planning ---------------------------------------------------------------------------
    def _rel(self, db_path: str) -> str:
        prefix = self.path.rstrip("/") + "/"
        if not db_path.startswith(prefix):
            raise CursorInvalid(f"database {db_path!r} is not under table {self.path!r}")
        return db_path[len(prefix) :]

    def _abs(self, rel: str) -> str:
        return join(self.path, rel)

    def _plan(
        self, m: ShardMap, since: TableCursor | None
    ) -> tuple[dict[str, Cursor | str | None], list[str], list[str]]:
        """What a call after ``since`` reads on map ``m``: each database's entry (the
        cursor's, or the map's shards from their start), the shards between the cursor's and
        the map's (parents first: read from manifest 1) and an overwrite's new shards."""
        current = {s.db_path for s in m.shards}
        entries: dict[str, Cursor | str | None] = {}
        if since is None:
            for s in m.shards:
                entries[s.db_path] = None
        else:
            for rel, c in since.shards:
                entries[self._abs(rel)] = c
        order: list[str] = []
        targets: list[str] = []
        seen = set(entries)

        def resolve(db_path: str, depth: int = 0) -> None:
            if db_path in seen:
                return
            if depth > 10_000:
                raise CursorInvalid("a table cursor's shards are no ancestors of the table's")
            origin = read_origin(self.store, db_path)
            if origin is None and db_path in current and depth == 0:
                seen.add(db_path)
                targets.append(db_path)  # an overwrite's: no origin (see _overwritten)
                return
            if origin is None:
                raise ChangesCollected(
                    self.path,
                    f"shard database {db_path!r} has no clone or union origin: the table was "
                    "overwritten after the cursor (its contents replaced, not changed), or the "
                    "cursor is another table's; start again with since=None",
                )
            parents = (
                [origin.parent]
                if isinstance(origin, CloneOrigin)
                else [p for p, _ in origin.sources]
            )
            for p in parents:
                resolve(p, depth + 1)
            seen.add(db_path)
            order.append(db_path)

        for s in m.shards:
            resolve(s.db_path)
        return entries, order, targets

    def _hold(self, m: ShardMap, entries: dict[str, Cursor | str | None], order: list[str]) -> None:
        """The consumer's holds for a call resuming at ``entries`` (see :meth:`_plan`): the
        retired shards it is past released (neither still read nor on the way), every live
        shard's hold moved (or registered) now, not when its turn comes (until then the GC
        would collect what the cursor still needs of it)."""
        current = {s.db_path for s in m.shards}
        needed = {p for p, v in entries.items() if v != DONE}.union(order)
        for p in dict.fromkeys([*m.retired, *entries]):
            if p not in needed and p not in current:
                self._release(p)
        for s in m.shards:
            c = entries.get(s.db_path)
            if s.db_path in entries and (c is None or isinstance(c, Cursor)):
                try:
                    self._feed(s.db_path, self.shard_options).advance(c or Cursor())
                except DatabaseDestroyed:
                    continue  # retired since ``m`` (a later map's rescale): its hold stays
                if c is None and _untouched(ManifestStore(self.store, s.db_path)):
                    # its hold keeps the whole WAL, and an ingest is marked for it from now
                    # on: read from WAL SST 1, not from a snapshot taken at its turn
                    entries[s.db_path] = Cursor()

    def _changes(
        self, since: TableCursor | None, until: TableCursor | None = None
    ) -> Iterator[TableChangeBatch]:
        m = self.maps.read_latest() if until is None else self._until_map(since, until)
        ends: dict[str, Cursor] = {}
        if until is not None:
            ends = {self._abs(rel): c for rel, c in until.shards if isinstance(c, Cursor)}
        current = {s.db_path: s for s in m.shards}
        if since is not None:
            self._check_ids(since)
        entries, order, targets = self._plan(m, since)
        known = {self._abs(rel): i for rel, i in since.ids} if since is not None else {}

        def cursor_now(changed: str | None = None, c: Cursor | str | None = None) -> TableCursor:
            if changed is not None:
                entries[changed] = c
            ids = []
            for p, v in entries.items():
                if isinstance(v, str) and v != DONE:  # an overwrite's state: no Cursor's id
                    if p not in known:
                        found = self._identity(p, create=p in current)
                        if found is None:
                            continue
                        known[p] = found
                    ids.append((self._rel(p), known[p]))
            return TableCursor(
                m.id, tuple((self._rel(p), v) for p, v in entries.items()), tuple(sorted(ids))
            )

        if self.consumer is not None:
            self._hold(m, entries, order)
        # 1. retired shards the cursor names, to their end
        for db_path, c in list(entries.items()):
            if db_path in current or c == DONE or is_clearing(c):
                continue
            yield from self._to_end(db_path, c, cursor_now)
        # 2. shards found between, from manifest 1 (to their end unless live)
        for db_path in order:
            start = self._start(db_path)
            entries[db_path] = start
            if db_path in current:
                continue
            yield from self._to_end(db_path, start, cursor_now)
        # 2b. an overwrite: every key of the replaced shards deleted, then the new shards
        if targets:
            for db_path in self._replaced(entries, current, m.retired):
                entries[db_path] = CLEARING
            for db_path in targets:
                entries[db_path] = SEEDING  # from its start: the rows of its build
            yield TableChangeBatch(empty_changes(), cursor_now(), "")
        for db_path, c in list(entries.items()):
            if isinstance(c, str) and is_clearing(c):
                yield from self._clear(db_path, c, cursor_now)
        # 3. the live shards, from their cursors
        for s in m.shards:
            c = entries[s.db_path]
            assert c != DONE
            if is_seeding(c):
                c = yield from self._seed(s.db_path, c, cursor_now)
            yield from self._shard(
                s.db_path, c, s.key_range, self.shard_options, cursor_now, ends.get(s.db_path)
            )
        # every shard after a done one has a cursor now: drop the done ones
        if any(v == DONE for v in entries.values()) and not any(
            is_clearing(v) for v in entries.values()
        ):
            for p in [p for p, v in entries.items() if v == DONE]:
                del entries[p]
            yield TableChangeBatch(empty_changes(), cursor_now(), "")

    def _identity(self, db_path: str, *, create: bool) -> str | None:
        """The change-feed identity of shard database ``db_path`` (created when ``create``: a
        live shard; else None when it has none)."""
        if create:
            return feed_identity(self.store, db_path)
        try:
            doc = json.loads(bytes(self.store.get(changes_identity_path(db_path)).data))
        except ObjectNotFound:
            return None
        except ValueError:
            return None
        found = doc.get("id") if isinstance(doc, dict) else None
        return found if isinstance(found, str) and DB_ID.match(found) else None

    def _check_ids(self, since: TableCursor) -> None:
        """CursorInvalid when a shard database ``since`` names by its identity (an overwrite's
        state entry) has another, or none while it exists: the cursor is another table's
        (docs/changes.md, "Whose cursor"). A database gone is left to the read (collected)."""
        for rel, want in since.ids:
            db_path = self._abs(rel)
            have = self._identity(db_path, create=False)
            if have == want:
                continue
            if have is None:
                try:
                    ManifestStore(self.store, db_path).read_latest()
                except (ObjectNotFound, DatabaseNotFound):
                    continue
            raise CursorInvalid(
                f"the table cursor is another table's: shard database {db_path!r} has "
                f"change-feed identity {have}, not {want}: pass the cursor this table's feed "
                "returned, or start again (since=None)"
            )

    def _replaced(
        self,
        entries: dict[str, Cursor | str | None],
        current: Mapping[str, object],
        retired: tuple[str, ...],
    ) -> list[str]:
        """The shards an overwrite replaced whose keys the consumer holds: the entries read to
        their end that no other entry descends from (an entry's keys are in its descendants
        once they have cursors). A shard the map lists as retired that is neither an entry nor
        an ancestor of one was a shard the consumer never saw (rescaled, then overwritten):
        ChangesCollected, rather than leave its keys undeleted."""
        old = [p for p, v in entries.items() if p not in current]
        ancestors: set[str] = set()
        todo = list(old)
        for _ in range(10_000):
            if not todo:
                break
            origin = read_origin(self.store, todo.pop())
            if origin is None:
                continue
            parents = (
                [origin.parent]
                if isinstance(origin, CloneOrigin)
                else [p for p, _ in origin.sources]
            )
            for p in parents:
                if p not in ancestors:
                    ancestors.add(p)
                    todo.append(p)
        unknown = [p for p in retired if p not in entries and p not in ancestors]
        if unknown:
            raise ChangesCollected(
                self.path,
                f"an overwrite replaced shard databases the cursor never read ({unknown[0]!r}, "
                "a rescale's target between the cursor and the overwrite): start again with "
                "since=None",
            )
        return [p for p in old if p not in ancestors]

    def _clear(
        self, db_path: str, state: str, cursor_now: _CursorNow
    ) -> Iterator[TableChangeBatch]:
        """A delete of every live key of the replaced shard ``db_path`` after the key ``state``
        names, in key order, in batches of ``batch_rows``; then its entry is done. The shard is
        fenced and flushed (an overwrite's seal), so its latest manifest holds all it has."""
        after = bytes.fromhex(state[1:]) or None
        try:
            stored = ManifestStore(self.store, db_path).read_latest()
            seq = stored.manifest.last_l0_seq
            for b in _scan(self.store, db_path, stored, after, self.options.batch_rows):
                rows = _deletes(b.column(0), seq)
                last = b.column(0)[b.num_rows - 1].as_py()
                yield TableChangeBatch(rows, cursor_now(db_path, CLEARING + last.hex()), db_path)
        except (ObjectNotFound, DatabaseNotFound) as e:
            raise ChangesCollected(
                self.path, f"replaced shard database {db_path!r} is gone: {e}"
            ) from e
        yield TableChangeBatch(empty_changes(), cursor_now(db_path, DONE), db_path)

    def _start(self, db_path: str) -> Cursor:
        """Where a rescale target's own changes start: after the rows of its manifest 1."""
        manifests = ManifestStore(self.store, db_path)
        try:
            first = manifests.read(1).manifest
        except ObjectNotFound:
            held = self._carried(manifests)
            if held is not None:
                carried = held.manifest
                return Cursor(carried.replay_after_wal_id + 1, carried.last_l0_seq)
            raise ChangesCollected(
                self.path,
                f"manifest 1 of shard database {db_path!r} is gone (GC collected it): where "
                "its own changes start is unknown; start again with since=None",
            ) from None
        return Cursor(first.replay_after_wal_id + 1, first.last_l0_seq)

    def _carried(self, manifests: ManifestStore) -> StoredManifest | None:
        """The manifest the consumer's checkpoint carried onto a rescale target pins (None: no
        consumer, or it was moved or is gone). The carry commits before the target is swapped
        in, so before any write of its own: its replay point and last seq are manifest 1's.
        A carried checkpoint's id is name-based (``carry_consumers``: UUID version 5, so that a
        resumed rescale adds the same one); a hold the feed moved has a random one (version 4),
        and may pin a manifest after writes of the target's own. An unregistered feed (a check
        probing a consumer's cursor without moving its holds) takes any consumer's carried
        checkpoint: every carry commits before the swap, so each pins a manifest with manifest
        1's replay point and last seq."""
        name = None if self.consumer is None else CONSUMER_PREFIX + self.consumer
        now = time.time()
        for c in manifests.read_latest().manifest.checkpoints:
            if c.name is None or not c.name.startswith(CONSUMER_PREFIX):
                continue
            if name is not None and c.name != name:
                continue
            if c.id.version == _NAME_BASED and not c.is_expired(now):
                try:
                    return manifests.read(c.manifest_id)
                except ObjectNotFound:
                    if name is not None:
                        return None
        return None

    def _seed(
        self, db_path: str, state: str, cursor_now: _CursorNow
    ) -> Generator[TableChangeBatch, None, Cursor]:
        """An overwrite's new shard from its start: the rows of its build (the first manifest
        that holds data: the overwrite's ingest) after the key ``state`` names, as snapshot
        rows in key order in batches of ``batch_rows``; returns where its WAL resumes after
        them (that manifest's replay point and last seq). The same rows every time while that
        manifest is there (a read between two cursors, a Spark micro-batch read again); a
        registered consumer's hold (carried at the overwrite's swap) keeps it and its SSTs.
        With no manifest holding data, its WAL from the start holds all it has. Resumed inside
        them (``s<id>.<hex>``), it reads on in manifest ``id``: ChangesCollected once that is
        gone, rather than rows of another manifest after the ones delivered."""
        resumed = seeding_state(state)
        manifests = ManifestStore(self.store, db_path)
        try:
            if resumed is None:
                built, known = _first_holding_data(manifests)
                if not known:
                    # the build's manifest is gone: a consumer's carried hold pins one with
                    # the same rows (committed before the swap); else it is collected
                    built = self._carried(manifests)
                    if built is None:
                        raise ObjectNotFound(
                            f"{db_path}: the first manifest holding data (the build)"
                        )
                after = None
            else:
                built = manifests.read(resumed[0])
                after = resumed[1]
            start = Cursor()
            if built is not None:
                m = built.manifest
                start = Cursor(m.replay_after_wal_id + 1, m.last_l0_seq)
                for b in _scan(self.store, db_path, built, after, self.options.batch_rows):
                    last = b.column(0)[b.num_rows - 1].as_py()
                    rows = change_rows(b, snapshot=True)
                    at = f"{SEEDING}{built.id}.{last.hex()}"
                    yield TableChangeBatch(rows, cursor_now(db_path, at), db_path)
        except (ObjectNotFound, DatabaseNotFound) as e:
            raise ChangesCollected(
                self.path,
                f"the overwrite's build of shard database {db_path!r} is gone (GC collected "
                f"it): {e}; start again with since=None",
            ) from e
        yield TableChangeBatch(empty_changes(), cursor_now(db_path, start), db_path)
        return start

    def _to_end(
        self, db_path: str, c: Cursor | str | None, cursor_now: _CursorNow
    ) -> Iterator[TableChangeBatch]:
        """A retired shard's feed to its end (it takes no more writes), then marked done. A
        registered consumer's hold on it stays until a call resumes past it (see
        :meth:`_changes`): the cursor persisted before this one may still need it."""
        unregistered = dataclasses.replace(self.options, consumer=None)
        if is_seeding(c):  # an overwrite's shard replaced before its build was all read
            c = yield from self._seed(db_path, c, cursor_now)
        yield from self._shard(db_path, c, None, unregistered, cursor_now)
        yield TableChangeBatch(empty_changes(), cursor_now(db_path, DONE), db_path)

    def _feed(self, db_path: str, options: ChangesOptions) -> ChangeFeed:
        return ChangeFeed(db_path, self.store, options, wal_url=self.wal_url)

    def _shard(
        self,
        db_path: str,
        c: Cursor | str | None,
        key_range: KeyRange | None,
        options: ChangesOptions,
        cursor_now: _CursorNow,
        end: Cursor | None = None,
    ) -> Iterator[TableChangeBatch]:
        """Shard ``db_path``'s batches after ``c`` (rows in ``key_range``), each with the
        table cursor naming its new cursor; with ``end``, only the rows ``end`` has delivered
        (:func:`delivered_by`), the last batch's cursor ``end``."""
        assert c != DONE
        feed = self._feed(db_path, options)
        if end is not None:
            try:
                feed.check_own(end)  # another database's end: CursorInvalid, as a since is
            except (ObjectNotFound, DatabaseNotFound) as e:
                raise ChangesCollected(
                    self.path, f"shard database {db_path!r} is gone (the table GC deleted it): {e}"
                ) from e
            if isinstance(c, Cursor) and c.snapshot is None:
                if (c.wal_id, c.seq) >= (end.wal_id, end.seq):
                    return
        last = c if isinstance(c, Cursor) else Cursor()
        try:
            for b in feed.changes(c, until=end):
                if end is not None and snapshot_past(b.rows, end):
                    raise ChangesCollected(
                        self.path,
                        f"shard {db_path!r} starts from a snapshot newer than its end in the "
                        f"until cursor ({end.encode()}): read without until, or from a cursor",
                    )
                rows = b.rows if key_range is None else _in_range(b.rows, key_range)
                last = b.cursor
                if end is not None:
                    rows = delivered_rows(rows, end)
                if end is not None and last.snapshot is None:
                    if (last.wal_id, last.seq) >= (end.wal_id, end.seq):
                        yield TableChangeBatch(rows, cursor_now(db_path, end), db_path)
                        return
                yield TableChangeBatch(rows, cursor_now(db_path, b.cursor), db_path)
        except (ObjectNotFound, DatabaseNotFound) as e:
            raise ChangesCollected(
                self.path, f"shard database {db_path!r} is gone (the table GC deleted it): {e}"
            ) from e
        if end is not None:
            if last.snapshot is not None or last.wal_id < end.wal_id:
                raise ChangesCollected(
                    self.path,
                    f"the feed of shard {db_path!r} ended at {last.encode()} before "
                    f"{end.encode()}, its end in the until cursor",
                )
            yield TableChangeBatch(empty_changes(), cursor_now(db_path, end), db_path)


def snapshot_past(rows: pa.RecordBatch, end: Cursor) -> bool:
    """Whether ``rows`` (``CHANGE_SCHEMA``) hold a row of a feed's bootstrap snapshot that
    ``end`` may not have delivered: the snapshot is of the latest manifest, perhaps newer than
    ``end``, and its rows fold every version up to it, so a read up to ``end`` cannot cut it.
    A row at or below ``end.seq`` was delivered by it; one above it may have been (from a WAL
    SST below ``end.wal_id``) or not (written after ``end``), which a snapshot row, with no WAL
    id, cannot tell: a read up to ``end`` must then be ChangesCollected, never yield it and
    hand out ``end``, after which ``since=end`` delivers the change again."""
    if not rows.num_rows:
        return False
    snap = rows.column(7)
    if not pc.any(snap).as_py():
        return False
    return bool(pc.max(rows.column(3).filter(snap)).as_py() > end.seq)


def shard_consumer(consumer: str) -> str:
    """The name under which a table's consumer ``consumer`` holds each shard database:
    :data:`SHARD_CONSUMER_PREFIX` and its name (InvalidArgument for a bad name, or one too
    long for a checkpoint's with the prefix)."""
    if not isinstance(consumer, str) or not consumer:
        raise InvalidArgument("a table change-feed consumer's name is a non-empty str")
    name = SHARD_CONSUMER_PREFIX + consumer
    ChangesOptions(consumer=name)  # checks it as a shard's consumer name
    return name


def _untouched(manifests: ManifestStore) -> bool:
    """Whether the database's latest manifest has nothing in L0 or below it yet (replay point
    and last L0 seq 0): its WAL from SST 1 holds every change it has."""
    m = manifests.read_latest().manifest
    return m.replay_after_wal_id == 0 and m.last_l0_seq == 0


def _holds_data(m: Manifest) -> bool:
    return bool(m.l0 or m.compacted or m.transactions)


def _first_holding_data(manifests: ManifestStore) -> tuple[StoredManifest | None, bool]:
    """The first manifest of the database, in id order, that holds data (None: none does),
    and whether that is known: False when a manifest before it (or, with none found, any) is
    gone, the GC having collected it. A later manifest holding data is then no stand-in for
    the first: it may hold writes after it too (review43)."""
    expected = FIRST_ID
    for entry in manifests.list():
        if entry.id != expected:
            return None, False
        expected += 1
        try:
            stored = manifests.read(entry.id)
        except ObjectNotFound:
            return None, False  # collected since the LIST
        if _holds_data(stored.manifest):
            return stored, True
    return None, True


def _scan(
    store: ObjectStore, db_path: str, stored: StoredManifest, after: bytes | None, size: int
) -> Iterator[pa.RecordBatch]:
    """The rows of the SSTs of ``stored`` after the key ``after`` (None: all), the newest
    version of each live key in key order, in non-empty batches of ``size`` at most."""
    frozen = Memtable()
    frozen.freeze()
    l0, runs, _ = build_handles(store, db_path, stored.manifest, None)
    state = DbState(stored, frozen, (), l0, runs)
    start = None if after is None else after + b"\x00"
    for b in state.scan(start, None, batch_size=size):
        if b.num_rows:
            yield b


def _deletes(keys: pa.Array, seq: int) -> pa.RecordBatch:
    """``CHANGE_SCHEMA`` deletes of ``keys`` at ``seq`` (the replaced shard's last)."""
    n = len(keys)
    return pa.RecordBatch.from_arrays(
        [
            keys,
            pa.nulls(n, pa.binary()),
            pa.array(["delete"] * n, pa.string()),
            pa.array(np.full(n, seq, dtype=np.uint64)),
            pa.nulls(n, pa.int64()),
            pa.nulls(n, pa.int64()),
            pa.nulls(n, pa.uint64()),
            pa.array(np.zeros(n, dtype=np.bool_)),
        ],
        schema=CHANGE_SCHEMA,
    )


def _in_range(rows: pa.RecordBatch, rng: KeyRange) -> pa.RecordBatch:
    """``rows`` whose key is in ``rng`` (a clone's copied WAL tail may hold its parent's other
    keys, at seqs its start cursor already skips: a guard, vectorised)."""
    if not rows.num_rows or (rng.start is None and rng.end is None):
        return rows
    keys = rows.column(0)
    mask = None
    if rng.start is not None:
        mask = pc.greater_equal(keys, pa.scalar(rng.start, pa.binary()))
    if rng.end is not None:
        below = pc.less(keys, pa.scalar(rng.end, pa.binary()))
        mask = below if mask is None else pc.and_(mask, below)
    return rows.filter(mask)


__all__ = [
    "DONE",
    "SHARD_CONSUMER_PREFIX",
    "TableChangeBatch",
    "TableChangeFeed",
    "TableCursor",
    "delivered_by",
    "delivered_rows",
    "shard_consumer",
]
