"""The LSM write buffer: a dict for single writes plus sorted Arrow runs for batches; a sorted
Arrow batch once frozen.

Why two structures: ``put`` sits on the hottest path of the engine and a dict assignment is the
cheapest thing Python offers, while a batch (``Db.put_arrow``, a large ``WriteBatch``, a replayed
WAL SST) is cheapest as one vectorised sort: it becomes a :class:`~slatedb_core.lsm.runs.Run`
(sorted, one row per key) without a Python step per row (see :mod:`slatedb_core.lsm.runs`). Each
dict entry maps ``key -> (seq, value)``; ``value is None`` marks a tombstone. Only the latest write
per key is *live*; replaced run rows stay in their run, marked dead for the writer, until a merge.

Order of the parts, newest first: the dict, then the runs newest first. A batch first turns the
dict's entries into a run of their own ("seals" it), so every dict entry is newer than every run
row: a get that finds its key in the dict stops there, and otherwise takes the newest run holding
it. A single put of a key a run holds marks that row dead (exact ``size_bytes``).

Concurrency contract (CPython with the GIL; free-threaded builds void it):

* **One writer at a time.** ``put``/``put_many``/``put_batch``/``freeze`` take no lock; the Db
  serialises its writers under its own lock and applies writes in seq order (the memtable does not
  compare seqs: the last write to a key wins).
* **Readers take no lock.** The dict and the runs are published together as one tuple
  (``_view``), swapped in one step; a run's arrays never change. ``get`` reads the view once; a
  dict ``get`` is atomic under the GIL and the stored tuples are immutable, so a reader sees a
  key's previous or new entry, never a torn one. A batch is published whole: small ones as a
  private dict merged in one C-level step (``dict.update`` from a dict, which allocates no
  GC-tracked object, so no collector, finalizer or thread switch can run inside it), large ones
  as a new view.
* **Several gets are not one snapshot**: a write batch can land between them. ``Db.get_many``
  therefore reads its keys' memtable entries under the writer lock; a ``DbReader`` never writes to
  a table it has published (its replayed tables are immutable).
* **Scans copy.** ``Memtable.scan`` snapshots the view and the dict (one ``dict.copy()``, atomic
  for the same reason), so a scan is a point-in-time view unaffected by later writes. (``list(d.items())``
  would not be safe: each item tuple it allocates can trigger the GC, hence a thread switch and a
  "dictionary changed size during iteration" error.) Runs are merged newest first by key, never by
  their ``live`` masks, which may already know about writes the snapshot does not hold.
* ``size_bytes``/``entry_count``/seq bounds read from other threads may lag by the write in flight.
* After ``freeze`` the memtable rejects writes (``TypeError``); it then serves reads until the Db
  swaps in the :class:`ImmutableMemtable`, which shares the same dict and runs, so there is no gap.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from types import MappingProxyType

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core.errors import InvalidArgument
from slatedb_core.lsm.entries import (
    ENTRY_SCHEMA,
    conform,
)
from slatedb_core.lsm.iterators import merge_sorted
from slatedb_core.lsm.memtable_fold import Entry, Parts, entry_value, merge_onto
from slatedb_core.lsm.merge_operator import MergeOperator
from slatedb_core.lsm.row_model import (
    KIND_MERGE,
    Version,
    concat_rows,
    has_merges,
    has_timestamps,
    now_ms,
    version_at,
)
from slatedb_core.lsm.runs import (
    ENTRY_OVERHEAD,
    RUN_RESIDENT_OVERHEAD,
    Run,
    add_run,
    build_run,
    kill_key,
    merge_live,
    newest_wins,
    normalised,
    runs_batch,
)
from slatedb_core.lsm.sorted_rows import (
    chunks,
    dict_batch,
    entries_batch,
    key_slice,
    newest_of,
    sorted_batch,
    total_length,
    unique_batch_order,
    unique_key_order,
)

SCAN_CHUNK_ROWS = 65536
# A put_many of at least this many rows becomes a run (below it, dict entries are cheaper).
RUN_MIN_ROWS = 4096
# Measured RSS of a dict entry beyond its key and value bytes (dict slot, tuple, int and bytes
# headers): what ``resident_bytes`` adds per entry; a run row costs RUN_RESIDENT_OVERHEAD.
DICT_RESIDENT_OVERHEAD = 320
_NO_SEQ = 1 << 64

Data = dict[bytes, Entry] | MappingProxyType[bytes, Entry]
Folded = tuple[Version, Parts | None]
"""A merge operand folded onto a key's entry: the new entry and the versions its flush keeps."""
View = tuple[Data, tuple[Run, ...]]


