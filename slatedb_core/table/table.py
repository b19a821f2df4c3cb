"""``Table``: a sharded table, one database per contiguous key range: the duty SlateDB RFC 0004
leaves to "the client" ("it is the client responsibility to maintain the ranges associated with
SlateDB instances and supply them to Projection and Union"; docs/projection-and-union.md).

The map itself is :mod:`slatedb_core.table.shardmap`; rescaling is :mod:`slatedb_core.table.
rescale`; reads are :mod:`slatedb_core.table.reads`; snapshots :mod:`slatedb_core.table.snapshot`
and :mod:`slatedb_core.table.named_snapshots`.
This module holds the table together and routes writes:

* **Reads** go through one :class:`~slatedb_core.reader.reader.DbReader` per shard (see
  :mod:`~slatedb_core.table.reads`); a table opened on a :class:`TableSnapshot` reads a
  checkpoint of every shard instead.
* **Writes** go through ``writer(shard)``, the shard's :class:`~slatedb_core.writer.db.Db`.
  Opening it fences every earlier writer of that shard; *then* the latest map is read again, and
  a shard that is gone or sealed by a split/merge is refused (:class:`ShardMapConflict`) before
  anything is written. That order is what makes rescaling safe (see
  :mod:`slatedb_core.table.rescale`).

A ``Table`` holds the map version it read last. Reads look for a newer one once the last look
is older than ``TableOptions.reader.manifest_poll_interval`` (see :class:`Table` for how stale a
handle can be); :meth:`Table.refresh` looks now. A read that finds its shard's database destroyed
(a rescale finished meanwhile) reads the map again and re-routes.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import timedelta
from types import TracebackType

import numpy as np
import pyarrow as pa

from slatedb_core.errors import (
    DatabaseNotFound,
    InvalidArgument,
    ManifestVersionExists,
    MergeBlockedByBatch,
    ObjectAlreadyExists,
    ObjectVersionBehindBoundary,
    TableAlreadyExists,
    TableCreateIncomplete,
    VersionExists,
)
from slatedb_core.feed import ChangesOptions
from slatedb_core.feed.retention import ConsumerHold
from slatedb_core.keys import KeyRange
from slatedb_core.layout import join, shard_db_name
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import (
    DbOptions,
    check_instance,
    check_optional,
    check_optional_duration,
)
from slatedb_core.path_kind import refuse_database
from slatedb_core.store.objectstore import ObjectStore, check_store, validate_relative_path
from slatedb_core.table.changes import TableChangeBatch, TableChangeFeed, TableCursor
from slatedb_core.table.gc import TableGcStats, collect_table_garbage
from slatedb_core.table.ingest import AppVersion, ShardIngestStats
from slatedb_core.table.named_snapshots import (
    delete_named,
    read_named,
    release_named,
    snapshot_names,
    take_named,
)
from slatedb_core.table.options import TableOptions
from slatedb_core.table.overwrite import overwrite_table
from slatedb_core.table.reads import ShardReaders
from slatedb_core.table.rescale import RescaleContext, merge, resume, split
from slatedb_core.table.shardmap import (
    Shard,
    ShardMap,
    ShardMapStore,
    ValueEncoding,
    check_split_points,
    ranges_for,
)
from slatedb_core.table.snapshot import (
    TableSnapshot,
    refresh_snapshot,
    release_snapshot,
    snapshot_value_encoding,
    table_wal_url,
    take_snapshot,
)
from slatedb_core.table.writers import open_shard_writer
from slatedb_core.writer.db import Db

__all__ = ["CREATE_WAIT", "Table"]

CREATE_WAIT = timedelta(seconds=5)
"""How long :meth:`Table.open_or_create` waits for the shard map of a create it lost to."""


class Table:
    """A sharded table. Use :meth:`create` or :meth:`open`; thread-safe; close when done.

    How stale a live handle's reads can be (docs/projection-and-union.md, "A live table
    handle"): with ``p = options.reader.manifest_poll_interval``, a read (get, get_many, scan,
    scan_arrow) that starts at time t reads a shard map at least as new as the latest one at
    t - p, and each shard through a reader at most about p behind that shard's writes (its own
    poll). So after a split, merge or overwrite by another handle, writes acknowledged on the new
    shards are seen by this handle's reads within about 2p, without :meth:`refresh`; and a
    retired shard's reader (and its checkpoint, which keeps the GC off that shard) is closed
    within about p of the shard being destroyed, even by a handle that serves no reads. A table
    opened on a snapshot never changes its map."""

    def __init__(
        self,
        path: str,
        store: ObjectStore,
        options: TableOptions,
        maps: ShardMapStore,
        current: ShardMap,
        snapshot: TableSnapshot | None = None,
    ) -> None:
        self.path = path
        self.store = store
        self.options = options
        self.maps = maps
        self._snapshot = snapshot
        self._reads = ShardReaders(path, store, options.reader, snapshot, maps, current)
        self._closed = False

    # ---- creating and opening --------------------------------------------------------------
    @classmethod
    def create(
        cls,
        path: str,
        store: ObjectStore,
        split_points: Sequence[bytes] = (),
        options: TableOptions | None = None,
    ) -> Table:
        """Create a table of ``len(split_points) + 1`` shards tiling the key space. Raises
        InvalidArgument for split points that are not non-empty, strictly increasing bytes, and
        ObjectAlreadyExists if a table exists at ``path``. Of two creates at one path at once,
        exactly one wins; the other gets ObjectAlreadyExists, whatever its split points
        (tests/table/test_create_races.py).

        Order: the shard databases first (each created with its key range, which the engine
        enforces on every write), then shard map 1 by create-if-absent. A crash in between leaves
        databases that no map names; re-running the same create adopts them. A database found
        with another range is not adopted (ObjectAlreadyExists): two layouts differ first at
        some shard i, both need database i, and only one creates it."""
        validate_relative_path(path, what="table path")
        check_store(store)
        points = _checked_split_points(split_points)
        options = check_optional("options", options, TableOptions) or TableOptions()
        maps = ShardMapStore(store, path, max_attempts=options.map_commit_attempts)
        if maps.seq.latest_id() is not None:
            raise TableAlreadyExists(path, store.url, maps.seq.path(1))
        refuse_database(store, path)  # a table's shards never go inside a database
        shards = tuple(
            Shard(i, rng, join(path, shard_db_name(i + 1)), i + 1)
            for i, rng in enumerate(ranges_for(points))
        )
        for s in shards:
            _create_shard_db(store, s)
        initial = ShardMap(0, shards, time.time(), len(shards) + 1)
        try:
            committed = maps.create_initial(initial)
        except (VersionExists, ObjectVersionBehindBoundary):
            # another create committed version 1 first (behind the boundary: long enough ago
            # that the map moved on and its GC deleted version 1; our void copy is deleted)
            raise TableAlreadyExists(path, store.url, maps.seq.path(1)) from None
        return cls(path, store, options, maps, committed)

    @classmethod
    def open_or_create(
        cls,
        path: str,
        store: ObjectStore,
        split_points: Sequence[bytes] = (),
        options: TableOptions | None = None,
        *,
        wait: timedelta | None = None,
    ) -> tuple[Table, bool]:
        """The table at ``path``, created with ``split_points`` if there is none, and whether
        this call created it. An existing table is opened as it is, whatever its split points.

        Another create of other split points racing this one may win the create (this one
        gets ObjectAlreadyExists as soon as it meets one of its shard databases) before it has
        committed the shard map: the open is then retried, backing off, for up to ``wait``
        (default :data:`CREATE_WAIT`). A map that still does not exist raises
        :class:`TableCreateIncomplete`: that create crashed or is slow; run it again, which
        adopts the databases it made (:meth:`create`), then this call."""
        _checked_split_points(split_points)  # bad input is refused whether or not it is used
        waited = check_optional_duration("wait", wait, allow_zero=True)
        wait = CREATE_WAIT if waited is None else waited  # (timedelta(0) is falsy)
        try:
            return cls.open(path, store, options), False
        except DatabaseNotFound:
            pass
        try:
            return cls.create(path, store, split_points, options), True
        except ObjectAlreadyExists:
            pass  # another create got there first: its map may not be committed yet
        deadline = time.monotonic() + wait.total_seconds()
        pause = 0.05
        while True:
            try:
                return cls.open(path, store, options), False
            except DatabaseNotFound:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                time.sleep(min(pause, left))
                pause = min(pause * 2, 1.0)
        raise TableCreateIncomplete(
            f"table {path!r} in {store.url}: another create (of other split points) made shard "
            f"databases under {path!r} but committed no shard map within "
            f"{wait.total_seconds():g}s. If it is still running, try again; if it crashed, "
            "run that create again (the same split points adopt the databases it made), then "
            "this one"
        )

    @classmethod
    def open(
        cls,
        path: str,
        store: ObjectStore,
        options: TableOptions | None = None,
        *,
        snapshot: TableSnapshot | None = None,
    ) -> Table:
        """Open the table at ``path`` (DatabaseNotFound if there is none). With ``snapshot``,
        reads serve its checkpoints and its shard map; writes and rescaling are refused."""
        validate_relative_path(path, what="table path")
        check_store(store)
        options = check_optional("options", options, TableOptions) or TableOptions()
        check_optional("snapshot", snapshot, TableSnapshot)
        maps = ShardMapStore(store, path, max_attempts=options.map_commit_attempts)
        if snapshot is not None:
            if snapshot.table_path != path:
                raise InvalidArgument(
                    f"snapshot of table {snapshot.table_path!r} given to open {path!r}"
                )
            frozen = ShardMap(
                snapshot.shard_map_id,
                snapshot.shards,
                0.0,
                0,
                value_encoding=_known_encoding(maps, snapshot),
            )
            return cls(path, store, options, maps, frozen, snapshot)
        try:
            latest = maps.read_latest()
        except DatabaseNotFound:
            refuse_database(store, path)  # a database, opened as a table, says so
            raise
        return cls(path, store, options, maps, latest)

    # ---- the map ---------------------------------------------------------------------------
    @property
    def _map(self) -> ShardMap:
        """The map this handle holds (one place: its reads' state, :mod:`~slatedb_core.table.
        reads`)."""
        return self._reads.map

    @_map.setter
    def _map(self, m: ShardMap) -> None:  # tests put an older map back
        self._reads.install(m, force=True)

    @property
    def shard_map(self) -> ShardMap:
        """The map this handle holds: the latest it read (reads look again at most every
        ``options.reader.manifest_poll_interval``; :meth:`refresh` looks now). On a snapshot:
        the snapshot's map version (its id, shards and value encoding), for good."""
        return self._map

    @property
    def shards(self) -> list[Shard]:
        return list(self._map.shards)

    @property
    def snapshot_view(self) -> TableSnapshot | None:
        """The snapshot this table was opened on, if any."""
        return self._snapshot

    def shard_for(self, key: bytes) -> Shard:
        """The shard whose range holds ``key``."""
        return self._map.shard_for(key)

    @property
    def value_encoding(self) -> ValueEncoding | None:
        """How the table's values hold columns, if a write recorded it (None: plain values, or
        nothing recorded). On a snapshot: the encoding of the snapshot's own map version, not
        the latest's (an overwrite since may have recorded other columns), by the one lookup
        every read of a snapshot uses, :func:`~slatedb_core.table.snapshot.
        snapshot_value_encoding`; InvalidArgument if nothing tells it any more."""
        if self._snapshot is not None:
            return snapshot_value_encoding(self.maps, self._snapshot)
        return self._map.value_encoding

    def record_value_encoding(self, encoding: ValueEncoding | None) -> ValueEncoding | None:
        """Record how the table's values hold columns (None: they are plain values), unless it
        is recorded already: one map commit, then none. Returns ``encoding``; raises
        InvalidArgument if another kind is recorded (one table holds one kind of value).

        Every write that checks the kind of its values records it first (both Spark write
        paths, ``spark_jobs.value_columns``), so of a plain and an encoded write racing on an
        empty table exactly one passes: the record is one create-if-absent of the next map
        version, which finds the other's record if it came first. (A plain record is kept by
        later versions until an overwrite records an encoding; :meth:`writer` records nothing:
        it does not know what its bytes are.)"""
        self._check_writable()
        check_optional("encoding", encoding, ValueEncoding)

        def change(m: ShardMap) -> ShardMap | None:
            if encoding is None:
                if m.plain_values:
                    return None
                if m.value_encoding is not None:
                    raise InvalidArgument(
                        f"table {self.path!r} holds {m.value_encoding.format} values with "
                        f"columns {m.value_encoding.schema}, not plain values"
                    )
                return dataclasses.replace(m, created_at=time.time(), plain_values=True)
            if m.value_encoding == encoding:
                return None
            if m.plain_values:
                raise InvalidArgument(
                    f"table {self.path!r} holds plain values, not {encoding.format} values "
                    f"with columns {encoding.schema} (a plain write recorded it)"
                )
            if m.value_encoding is not None:
                raise InvalidArgument(
                    f"table {self.path!r} holds {m.value_encoding.format} values with columns "
                    f"{m.value_encoding.schema}, not {encoding.format} values with {encoding.schema}"
                )
            return dataclasses.replace(m, created_at=time.time(), value_encoding=encoding)

        self._install(self.maps.update(change))
        return encoding

    def route(self, keys: pa.Array | pa.ChunkedArray | Sequence[bytes]) -> pa.Int32Array:
        """The shard index of each key (vectorised; for repartitioning a batch by shard)."""
        return self._map.route(keys)

    def refresh(self) -> ShardMap:
        """Read the latest shard map now (reads do so on their own once the last look is older
        than the reader poll interval); close readers of shards that left it, once no read
        uses them, and bring the others up to date."""
        self._check_open()
        return self._reads.refresh()

    def _install(self, latest: ShardMap) -> None:
        self._reads.install(latest)

    # ---- reads -----------------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        """The value of ``key`` in its shard, or None."""
        self._check_open()
        return self._reads.get(key)

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """Values of ``keys`` (in order); one ``get_many`` per shard involved."""
        self._check_open()
        return self._reads.get_many(keys)

    def scan(
        self, start: bytes | None = None, end: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs with ``start <= key < end`` (None unbounded) across all shards, in
        key order."""
        self._check_open()
        return self._reads.scan(start, end)

    def scan_arrow(
        self, start: bytes | None = None, end: bytes | None = None, batch_size: int = 65536
    ) -> pa.RecordBatchReader:
        """The same as :meth:`scan`, as Arrow record batches of (key, value): the type
        ``Db.scan_arrow`` returns. Batches never span two shards."""
        self._check_open()
        return self._reads.scan_arrow(start, end, batch_size)

    def count(
        self, start: bytes | None = None, end: bytes | None = None, *, workers: int = 4
    ) -> int:
        """The number of keys :meth:`scan` would return for ``[start, end)``, counted from
        Arrow batches (no per-row Python), the shards in ``workers`` threads."""
        return sum(n for _, n in self.count_by_shard(start, end, workers=workers))

    def count_by_shard(
        self, start: bytes | None = None, end: bytes | None = None, *, workers: int = 4
    ) -> list[tuple[Shard, int]]:
        """:meth:`count` per shard overlapping ``[start, end)``, in key order, all of one map
        version (see :meth:`~slatedb_core.table.reads.ShardReaders.count`)."""
        self._check_open()
        return self._reads.count(start, end, workers)

    # ---- writes ----------------------------------------------------------------------------
    def writer(self, shard: int | Shard, options: DbOptions | None = None) -> Db:
        """Open the writer of ``shard`` (an index into the latest map this table read, or a
        ``Shard`` of some map version). It fences every earlier writer of the shard. Raises
        ShardMapConflict, without writing anything, if after fencing the latest map no longer
        has the shard or a split/merge has sealed it: re-read the map and re-route."""
        self._check_writable()
        check_optional("options", options, DbOptions)
        target = self._resolve(shard)
        db, latest = open_shard_writer(self.maps, target, options or self.options.writer)
        self._install(latest)
        return db

    def _resolve(self, shard: int | Shard) -> Shard:
        if isinstance(shard, Shard):
            return shard
        if isinstance(shard, bool) or not isinstance(shard, int | np.integer):
            raise InvalidArgument(f"shard must be an index or a Shard, got {type(shard).__name__}")
        shards = self._map.shards
        if not 0 <= int(shard) < len(shards):
            raise InvalidArgument(f"shard index {shard} out of range 0..{len(shards) - 1}")
        return shards[int(shard)]

    # ---- the change feed ---------------------------------------------------------------------
    def changes(
        self,
        since: TableCursor | str | bytes | None = None,
        options: ChangesOptions | None = None,
        *,
        until: TableCursor | str | bytes | None = None,
    ) -> Iterator[TableChangeBatch]:
        """Every committed change of the table after ``since`` (None: from each shard's start),
        shard by shard, each key's in order and once through splits and merges, with one
        combined cursor (:mod:`slatedb_core.table.changes`, docs/changes.md, "Tables"). With
        ``until`` (from :meth:`changes_tail`), only the changes up to it: the same rows
        every time (:meth:`TableChangeFeed.changes`)."""
        self._check_open()
        feed = TableChangeFeed(
            self.path, self.store, self.maps, options, wal_url=table_wal_url(self.options)
        )
        return feed.changes(since, until)

    def changes_tail(self) -> TableCursor:
        """The table cursor at the end of every live shard's WAL now
        (:meth:`TableChangeFeed.tail`): start a consumer from now, or end a read there."""
        self._check_open()
        feed = TableChangeFeed(
            self.path, self.store, self.maps, wal_url=table_wal_url(self.options)
        )
        return feed.tail()

    def changes_advance(
        self, cursor: TableCursor | str | bytes | None, options: ChangesOptions
    ) -> None:
        """Move the holds of the table change-feed consumer ``options.consumer`` to keep only
        what ``cursor`` still needs (:meth:`TableChangeFeed.advance`): call it once the changes
        up to ``cursor`` are committed downstream, so the GC may collect them before the next
        read resumes there. InvalidArgument without a consumer."""
        self._check_open()
        feed = TableChangeFeed(
            self.path, self.store, self.maps, options, wal_url=table_wal_url(self.options)
        )
        feed.advance(cursor)

    def changes_consumers(self, consumer: str) -> dict[str, ConsumerHold | None]:
        """The holds the table change-feed consumer ``consumer`` keeps on the live shard
        databases (by path; None where it holds none): what a registered
        ``changes(options=ChangesOptions(consumer=consumer))`` keeps for it on each shard
        (:meth:`TableChangeFeed.consumers`, docs/changes.md, "Tables"). Reads only."""
        self._check_open()
        feed = TableChangeFeed(
            self.path,
            self.store,
            self.maps,
            ChangesOptions(consumer=consumer),
            wal_url=table_wal_url(self.options),
        )
        return feed.consumers()

    # ---- snapshots -------------------------------------------------------------------------
    def snapshot(
        self, lifetime: timedelta | None = timedelta(hours=1), *, name: str | None = None
    ) -> TableSnapshot:
        """A checkpoint of every shard of the latest map (see :class:`TableSnapshot`), expiring
        after ``lifetime`` (None: never). If a rescale commits meanwhile, the checkpoints are
        dropped and taken again on the new map.

        With ``name`` (1-128 of ``[A-Za-z0-9._-]``), the snapshot is recorded under that name:
        :meth:`named_snapshot` finds it again, from any process. Taking a snapshot under a name
        already in use replaces the one it found and releases that one's checkpoints;
        :meth:`delete_snapshot` deletes the name (see :mod:`slatedb_core.table.named_snapshots`).
        A snapshot that may have been swept while being recorded (its taker stalled for about
        half an hour) is taken again; CommitRetriesExhausted if that keeps happening."""
        self._check_writable()
        attempts = self.options.map_commit_attempts
        wal_url = table_wal_url(self.options)  # the shards' WAL store (SlateDB RFC 0009)
        if name is None:
            snap, m = take_snapshot(self.maps, lifetime, None, attempts, wal_url=wal_url)
        else:
            snap, m = take_named(self.maps, lifetime, name, attempts, wal_url=wal_url)
        self._install(m)
        return snap

    def named_snapshot(self, name: str) -> TableSnapshot | None:
        """The snapshot last taken under ``name`` (None if there is none, or it was deleted).
        Its checkpoints may have expired since: reading them then raises CheckpointNotFound."""
        self._check_open()
        return read_named(self.store, self.path, name)

    def snapshot_names(self) -> list[str]:
        """The names of the table's snapshots, sorted."""
        self._check_open()
        return snapshot_names(self.store, self.path)

    def refresh_snapshot(
        self, snapshot: TableSnapshot, lifetime: timedelta | None = timedelta(hours=1)
    ) -> None:
        """Extend the life of the snapshot's checkpoints to now + ``lifetime`` (None: never).
        Raises CheckpointNotFound if a checkpoint is gone or has expired (take a new one)."""
        self._check_open()
        refresh_snapshot(self.store, check_instance("snapshot", snapshot, TableSnapshot), lifetime)

    def release_snapshot(self, snapshot: TableSnapshot) -> None:
        """Delete the snapshot's checkpoints (those already gone are skipped). A snapshot taken
        under a name that still finds it (the same checkpoints) also deletes the name; a newer
        snapshot taken under that name meanwhile is left alone."""
        self._check_open()
        check_instance("snapshot", snapshot, TableSnapshot)
        release_named(self.maps, snapshot, self.options.map_commit_attempts)
        release_snapshot(self.store, snapshot)

    def delete_snapshot(self, name: str) -> TableSnapshot | None:
        """Delete the snapshot named ``name`` and release its checkpoints; returns it (None if
        no snapshot has that name: deleting is idempotent)."""
        self._check_open()
        return delete_named(self.maps, name, self.options.map_commit_attempts)

    # ---- rescaling -------------------------------------------------------------------------
    def split(self, shard_index: int, at: bytes) -> ShardMap:
        """Split shard ``shard_index`` at ``at`` into ``[start, at)`` and ``[at, end)``; see
        :func:`slatedb_core.table.rescale.split`."""
        self._check_writable()
        m = split(self._rescaling(), shard_index, at)
        self._install(m)
        return m

    def merge(self, shard_index: int, *, expected_map_id: int | None = None) -> ShardMap:
        """Merge shard ``shard_index`` with the next one; see
        :func:`slatedb_core.table.rescale.merge`."""
        self._check_writable()
        m = merge(self._rescaling(), shard_index, expected_map_id=expected_map_id)
        self._install(m)
        return m

    def overwrite(
        self,
        batches: Iterable[pa.RecordBatch],
        *,
        value_encoding: ValueEncoding | None = None,
        txn: AppVersion | None = None,
    ) -> list[ShardIngestStats]:
        """Replace the table's whole contents by the rows of ``batches`` (``key`` binary,
        ``value`` binary) in one step that readers see as before or after, never between:
        new shard databases swapped in through the shard map (docs/overwrite.md,
        :func:`slatedb_core.table.overwrite.overwrite_table`; Spark jobs use its plan/commit
        functions). ``value_encoding``: how the new values hold columns (None: plain values).
        ``txn``: an exactly-once batch; the overwrite is a no-op (every shard SKIPPED) when the
        table already records that version of its app or a later one. ShardMapConflict, with
        the table unchanged, if a split or merge got in the way."""
        self._check_writable()
        check_optional("value_encoding", value_encoding, ValueEncoding)
        stats = overwrite_table(
            self.path,
            self.store,
            batches,
            value_encoding=value_encoding,
            txn=txn,
            options=self.options.writer,
        )
        self.refresh()
        return stats

    def resume(self) -> ShardMap:
        """Finish every split/merge/overwrite a crashed run left pending (a pending overwrite
        is one whose run sealed the table), and soft-destroy retired shards that are not yet
        destroyed, and destroy the targets of cancelled overwrites; see
        :func:`slatedb_core.table.rescale.resume`. MergeBlockedByBatch, once all the rest is
        done, if a pending merge was refused (and cancelled) by a half-applied batch."""
        self._check_writable()
        try:
            m = resume(self._rescaling())
        except MergeBlockedByBatch:
            self.refresh()  # the rest was done: this handle sees it
            raise
        self._install(m)
        return m

    def _rescaling(self) -> RescaleContext:
        return RescaleContext(self.path, self.store, self.options, self.maps, self._map)

    def collect_garbage(
        self,
        min_age: timedelta = timedelta(hours=1),
        ingest_min_age: timedelta = timedelta(days=7),
    ) -> TableGcStats:
        """Delete the table's own garbage (the shards are databases: their GC is ``run_gc_once``
        on each shard path, and on each path of ``shard_map.retired``):

        * shard-map versions older than ``min_age`` (never the latest), behind the map's GC
          boundary, and likewise old versions of each named snapshot's record;
        * checkpoints of named snapshots that dead creators left on the shards (those the
          latest version of their name's record does not hold, once ``SWEEP_MIN_AGE`` old:
          :mod:`slatedb_core.table.named_snapshots`), names without a record included;
        * ingest leftovers under ``<table>/_ingest/`` older than ``ingest_min_age``: SSTs a
          zombie or crashed ingest attempt staged after (or without) its run's cleanup, the
          jobs' done markers and plan records. Any age is safe, 0 included: a job's plan record
          goes first, and a job without it never commits again (IngestJobExpired), so no job
          applies twice (:func:`slatedb_core.table.ingest_cleanup.collect_leftovers`). An age
          shorter than a running job fails that job instead (nothing of it applied twice; run
          it again), so the default outlives any job;
        * the target databases of cancelled overwrites, and of overwrites planned more than
          ``ingest_min_age`` ago and never sealed (cancelled first: such a job, if still
          running, fails at its seal; docs/overwrite.md, "Leftovers").
        """
        self._check_writable()
        return collect_table_garbage(self.maps, min_age, ingest_min_age)

    # ---- lifecycle -------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise InvalidArgument(f"table {self.path!r} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self._snapshot is not None:
            raise InvalidArgument(f"table {self.path!r} was opened on a snapshot: read only")

    def close(self) -> None:
        """Close the per-shard readers (deleting their checkpoints). Idempotent."""
        self._closed = True
        self._reads.close()

    def __enter__(self) -> Table:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Table({self.path!r}, shards={len(self._map.shards)}, map={self._map.id})"


# ---- helpers -------------------------------------------------------------------------------
def _checked_split_points(split_points: Sequence[bytes]) -> tuple[bytes, ...]:
    """``split_points`` checked (InvalidArgument unless non-empty, strictly increasing bytes)."""
    if isinstance(split_points, bytes | str) or not hasattr(split_points, "__iter__"):
        raise InvalidArgument("split_points must be a sequence of bytes, not one key")
    return check_split_points(split_points)


def _known_encoding(maps: ShardMapStore, snapshot: TableSnapshot) -> ValueEncoding | None:
    """The snapshot's value encoding for its frozen map; None when nothing tells it any more
    (:attr:`Table.value_encoding` then raises, saying so)."""
    try:
        return snapshot_value_encoding(maps, snapshot)
    except InvalidArgument:
        return None


def _create_shard_db(store: ObjectStore, shard: Shard) -> None:
    """The first manifest of a shard database, carrying its key range (a re-run finding the same
    database accepts it; one with another range is not ours)."""
    ms = ManifestStore(store, shard.db_path)
    rng = shard.key_range
    try:
        ms.create_initial(Manifest(key_range=None if rng == KeyRange() else rng.to_bytes_range()))
    except ManifestVersionExists:
        have = ms.read_latest().manifest
        if KeyRange.of(have.key_range) != rng:
            raise ObjectAlreadyExists(shard.db_path) from None
