"""The writer's bulk paths, which bypass the WAL: :meth:`WriterIngest.bulk_ingest` writes Arrow
data as SSTs directly, :meth:`WriterIngest.ingest_ssts` attaches SSTs encoded elsewhere (a Spark
ingest's staged SSTs); both commit the new SSTs in front of L0 with ONE fenced manifest update
(SlateDB RFC 0001, "Writes"), checked against the GC boundary inside every commit attempt
(:class:`~slatedb_core.writer.gc_safety.NewSsts`). ``Db`` (:mod:`slatedb_core.writer.db`) holds a
:class:`WriterIngest`, which calls the :class:`~slatedb_core.writer.engine.WriterEngine` it is
given for what needs the writer's state (seqs, the memtables, commits).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import time
import uuid
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core.checkpoints import checkpoint_change, writer_checkpoint
from slatedb_core.errors import InvalidArgument, MergeOperatorMissing
from slatedb_core.feed.ingests import mark_ingest
from slatedb_core.lsm.arrow_rows import arrow_entries, seq_range, split_for_ssts
from slatedb_core.lsm.entries import sort_dedup
from slatedb_core.lsm.memtable import ImmutableMemtable
from slatedb_core.lsm.merge_operator import MergeOperator, resolve_merge_operator
from slatedb_core.lsm.retention import Retention, retain
from slatedb_core.lsm.row_model import ROW_SCHEMA, concat_rows, now_ms
from slatedb_core.manifest.model import (
    AppVersion,
    CompactedSst,
    Manifest,
    SstInfo,
    SstView,
    merge_transactions,
)
from slatedb_core.manifest.store import StoredManifest
from slatedb_core.options import CheckpointOptions, check_optional
from slatedb_core.sst import SstReader, encode_sst
from slatedb_core.sst.create import copy_sst
from slatedb_core.sst.format import KIND_MERGE, KIND_TOMBSTONE
from slatedb_core.store.objectstore import validate_relative_path
from slatedb_core.writer.engine import WriterEngine
from slatedb_core.writer.ttl import Ttl, check_ttl, is_plain, timestamp_columns
from slatedb_core.writer.types import BulkIngestStats

MAX_STATED_SEQ = (1 << 63) - 1
"""The highest seq :meth:`WriterIngest.ingest_ssts` takes in its ``seqs``."""


class _TxnGate:
    """The exactly-once decision of one ingest with a ``txn`` (:class:`AppVersion`), taken
    inside each attempt of its manifest update against the manifest that attempt builds on, so
    that racing ingests of one txn apply it once: :meth:`blocks` says the app already has that
    version or a later one recorded (and remembers it in ``found``); :meth:`apply` records the
    txn in the same update as the data."""

    def __init__(self, txn: AppVersion | None) -> None:
        self.txn = txn
        self.found: int | None = None

    def blocks(self, m: Manifest) -> bool:
        self.found = None
        if self.txn is None:
            return False
        recorded = m.app_version(self.txn.app_id)
        if recorded is not None and recorded >= self.txn.version:
            self.found = recorded
            return True
        return False

    def apply(self, m: Manifest) -> Manifest:
        if self.txn is None:
            return m
        return dataclasses.replace(m, transactions=merge_transactions(m.transactions, (self.txn,)))

    def stats(self, rows: int, ssts: int, size: int, manifest_id: int) -> BulkIngestStats:
        """The result: a no-op when :meth:`blocks` said so in the attempt that ended it."""
        if self.found is not None:
            return BulkIngestStats(0, 0, 0, manifest_id, True, self.found)
        return BulkIngestStats(
            rows, ssts, size, manifest_id, False, None if self.txn is None else self.txn.version
        )


class WriterIngest:
    """Bulk ingest of a writer; see the module docstring. A part of ``Db`` given the writer's
    :class:`~slatedb_core.writer.engine.WriterEngine`, whose methods reserve seqs, flush the
    older memtables, commit and install; it keeps no state of its own."""

    def __init__(self, engine: WriterEngine) -> None:
        self._engine = engine

    def bulk_ingest(
        self,
        data: pa.Table | pa.RecordBatch,
        key_column: str = "key",
        value_column: str = "value",
        *,
        ttl: Ttl = None,
        ttl_column: str | None = None,
    ) -> BulkIngestStats:
        """The work of :meth:`Db.bulk_ingest <slatedb_core.writer.db.Db.bulk_ingest>`, which
        says what it does."""
        entries = arrow_entries(data, key_column, value_column, self._engine.options)
        self._engine.check_range_array(entries.column(0))
        checked = check_ttl("ttl", ttl)
        if ttl_column is not None and not isinstance(ttl_column, str):
            raise InvalidArgument(f"ttl_column must be a column name, got {type(ttl_column)}")
        default = self._engine.options.default_ttl
        timestamps = None
        if ttl_column is not None or not is_plain(checked, default):
            timestamps = timestamp_columns(
                data, entries.column(2), ttl_column, checked, default, now_ms()
            )
        if entries.num_rows == 0:
            self._engine.check_usable()  # no manifest id is reported by a fenced writer
            return BulkIngestStats(0, 0, 0, self._engine.manifest.id)
        # Holding the L0 lock from the reservation to the commit keeps any newer memtable from
        # reaching L0 behind (i.e. older than) the ingested views.
        with self._engine.l0_lock:
            return self._bulk_ingest_locked(entries, timestamps)

    def _encode(self, part: pa.RecordBatch) -> bytes:
        return encode_sst(part, self._engine.sst_options)[0]

    def _bulk_ingest_locked(
        self, entries: pa.RecordBatch, timestamps: tuple[pa.Array, pa.Array] | None
    ) -> BulkIngestStats:
        n = entries.num_rows
        first, older = self._engine.reserve_seqs_and_freeze(n)
        batch = entries.set_column(1, "seq", seq_range(first, n))
        sorted_batch = sort_dedup(batch)
        if timestamps is not None:
            # each kept row's seq is first + its input row: its timestamps are found by it
            rows = pa.array(
                sorted_batch.column(1).to_numpy(zero_copy_only=False).astype(np.int64) - first
            )
            sorted_batch = pa.RecordBatch.from_arrays(
                [*sorted_batch.columns, timestamps[0].take(rows), timestamps[1].take(rows)],
                schema=ROW_SCHEMA,
            )
        ssts: list[CompactedSst] = []
        written = 0
        parts = list(split_for_ssts(sorted_batch, self._engine.options.l0_sst_size_bytes))
        for part in parts:
            blob, info = encode_sst(part, self._engine.sst_options)
            ssts.append(self._engine.write_sst(blob, info))
            written += len(blob)
        # encoding is deterministic: re-encode for a GC re-homing rather than hold every SST
        datas = [functools.partial(self._encode, part) for part in parts]
        stored = self._commit_in_front_of_l0(ssts, first + n - 1, datas, older, first_seq=first)
        return BulkIngestStats(n, len(ssts), written, stored.id)

    def _commit_in_front_of_l0(
        self,
        ssts: Sequence[CompactedSst],
        last_seq: int,
        datas: Sequence[Callable[[], bytes]],
        older: tuple[ImmutableMemtable, ...],
        also: Callable[[Manifest, int], Manifest] | None = None,
        gate: _TxnGate | None = None,
        *,
        first_seq: int,
    ) -> StoredManifest:
        """The commit of an ingest (the engine's ``l0_lock`` held, seqs reserved by
        :meth:`~slatedb_core.writer.engine.WriterEngine.reserve_seqs_and_freeze`, which froze
        the memtables ``older``): flush those, then ONE fenced manifest update putting ``ssts``
        (oldest first, already written) in front of L0, newest first, each checked against the
        GC boundary inside every attempt (``datas[i]`` returns the bytes of ``ssts[i]`` for a
        re-homing, see :class:`~slatedb_core.writer.gc_safety.NewSsts`); then the install of
        the new state.
        ``also``, if given, is applied in the same update after the SSTs' edit, so that both
        land or neither. ``gate``, if given, may refuse the update (an already applied txn:
        nothing is committed, the manifest it was decided on is returned) or records its txn in
        it. Returns the manifest committed. ``first_seq..last_seq`` are the ingest's seqs: the
        same update marks them for the change feed's registered consumers
        (:mod:`slatedb_core.feed.ingests`).

        A memtable frozen after the reservation holds writes newer than the ingest (seqs above
        its, which SlateDB reads as newer): it stays frozen until the commit is done and then
        reaches L0 in front of the ingested views, never behind them."""
        self._engine.flush_older(older)
        self._engine.check_usable()
        epoch = self._engine.epoch
        # Every write older than the ingest is now in a checked L0 SST: move the replay point
        # past it in the same commit, or a reader (and the next writer) would replay those older
        # values from the WAL on top of the ingested ones.
        confirmed = self._engine.confirmed_wal_id
        new = self._engine.new_ssts(list(ssts), list(datas))

        def change(m: Manifest, next_id: int) -> Manifest | None:
            if gate is not None:
                gate.found = None
            if new.committed_in(m):
                return None  # an earlier attempt's commit landed (an ambiguous answer)
            if gate is not None and gate.blocks(m):
                return None  # its txn is applied already: exactly once (docs/format.md)
            added = new.secure()
            views = tuple(SstView(view_id=s.id, sst_id=s.id) for s in reversed(added))
            m = dataclasses.replace(
                m,
                ssts=(*m.ssts, *added),
                l0=(*views, *m.l0),
                last_l0_seq=max(m.last_l0_seq, last_seq),
                replay_after_wal_id=max(m.replay_after_wal_id, confirmed),
            )
            m = writer_checkpoint(m, next_id, epoch)
            m = mark_ingest(m, next_id, first_seq, last_seq, len(added), time.time())
            if gate is not None:
                m = gate.apply(m)
            return m if also is None else also(m, next_id)

        stored = self._engine.commit(change)
        self._engine.install(stored)
        return stored

    def ingest_ssts(
        self,
        sources: Sequence[str],
        *,
        checkpoint: CheckpointOptions | None = None,
        seqs: Sequence[int] | None = None,
        txn: AppVersion | None = None,
    ) -> BulkIngestStats:
        """The work of :meth:`Db.ingest_ssts <slatedb_core.writer.db.Db.ingest_ssts>`, which
        says what it does (the contract, seqs and ``txn`` included)."""
        if isinstance(sources, str | bytes) or not isinstance(sources, Sequence):
            raise InvalidArgument(
                f"ingest_ssts takes a sequence of object paths, got {type(sources).__name__}"
            )
        paths = [validate_relative_path(p, what="SST source path") for p in sources]
        check_optional("checkpoint", checkpoint, CheckpointOptions)
        check_optional("txn", txn, AppVersion)
        stated = _stated_seqs(seqs, len(paths))
        if checkpoint is not None and checkpoint.source is not None:
            raise InvalidArgument("an ingest's checkpoint pins the ingest's manifest: no source")
        also = None
        cp_id = uuid.uuid4()
        if checkpoint is not None:
            # its id is chosen once: an attempt re-applied after a lost race, or settled after
            # an ambiguous answer, finds it rather than adding it twice
            also = checkpoint_change(checkpoint, time.time(), cp_id)
        self._engine.check_usable()
        gate = _TxnGate(txn)
        if gate.blocks(self._engine.manifest.manifest):  # a peek: decided again in the commit
            return gate.stats(0, 0, 0, self._engine.manifest.id)
        infos: list[tuple[str, SstInfo, int]] = []
        counts: list[int] = []  # rows of each of infos (0: unknown)
        simple: list[bool] = []  # the stats say no operand: one version per key after retain
        policy = self._ingest_retention()
        for i, path in enumerate(paths):
            reader = SstReader.open(self._engine.store, path)
            info = reader.info
            if reader.wal:  # its info has no key range: it is no empty SST
                raise InvalidArgument(
                    f"SST {path!r} is a WAL SST (rows in seq order): ingest_ssts takes SSTs of "
                    "key-sorted rows"
                )
            if policy.merge_operator is None:
                _check_no_operands(reader, path)
            # no rows: no key range, or a count of 0 (SlateDB's SSTs record none in their info,
            # ours 0 then, unknown; their stats count the rows)
            if (
                info.first_key is None
                or info.last_key is None
                or (reader.entry_count == 0 and (info.entry_count or reader.stats is not None))
            ):
                continue
            if self._engine.key_range is not None:
                for key in (info.first_key, info.last_key):
                    if not self._engine.key_range.contains(key):
                        raise InvalidArgument(
                            f"SST {path!r} holds key {key[:64]!r}, outside this database's "
                            f"range {self._engine.key_range}"
                        )
            infos.append((path, info, stated[i] if stated is not None else 0))
            counts.append(reader.entry_count)
            simple.append(reader.stats is not None and not reader.stats.num_merges)
        if not infos:
            if txn is None:
                return BulkIngestStats(0, 0, 0, self._engine.manifest.id)
            stored = self._commit_records((txn,), gate, also, None if also is None else cp_id)
            return gate.stats(0, 0, 0, stored.id)
        linkable = stated is not None and _ordered(infos)
        copies: list[CompactedSst] = []
        if linkable and infos[0][2] > self._engine.seq:  # a peek: checked again under the lock
            copies = [
                copy_sst(self._engine.store, path, self._engine.path, info)
                for path, info, _ in infos
            ]
        with self._engine.l0_lock:
            older = self._engine.reserve_through(infos[0][2], infos[-1][2]) if copies else None
            if older is not None:
                ssts = copies
                first_seq, last = infos[0][2], infos[-1][2]
                rows = sum(counts)
                datas = [functools.partial(self._read_object, path) for path, _, _ in infos]
            else:
                # copies made before a write moved past their seqs are garbage for GC
                depths = [
                    1 if simple[i] else _depth(self._retained(path, policy))
                    for i, (path, _, _) in enumerate(infos)
                ]
                first, older = self._engine.reserve_seqs_and_freeze(sum(depths))
                first_seq, last = first, first + sum(depths) - 1
                ssts, datas = [], []
                base = first
                for (path, _, _), depth in zip(infos, depths, strict=True):
                    encode = functools.partial(self._restamped, path, base, depth, policy)
                    base += depth
                    blob, info = encode()
                    ssts.append(self._engine.write_sst(blob, info))
                    datas.append(functools.partial(_bytes_of, encode))
                rows = sum(s.info.entry_count for s in ssts)
            stored = self._commit_in_front_of_l0(
                ssts, last, datas, older, also, gate, first_seq=first_seq
            )
        size = sum(s.info.size_bytes for s in ssts)
        return gate.stats(rows, len(ssts), size, stored.id)

    def record_transactions(self, records: Iterable[AppVersion]) -> None:
        """The work of :meth:`Db.record_transactions
        <slatedb_core.writer.db.Db.record_transactions>`, which says what it does."""
        if isinstance(records, str | bytes | AppVersion):
            raise InvalidArgument(
                f"record_transactions takes an iterable of AppVersion, got {type(records).__name__}"
            )
        wanted = tuple(records)
        for r in wanted:
            check_optional("records", r, AppVersion)
        if wanted:
            self._commit_records(wanted, _TxnGate(None), None, None)
        else:
            self._engine.check_usable()  # as any write of a closed or fenced writer

    def _commit_records(
        self,
        records: tuple[AppVersion, ...],
        gate: _TxnGate,
        also: Callable[[Manifest, int], Manifest] | None,
        cp_id: uuid.UUID | None,
    ) -> StoredManifest:
        """One fenced manifest update merging ``records`` (and applying ``also``), with no data;
        ``gate`` may refuse it (see :meth:`_commit_in_front_of_l0`). ``cp_id``: the id of the
        checkpoint ``also`` adds, whose presence shows that an earlier attempt landed."""
        with self._engine.l0_lock:
            self._engine.check_usable()

            def change(m: Manifest, next_id: int) -> Manifest | None:
                gate.found = None
                if cp_id is not None and m.checkpoint(cp_id) is not None:
                    return None  # an earlier attempt's commit landed (an ambiguous answer)
                if gate.blocks(m):
                    return None
                m = dataclasses.replace(m, transactions=merge_transactions(m.transactions, records))
                return m if also is None else also(m, next_id)

            stored = self._engine.commit(change)
            self._engine.install(stored)
        return stored

    def _ingest_retention(self) -> Retention:
        """What a re-encode keeps of a source (:func:`~slatedb_core.lsm.retention.retain`): no
        snapshot of this database reads the seqs the ingest gives, so a key keeps its newest
        version (and the operands folded onto it); expiry at this writer's clock when the ingest
        starts, taken once, so that a re-encode for a GC re-homing makes the same bytes."""
        op: MergeOperator | None = resolve_merge_operator(self._engine.options.merge_operator)
        return Retention(now_ms=now_ms(), merge_operator=op)

    def _retained(self, path: str, policy: Retention) -> pa.RecordBatch:
        """The rows of the source SST ``path`` (newest first per key, every column of the row
        model) that ``policy`` keeps."""
        table = SstReader.open(self._engine.store, path).read_all(timestamps=True)
        return retain(concat_rows(table.to_batches()) if table.num_rows else _empty(table), policy)

    def _restamped(
        self, path: str, first: int, depth: int, policy: Retention
    ) -> tuple[bytes, SstInfo]:
        """The source SST ``path`` encoded again with what ``policy`` keeps of it, each key's
        versions at seqs ``first + depth - 1`` (the newest) downwards: ``depth`` is the most
        versions any key keeps (:func:`_depth`), 1 but for operands with differing expiries.
        Deterministic (a GC re-homing encodes again and names the bytes with the first encode's
        info)."""
        kept = self._retained(path, policy)
        if depth == 1:
            seqs = np.full(kept.num_rows, first, np.uint64)
        else:
            seqs = (first + depth - 1 - _ranks(kept)).astype(np.uint64)
        kept = kept.set_column(1, "seq", pa.array(seqs))
        # The source is read without a clock (SstReader's default): retain applies the ingest's
        # (docs/format.md, "SSTs and WAL SSTs"). A tombstone is written without an expiry.
        at = kept.schema.get_field_index("expire_ts")
        if at >= 0:
            dead = pc.equal(kept.column("kind"), KIND_TOMBSTONE)
            kept = kept.set_column(
                at,
                "expire_ts",
                pc.if_else(dead, pa.scalar(None, pa.int64()), kept.column("expire_ts")),
            )
        return encode_sst(kept, self._engine.sst_options)

    def _read_object(self, path: str) -> bytes:
        return self._engine.store.get(path).data


def _check_no_operands(reader: SstReader, path: str) -> None:
    """For a database without a merge operator: MergeOperatorMissing naming the first key of
    ``path`` holding an operand, if any (its stats say whether to look). Its operands could be
    neither folded by a re-encode nor read once linked (SlateDB RFC 0006: a database holding
    operands is opened with its operator)."""
    if reader.stats is not None and not reader.stats.num_merges:
        return
    for rows in reader.scan():  # batch by batch: one read-ahead group held at a time
        at = pc.index(rows.column("kind"), pa.scalar(KIND_MERGE, pa.uint8())).as_py()
        if at is not None and at >= 0:
            raise MergeOperatorMissing(rows.column("key")[at].as_py(), f" (ingest of {path!r})")


def _empty(table: pa.Table) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([c.combine_chunks() for c in table.columns], table.schema)


def _ranks(kept: pa.RecordBatch) -> npt.NDArray[np.int64]:
    """Each row's position among its key's rows (0: the newest) in key-sorted ``kept``."""
    n = kept.num_rows
    starts = np.ones(n, dtype=np.bool_)
    if n > 1:
        keys = kept.column(0)
        starts[1:] = pc.not_equal(keys.slice(1), keys.slice(0, n - 1)).to_numpy(
            zero_copy_only=False
        )
    first_row = np.flatnonzero(starts)
    rank: npt.NDArray[np.int64] = np.arange(n, dtype=np.int64) - first_row[np.cumsum(starts) - 1]
    return rank


def _depth(kept: pa.RecordBatch) -> int:
    """The most versions any key keeps in ``kept`` (at least 1: one seq per source)."""
    return max(1, int(_ranks(kept).max()) + 1) if kept.num_rows else 1


def _bytes_of(encode: Callable[[], tuple[bytes, SstInfo]]) -> bytes:
    return encode()[0]


def _stated_seqs(seqs: Sequence[int] | None, n: int) -> list[int] | None:
    if seqs is None:
        return None
    if isinstance(seqs, str | bytes) or not isinstance(seqs, Sequence):
        raise InvalidArgument(f"seqs must be a sequence of ints, got {type(seqs).__name__}")
    if len(seqs) != n:
        raise InvalidArgument(f"{len(seqs)} seqs for {n} sources")
    for s in seqs:
        if isinstance(s, bool) or not isinstance(s, int) or not 0 < s <= MAX_STATED_SEQ:
            raise InvalidArgument(f"a seq must be an int in [1, 2**63), got {s!r}")
    return list(seqs)


def _ordered(infos: Sequence[tuple[str, SstInfo, int]]) -> bool:
    """Whether the stated seqs order the sources as their list does: ascending, and equal only
    among sources whose key ranges are disjoint (SlateDB could not tell their versions apart)."""
    for (_, _a, sa), (_, _b, sb) in itertools.pairwise(infos):
        if sb < sa:
            return False
    groups: dict[int, list[SstInfo]] = {}
    for _, info, s in infos:
        groups.setdefault(s, []).append(info)
    for group in groups.values():
        spans = sorted((g.first_key or b"", g.last_key or b"") for g in group)
        if any(nxt[0] <= prev[1] for prev, nxt in itertools.pairwise(spans)):
            return False
    return True