def _lookup(d: Data, runs: tuple[Run, ...], key: bytes) -> Entry | None:
    e = d.get(key)
    if e is not None or not runs:
        return e
    for r in reversed(runs):  # newest first: the first run holding the key has its latest entry
        i = r.find(key)
        if i >= 0:
            return r.entry(i)
    return None


def _live_in_runs(runs: tuple[Run, ...], key: bytes) -> Entry | None:
    """``key``'s live entry in ``runs`` (what :func:`kill_key` would kill), leaving it there."""
    for r in reversed(runs):
        i = r.find(key)
        if i >= 0 and r.live[i]:
            return r.entry(i)
    return None


def _lookup_many(d: Data, runs: tuple[Run, ...], keys: Sequence[bytes]) -> list[Entry | None]:
    found = list(map(d.get, keys))
    if not runs:
        return found
    for j, e in enumerate(found):
        if e is None:
            for r in reversed(runs):
                i = r.find(keys[j])
                if i >= 0:
                    found[j] = r.entry(i)
                    break
    return found


class Memtable:
    """The active memtable. See the module docstring for the threading contract."""

    __slots__ = (
        "_dict_only",
        "_frozen",
        "_max_seq",
        "_min_seq",
        "_parts",
        "_run_cost",
        "_run_rows",
        "_view",
        "_wide",
        "frozen_at_ms",
        "last_tick",
        "last_wal_id",
        "size_bytes",
    )

    def __init__(self) -> None:
        self._view: View = ({}, ())
        self._frozen: ImmutableMemtable | None = None
        self._min_seq = _NO_SEQ
        self._max_seq = -1
        self._run_rows = 0  # live rows in runs
        self._run_cost = 0  # RUN_RESIDENT_OVERHEAD for every row the runs hold, live or not
        # set once the dict holds a key too wide to sort as NumPy bytes (see runs.build_run):
        # it can no longer be sealed into a run, so batches go to the dict from then on
        self._dict_only = False
        self.size_bytes = 0
        self.last_wal_id = 0  # the highest WAL SST holding entries of this memtable; set by the Db
        # Rows with a TTL, a create_ts or a merge operand (issue 38): set once any entry is a
        # Version (batches are then built in ROW_SCHEMA), the newest create_ts written (the
        # clock tick SlateDB's flush expires rows at), and the versions a flush writes for keys
        # whose operands cannot be folded into one row (see slatedb_core.lsm.memtable_fold).
        self._wide = False
        self.last_tick: int | None = None
        self._parts: dict[bytes, Parts] = {}

    def put(self, key: bytes, seq: int, value: bytes | None) -> None:
        """Write one entry (``value=None`` is a tombstone); kept to a handful of bytecodes."""
        d, runs = self._view
        old = d.get(key)
        d[key] = (seq, value)  # type: ignore[index]  # a frozen memtable's proxy raises TypeError here
        if old is None and runs:
            old = kill_key(runs, key)
            if old is not None:
                self._run_rows -= 1
        if old is None:
            self.size_bytes += len(key) + ENTRY_OVERHEAD + (0 if value is None else len(value))
        else:
            if len(old) == 2:
                ov = old[1]
            else:  # a Version: its value, and the versions kept for the flush go
                ov = old[2]
                if self._parts:
                    self._parts.pop(key, None)
            self.size_bytes += (0 if value is None else len(value)) - (0 if ov is None else len(ov))
        if seq > self._max_seq:
            self._max_seq = seq
        if seq < self._min_seq:
            self._min_seq = seq

    def note_tick(self, now: int) -> None:
        """Rows without a timestamp written at clock ``now`` (ms), such as a replayed WAL SST's.
        SlateDB stamps every row with its write's tick and its flush expires rows at the newest
        one (``last_tick``, RFC 0003). The writer's own plain writes are not noted one by one:
        :meth:`freeze` takes the tick of the newest (the write paths' fast path)."""
        if self.last_tick is None or now > self.last_tick:
            self.last_tick = now

    def fold_versions(
        self, rows: Sequence[tuple[bytes, Version]], op: MergeOperator | None
    ) -> list[Folded | None]:
        """What :meth:`put_version` would leave for each of ``rows`` written in order (None for a
        row that is not a merge operand onto an entry), changing nothing: the merge operator (the
        application's code) runs here, so a write whose operand it refuses raises before any row
        of it is in the memtable (a write batch is atomic). Hand each result to
        :meth:`put_version` as ``folded``, in the same order, under the same lock."""
        staged: dict[bytes, tuple[Entry, Parts | None]] = {}
        out: list[Folded | None] = []
        for key, version in rows:
            if version.kind != KIND_MERGE:
                staged[key] = (version, None)
                out.append(None)
                continue
            old: Entry | None
            if key in staged:
                old, parts = staged[key]
            else:
                old = self.get(key)
                parts = self._parts.get(key) if self._parts else None
            if old is None:
                staged[key] = (version, None)
                out.append(None)
                continue
            folded = merge_onto(key, old, parts, version, op)
            staged[key] = folded
            out.append(folded)
        return out

    def put_version(
        self,
        key: bytes,
        version: Version,
        op: MergeOperator | None,
        folded: Folded | None = None,
    ) -> None:
        """Write one row with a timestamp or a merge operand. A merge operand is folded onto the
        key's entry (:func:`~slatedb_core.lsm.memtable_fold.merge_onto`, or ``folded`` from
        :meth:`fold_versions`); anything else replaces it, as :meth:`put` does. The operator
        runs before anything changes: if it raises, the key keeps its entry."""
        if self._frozen is not None:
            raise TypeError("memtable is frozen")
        d, runs = self._view
        assert isinstance(d, dict)
        old = d.get(key)
        in_run = False
        if old is None and runs:
            old = _live_in_runs(runs, key)
            in_run = old is not None
        entry: Version = version
        parts: Parts | None = None
        if version.kind == KIND_MERGE and old is not None:
            if folded is None:
                old_parts = self._parts.get(key) if self._parts else None
                folded = merge_onto(key, old, old_parts, version, op)  # may raise: nothing changed
            entry, parts = folded
        if in_run:
            kill_key(runs, key)
            self._run_rows -= 1
        if self._parts:
            self._parts.pop(key, None)
        if parts is not None:
            self._parts[key] = parts
        self._wide = True
        d[key] = entry
        value = entry.value
        if old is None:
            self.size_bytes += len(key) + ENTRY_OVERHEAD + (0 if value is None else len(value))
        else:
            ov = entry_value(old)
            self.size_bytes += (0 if value is None else len(value)) - (0 if ov is None else len(ov))
        if version.create_ts is not None and (
            self.last_tick is None or version.create_ts > self.last_tick
        ):
            self.last_tick = version.create_ts
        self._note_seqs(version.seq, version.seq)

    def put_rows(self, batch: pa.RecordBatch, op: MergeOperator | None) -> None:
        """Apply rows in write (seq) order, ROW_SCHEMA or ENTRY_SCHEMA: a batch without merge
        operands goes in as one run (:meth:`put_batch`), one with operands row by row (each
        operand folds onto what the rows before it left; WAL replay)."""
        if not has_merges(batch):
            self.put_batch(batch)
            return
        keys = batch.column(0).to_pylist()
        for i, key in enumerate(keys):
            v = version_at(batch, i)
            if v.kind != KIND_MERGE and v.expire_ts is None and v.create_ts is None:
                self.put(key, v.seq, v.value)
            else:
                self.put_version(key, v, op)

    def put_many(
        self, keys: Sequence[bytes], seqs: Sequence[int], values: Sequence[bytes | None]
    ) -> None:
        """Apply a write batch atomically for readers; later rows win."""
        if not len(keys) == len(seqs) == len(values):
            raise InvalidArgument("put_many: keys, seqs and values differ in length")
        if not keys:
            return
        if len(keys) >= RUN_MIN_ROWS and not self._dict_only:
            vals = pa.array(values, pa.binary())
            kinds = pc.cast(pc.is_null(vals), pa.uint8())
            batch = pa.RecordBatch.from_arrays(
                [pa.array(keys, pa.binary()), pa.array(seqs, pa.uint64()), kinds, vals],
                schema=ENTRY_SCHEMA,
            )
            self.put_batch(batch)
            return
        if self._frozen is not None:
            raise TypeError("memtable is frozen")
        fresh: dict[bytes, Entry] = dict(zip(keys, zip(seqs, values, strict=True), strict=True))
        row_bytes = sum(map(len, keys)) + sum(map(len, filter(None, values)))
        self._apply(fresh, len(keys), row_bytes)
        self._note_seqs(min(seqs), max(seqs))

    def put_batch(self, batch: pa.RecordBatch) -> None:
        """Bulk insert of an ENTRY_SCHEMA batch as one sorted run (see module docstring).

        Rows are applied in order, so with repeated keys the last row wins. ``kind`` decides
        tombstones, whatever ``value`` says.
        """
        if self._frozen is not None:
            raise TypeError("memtable is frozen")
        if has_timestamps(batch):
            if has_merges(batch):
                raise InvalidArgument("put_batch: merge operands go through put_rows")
            self._note_wide(batch)
        else:
            batch = conform(batch)
        if batch.num_rows == 0:
            return
        if self._parts:
            for k in set(batch.column(0).to_pylist()) & self._parts.keys():
                del self._parts[k]
        bounds = pc.min_max(batch.column(1))
        run = None if self._dict_only else build_run(batch)
        d, runs = self._view
        sealed = _seal(d, self._wide) if run is not None and d else None
        if run is None or (d and sealed is None):
            self._dict_only = True
            self._put_batch_dict(batch)
        else:
            before = self._run_rows
            added = run.live_bytes + ENTRY_OVERHEAD * run.rows
            if sealed is not None:  # its entries are counted already, and replaced no run row
                runs = (*runs, sealed)
                before += sealed.rows
            new_runs, freed = add_run(runs, run)
            after = sum(r.live_rows for r in new_runs)
            killed = before + run.rows - after
            self._view = ({} if sealed is not None else d, new_runs)
            self._run_rows = after
            self._run_cost = sum(r.rows for r in new_runs) * RUN_RESIDENT_OVERHEAD
            self.size_bytes += added - freed - ENTRY_OVERHEAD * killed
        self._note_seqs(bounds["min"].as_py(), bounds["max"].as_py())

    def _note_wide(self, batch: pa.RecordBatch) -> None:
        """A ROW_SCHEMA batch is coming in: entries may be Versions from now on."""
        self._wide = True
        tick = pc.max(batch.column(5)).as_py()
        if tick is not None and (self.last_tick is None or tick > self.last_tick):
            self.last_tick = tick

    def _put_batch_dict(self, batch: pa.RecordBatch) -> None:
        """``put_batch`` through dict entries (keys too wide for a run): one Python step a row."""
        batch = normalised(batch)
        key_col, seq_col, _, value_col = batch.columns[:4]
        row_bytes = total_length(key_col) + total_length(value_col)
        keys: list[bytes] = key_col.to_pylist()
        if has_timestamps(batch):
            entries: list[Entry] = [
                v if v.expire_ts is not None or v.create_ts is not None else (v.seq, v.value)
                for v in map(version_at, [batch] * batch.num_rows, range(batch.num_rows))
            ]
            fresh = dict(zip(keys, entries, strict=True))
        else:
            seqs: list[int] = seq_col.to_numpy(zero_copy_only=False).tolist()
            fresh = dict(zip(keys, zip(seqs, value_col.to_pylist(), strict=True), strict=True))
        self._apply(fresh, batch.num_rows, row_bytes)

    def _apply(self, fresh: dict[bytes, Entry], rows: int, row_bytes: int) -> None:
        """Publish prepared entries in one step, then account their size exactly.

        Readers must see a write batch whole or not at all: adopting ``fresh`` (empty memtable) or
        ``dict.update`` from a dict is a single C-level step that allocates no tracked objects, so no
        garbage collection, finalizer or thread switch can run in the middle of it. ``row_bytes``
        (key + value bytes of the ``rows`` input rows) is exact unless keys repeated within the
        batch, which only then costs a Python pass over ``fresh``. Run rows the entries replace
        are marked dead after publishing (a get finds the dict entry first).
        """
        if self._frozen is not None:
            raise TypeError("memtable is frozen")
        d, runs = self._view
        assert isinstance(d, dict)
        if len(fresh) != rows:
            row_bytes = sum(map(len, fresh)) + sum(
                len(v) for v in map(entry_value, fresh.values()) if v
            )
        if self._parts:
            for k in fresh.keys() & self._parts.keys():
                del self._parts[k]
        added = row_bytes + ENTRY_OVERHEAD * len(fresh)
        if not d and not runs:
            self._view = (fresh, runs)
        else:
            olds = list(map(d.get, fresh))
            d.update(fresh)
            if runs:
                for j, k in enumerate(fresh):
                    if olds[j] is None:
                        olds[j] = kill_key(runs, k)
                        if olds[j] is not None:
                            self._run_rows -= 1
            if any(olds):
                for k, o in zip(fresh, olds, strict=True):
                    if o is not None:
                        ov = entry_value(o)
                        added -= len(k) + ENTRY_OVERHEAD + (0 if ov is None else len(ov))
        self.size_bytes += added

    def _note_seqs(self, lo: int, hi: int) -> None:
        if hi > self._max_seq:
            self._max_seq = hi
        if lo < self._min_seq:
            self._min_seq = lo

    def get(self, key: bytes) -> Entry | None:
        """``(seq, value)`` with ``value=None`` for a tombstone, or a
        :class:`~slatedb_core.lsm.row_model.Version` for a row with a timestamp or a (folded)
        merge operand; None when the key is not here."""
        d, runs = self._view
        e = d.get(key)
        if e is not None or not runs:
            return e
        return _lookup(d, runs, key)

    def get_many(self, keys: Sequence[bytes]) -> list[Entry | None]:
        """``get`` of each key, all from one view of the memtable (atomic only if no write runs
        meanwhile: the Db calls it under its writer lock)."""
        d, runs = self._view
        return _lookup_many(d, runs, keys)

    @property
    def entry_count(self) -> int:
        return len(self._view[0]) + self._run_rows

    @property
    def resident_bytes(self) -> int:
        """Estimated memory held: ``size_bytes`` plus each dict entry's DICT_RESIDENT_OVERHEAD
        and each run row's RUN_RESIDENT_OVERHEAD (a ``put_arrow`` row costs far less than a
        ``put``'s dict entry); what the writer's memtable budget counts (issue 42, goal 3).
        Cheap: the writer asks after every write."""
        return self.size_bytes + len(self._view[0]) * DICT_RESIDENT_OVERHEAD + self._run_cost

    @property
    def min_seq(self) -> int | None:
        return None if self._min_seq == _NO_SEQ else self._min_seq

    @property
    def max_seq(self) -> int | None:
        return None if self._max_seq < 0 else self._max_seq

    def is_empty(self) -> bool:
        d, runs = self._view
        return not d and not runs

    def scan(
        self, start: bytes | None = None, end: bytes | None = None
    ) -> Iterator[pa.RecordBatch]:
        """Sorted ENTRY_SCHEMA batches of ``[start, end)`` as of the call (see module docstring)."""
        d, runs = self._view
        wide = self._wide
        snapshot = d.copy()
        sources: list[pa.RecordBatch] = []
        if snapshot:
            sources.append(dict_batch(snapshot, start, end, wide))
        for r in reversed(runs):  # newest first
            sources.append(key_slice(r.sorted_batch, start, end))
        sources = [b for b in sources if b.num_rows]
        if not sources:
            return iter(())
        if len(sources) == 1:
            return chunks(sources[0], SCAN_CHUNK_ROWS)
        if wide:  # entries may be merge operands: final per key, kept as they are
            return chunks(newest_of(sources), SCAN_CHUNK_ROWS)
        merged = list(merge_sorted([[b] for b in sources], drop_tombstones=False))
        return chunks(pa.concat_batches(merged), SCAN_CHUNK_ROWS)

    def freeze(self, last_write_ms: int | None = None) -> ImmutableMemtable:
        """Stop taking writes and hand the entries over; O(1), the sort happens on first use.

        Cheap because the Db calls it under its writer lock; the flusher thread pays for building
        the sorted batch. Calling it again returns the same ImmutableMemtable.
        ``last_write_ms``: the clock tick of the writer's newest write (every write of this
        memtable is at or before it), which the frozen table's ``last_tick`` takes if it is newer.
        """
        if self._frozen is None:
            data, runs = self._view
            assert isinstance(data, dict)
            tick = self.last_tick
            if last_write_ms is not None and (tick is None or last_write_ms > tick):
                tick = last_write_ms
            self._frozen = ImmutableMemtable(
                data,
                last_wal_id=self.last_wal_id,
                size_bytes=self.size_bytes,
                min_seq=self.min_seq,
                max_seq=self.max_seq,
                runs=runs,
                wide=self._wide,
                parts=self._parts,
                last_tick=tick,
                frozen_at_ms=now_ms(),
            )
            self._view = (MappingProxyType(data), runs)
        return self._frozen


class ImmutableMemtable:
    """A frozen memtable waiting for its flush: dict and runs for point reads, one sorted batch
    (built once) for scans and the flush."""

    __slots__ = (
        "_batch",
        "_data",
        "_lock",
        "_parts",
        "_runs",
        "_wide",
        "frozen_at_ms",
        "last_tick",
        "last_wal_id",
        "max_seq",
        "min_seq",
        "size_bytes",
    )

    def __init__(
        self,
        data: dict[bytes, Entry],
        *,
        last_wal_id: int,
        size_bytes: int,
        min_seq: int | None,
        max_seq: int | None,
        runs: tuple[Run, ...] = (),
        wide: bool = False,
        parts: dict[bytes, Parts] | None = None,
        last_tick: int | None = None,
        frozen_at_ms: int = 0,
    ) -> None:
        self._data = data
        self._runs = runs
        self._wide = wide
        self._parts = parts or {}
        self.last_tick = last_tick
        # the clock when writes stopped: at or after every write's tick, what the flush commits
        # as the manifest's last_l0_clock_tick (slatedb_core.writer.l0_flush)
        self.frozen_at_ms = frozen_at_ms
        self._batch: pa.RecordBatch | None = None
        self._lock = threading.Lock()
        self.last_wal_id = last_wal_id
        self.size_bytes = size_bytes
        self.min_seq = min_seq
        self.max_seq = max_seq

    @property
    def entry_count(self) -> int:
        return len(self._data) + sum(r.live_rows for r in self._runs)

    @property
    def resident_bytes(self) -> int:
        """Estimated memory held: dict entries cost far more than run rows."""
        return _resident((self._data, self._runs), self.size_bytes)

    @property
    def batch(self) -> pa.RecordBatch:
        """All entries sorted by key (ENTRY_SCHEMA; ROW_SCHEMA when some entry has a timestamp
        or is a merge operand), built once, by whichever thread asks first. One row per key:
        what reads see (see :meth:`l0_batch` for what a flush writes)."""
        b = self._batch
        if b is None:
            with self._lock:
                b = self._batch
                if b is None:
                    b = self._build()
                    self._batch = b
        return b

    def l0_batch(self) -> pa.RecordBatch:
        """The rows a flush to L0 writes: :attr:`batch`, with each key whose operands could not
        be folded into one row (different ``expire_ts``) as the versions SlateDB's flush would
        write, newest first (:mod:`slatedb_core.lsm.memtable_fold`)."""
        batch = self.batch
        if not self._parts:
            return batch
        keep = pc.invert(pc.is_in(batch.column(0), pa.array(list(self._parts), pa.binary())))
        keys = [k for k, vs in self._parts.items() for _ in vs]
        versions = [v for vs in self._parts.values() for v in vs]
        extra = entries_batch(pa.array(keys, pa.binary()), versions, True)
        rows = concat_rows([batch.filter(keep), extra])
        order = pc.sort_indices(rows, [("key", "ascending"), ("seq", "descending")])
        return rows.take(order)

    def l0_slices(self, rows: int) -> Iterator[pa.RecordBatch]:
        """The rows of :meth:`l0_batch` in order, as batches of at most ``rows`` rows whose
        concatenation is :meth:`l0_batch`, for a flush that encodes and writes its SST as the
        rows come (issue 42, goal 3).

        A table of runs (and a dict that seals into one) without timestamps or kept versions
        gathers each slice from the batches the runs index, so the flush never holds the sorted
        copy of all its rows (nor is one cached: :attr:`batch` stays unbuilt unless a read asks
        for it). Any other table is cut from :meth:`l0_batch`."""
        if rows < 1:
            raise InvalidArgument(f"l0_slices needs rows >= 1, got {rows}")
        plain = self._batch is None and not self._parts and not self._wide
        if plain and self._data and not self._runs:
            return _dict_slices(self._data, rows)
        merged = self._index() if plain else None
        if merged is None:
            return chunks(self.l0_batch(), rows)
        return _gathered(merged, rows)

    def _index(self) -> Run | None:
        """One run over every live entry (its index merged, rows not copied), or None when the
        entries are not all in runs of one key encoding (a dict that does not seal)."""
        data, runs = self._data, self._runs
        if data:
            if not runs:
                return None  # a dict alone: l0_batch sorts its entries once
            sealed = _seal(data, self._wide)
            if sealed is None:
                return None
            runs = (*runs, sealed)
        live = [r for r in runs if r.live_rows]
        if len(live) == 1:
            return live[0]
        return merge_live(live) if live else None

    def _build(self) -> pa.RecordBatch:
        # the live masks are final: live run entries and dict entries hold distinct keys
        data, runs = self._data, self._runs
        sealed = _seal(data, self._wide) if data and runs else None
        if sealed is not None or not data:
            return runs_batch((*runs, sealed) if sealed is not None else runs)
        parts = [r.live_batch() for r in runs if r.live_rows]
        keys = pa.array(list(data), pa.binary())
        parts.append(entries_batch(keys, list(data.values()), self._wide))
        return sorted_batch(concat_rows(parts))

    def get(self, key: bytes) -> Entry | None:
        return _lookup(self._data, self._runs, key)

    def get_many(self, keys: Sequence[bytes]) -> list[Entry | None]:
        return _lookup_many(self._data, self._runs, keys)

    def overlaid(self, newer: ImmutableMemtable) -> ImmutableMemtable:
        """A new table with this table's entries and ``newer``'s on top (``newer`` wins per key).

        Neither input changes, so states that hold them keep reading them: this is how a reader
        merges its replayed WAL tables without ever writing to a published one. Tables of runs
        merge as runs (vectorised); dict tables as dicts (one dict copy plus one pass over
        ``newer``); the sorted batch is built on first use, as for any frozen table.
        """
        lows = [s for s in (self.min_seq, newer.min_seq) if s is not None]
        highs = [s for s in (self.max_seq, newer.max_seq) if s is not None]
        last_wal_id = max(self.last_wal_id, newer.last_wal_id)
        lo, hi = (min(lows) if lows else None), (max(highs) if highs else None)
        a = build_run(self.batch) if self._runs or newer._runs else None
        b = build_run(newer.batch) if a is not None else None
        if a is not None and b is not None:
            run = newest_wins(a, b)
            size = run.live_bytes + ENTRY_OVERHEAD * run.rows
            return ImmutableMemtable(
                {}, last_wal_id=last_wal_id, size_bytes=size, min_seq=lo, max_seq=hi, runs=(run,)
            )
        data = self._dict()
        fresh = newer._dict()
        olds = list(map(data.get, fresh))
        data.update(fresh)
        size = self.size_bytes + newer.size_bytes
        for k, o in zip(fresh, olds, strict=True):
            if o is not None:
                ov = entry_value(o)
                size -= len(k) + ENTRY_OVERHEAD + (0 if ov is None else len(ov))
        return ImmutableMemtable(
            data,
            last_wal_id=last_wal_id,
            size_bytes=size,
            min_seq=lo,
            max_seq=hi,
            wide=self._wide or newer._wide,
        )

    def _dict(self) -> dict[bytes, Entry]:
        """A private dict of every entry."""
        if not self._runs:
            return self._data.copy()
        b = self.batch
        if has_timestamps(b) or has_merges(b):
            rows = range(b.num_rows)
            entries: list[Entry] = [version_at(b, i) for i in rows]
            return dict(zip(b.column(0).to_pylist(), entries, strict=True))
        vals = b.column(3).to_pylist()
        seqs = b.column(1).to_numpy(zero_copy_only=False).tolist()
        return dict(zip(b.column(0).to_pylist(), zip(seqs, vals, strict=True), strict=True))

    def scan(
        self, start: bytes | None = None, end: bytes | None = None
    ) -> Iterator[pa.RecordBatch]:
        """Zero-copy slices of the sorted batch covering ``[start, end)``, ~64k rows each."""
        batch = self.batch
        if start is None and end is None:
            return chunks(batch, SCAN_CHUNK_ROWS)
        return chunks(key_slice(batch, start, end), SCAN_CHUNK_ROWS)


def _seal(d: Data, wide: bool = False) -> Run | None:
    """The dict's entries as a run (None if a key is too wide for one, or an entry is a merge
    operand: runs hold none, so such a dict stays a dict)."""
    snapshot = d.copy()
    keys = pa.array(list(snapshot), pa.binary())
    batch = entries_batch(keys, list(snapshot.values()), wide)
    if wide and has_merges(batch):
        return None
    return build_run(batch)


def _dict_slices(d: Data, rows: int) -> Iterator[pa.RecordBatch]:
    """The entries of a frozen dict (single puts, no timestamps) in key order, ``rows`` at a
    time, each slice taken from one unsorted batch of them: the rows of ``sorted_batch``
    without its second full copy (issue 42, goal 3; a ~37 MiB memtable's flush held both)."""
    batch = entries_batch(pa.array(list(d), pa.binary()), list(d.values()))
    order = unique_batch_order(batch)
    for at in range(0, len(order), rows):
        yield batch.take(pa.array(order[at : at + rows]))


def _gathered(run: Run, rows: int) -> Iterator[pa.RecordBatch]:
    """``run``'s live entries in key order, ``rows`` at a time, each slice gathered from the
    run's chunks on its own. A take on a table of several chunks would first concatenate the
    chunks, a copy of all of them for every slice (measured: 30 MiB for a 64k-row take from
    three 100k-row chunks), so each chunk gives its rows of the slice and one more take puts
    them back in key order."""
    rowids = run.rowids if run.live_rows == run.rows else run.rowids[run.live]
    if len(run.chunks) == 1:
        (chunk,) = run.chunks
        for at in range(0, len(rowids), rows):
            yield chunk.take(pa.array(rowids[at : at + rows]))
        return
    starts = np.asarray(run.starts, dtype=np.int64)
    for at in range(0, len(rowids), rows):
        ids = rowids[at : at + rows]
        which = np.searchsorted(starts, ids, side="right") - 1
        pieces: list[pa.RecordBatch] = []
        where: list[npt.NDArray[np.intp]] = []
        for c in np.unique(which).tolist():
            mine = np.flatnonzero(which == c)
            pieces.append(run.chunks[c].take(pa.array(ids[mine] - starts[c])))
            where.append(mine)
        if len(pieces) == 1:
            yield pieces[0]
            continue
        gathered = concat_rows(pieces)
        del pieces
        order = np.empty(len(ids), dtype=np.intp)
        order[np.concatenate(where)] = np.arange(len(ids), dtype=np.intp)
        yield gathered.take(pa.array(order))


def _resident(view: View, size_bytes: int) -> int:
    d, runs = view
    return (
        size_bytes
        + len(d) * DICT_RESIDENT_OVERHEAD
        + sum(r.rows * RUN_RESIDENT_OVERHEAD for r in runs)
    )


__all__ = [
    "DICT_RESIDENT_OVERHEAD",
    "ENTRY_OVERHEAD",
    "RUN_MIN_ROWS",
    "Entry",
    "ImmutableMemtable",
    "Memtable",
    "unique_key_order",
]
