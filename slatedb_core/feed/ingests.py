"""Ingest markers: how a change feed finds the rows an ingest put straight into L0, which are in
no WAL SST (docs/changes.md, "Ingested rows").

``Db.bulk_ingest`` and ``Db.ingest_ssts`` (and so a Spark ingest and a table overwrite's
commits) reserve a range of seqs ``first..last`` above every write before them and commit their
SSTs in front of L0 with one manifest update (:mod:`slatedb_core.writer.ingest`). In that same
update, :func:`mark_ingest` adds, for each registered consumer of the database (a live
``changes-consumer:<name>`` checkpoint, :mod:`slatedb_core.feed.retention`), a checkpoint named
``changes-ingest:<first>:<last>:<ssts>:<name>`` pinning the manifest being committed, expiring
with the consumer's own. The name says which seqs are the ingest's and that its SSTs are the
first ``ssts`` L0 views of the pinned manifest; the pin keeps those SSTs (and that manifest)
through a compaction that merges them and the GC passes after it, until the consumer's feed has
delivered them and its next :func:`~slatedb_core.feed.retention.hold_change` drops the marker
(or the consumer is released, or lapses). Being part of the data's commit, a marker exists
exactly when the ingest committed.

A database with no registered consumer gets no marker and pays nothing. An unregistered feed
(or a consumer's, before its registration) finds an ingest no marker names by its seq gap, or
by the latest manifest's ``last_l0_seq`` past every row it delivered, and reads it while the
manifest that committed it is there: the first whose ``last_l0_seq`` lands in the gap, its L0
SSTs at the front that the manifest before it lacks (:func:`unmarked_ingests`). Once the GC
collected that manifest, the one before it, or its SSTs (compacted away), it raises
:class:`~slatedb_core.errors.ChangesCollected` rather than go past it.
"""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core.errors import ChangesCollected, ObjectNotFound
from slatedb_core.feed.cursor import Cursor
from slatedb_core.layout import sst_path
from slatedb_core.lsm.row_model import ROW_SCHEMA, concat_rows
from slatedb_core.manifest.model import Checkpoint, Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.sst import SstReader
from slatedb_core.store.objectstore import ObjectStore

INGEST_PREFIX = "changes-ingest:"
"""The name of an ingest marker starts with this (see the module docstring)."""
_CONSUMER_PREFIX = "changes-consumer:"  # retention.CONSUMER_PREFIX (imported there from here)
LOOK_BACK = 16
"""Empty WAL SSTs (a writer's fencing ones) looked back through for the seq before a cursor."""
_MARKER_NS = uuid.UUID("6f3f7d0e-2b1c-4f47-9a57-2d7c0e6a43b1")


@dataclasses.dataclass(frozen=True, slots=True)
class IngestMark:
    """One ingest marker: the ingest's seqs ``first..last``, its SSTs (the first ``ssts`` L0
    views of the manifest ``manifest_id`` the marker pins), and the consumer it is kept for."""

    first: int
    last: int
    ssts: int
    consumer: str
    manifest_id: int


def marker_name(first: int, last: int, ssts: int, consumer: str) -> str:
    return f"{INGEST_PREFIX}{first}:{last}:{ssts}:{consumer}"


def parse_marker(cp: Checkpoint) -> IngestMark | None:
    """The marker ``cp`` is, or None when it is no ingest marker."""
    if cp.name is None or not cp.name.startswith(INGEST_PREFIX):
        return None
    parts = cp.name[len(INGEST_PREFIX) :].split(":", 3)
    if len(parts) != 4 or not all(p.isdigit() for p in parts[:3]):
        return None
    return IngestMark(int(parts[0]), int(parts[1]), int(parts[2]), parts[3], cp.manifest_id)


def mark_ingest(
    m: Manifest, next_id: int, first: int, last: int, ssts: int, now_s: float
) -> Manifest:
    """``m`` (the manifest an ingest's commit builds, manifest ``next_id``) with one marker per
    registered consumer (see the module docstring); ``m`` itself when there is none. Pure:
    the marker ids are derived from what they mark, so an attempt applied again after a lost
    race adds the same ones."""
    added = []
    for c in m.checkpoints:
        # an expired consumer checkpoint still in the manifest is marked too (its marker
        # expired with it): the consumer, by its own clock (behind ours, or read before a
        # stall), may still find the checkpoint live, revive it and trust its registration
        # record; the GC removes the checkpoint and its markers in one update
        # (slatedb_core.gc.expired_checkpoints), so a present checkpoint has every marker
        if c.name is None or not c.name.startswith(_CONSUMER_PREFIX):
            continue
        consumer = c.name[len(_CONSUMER_PREFIX) :]
        name = marker_name(first, last, ssts, consumer)
        added.append(
            Checkpoint(
                id=uuid.uuid5(_MARKER_NS, f"{name}:{next_id}"),
                manifest_id=next_id,
                create_time_s=int(now_s),
                expire_time_s=c.expire_time_s,
                name=name,
            )
        )
    if not added:
        return m
    return dataclasses.replace(m, checkpoints=(*m.checkpoints, *added))


def live_marks(m: Manifest, now_s: float, after_seq: int) -> list[IngestMark]:
    """The ingests of ``m``'s unexpired markers with rows above ``after_seq``, one per ingest
    (markers of several consumers name the same one), by seq."""
    found: dict[tuple[int, int], IngestMark] = {}
    for c in m.checkpoints:
        mark = parse_marker(c)
        if mark is None or c.is_expired(now_s) or mark.last <= after_seq:
            continue
        found.setdefault((mark.first, mark.last), mark)
    return [found[k] for k in sorted(found)]


def consumer_marks_change(m: Manifest, consumer: str, after_seq: int | None) -> Manifest:
    """``m`` without ``consumer``'s markers of ingests at or below ``after_seq`` (None: all of
    them, the consumer is released), so their pins go once it has delivered them."""
    keep = []
    for c in m.checkpoints:
        mark = parse_marker(c)
        if (
            mark is not None
            and mark.consumer == consumer
            and (after_seq is None or mark.last <= after_seq)
        ):
            continue
        keep.append(c)
    if len(keep) == len(m.checkpoints):
        return m
    return dataclasses.replace(m, checkpoints=tuple(keep))


def pruned_marks_last(m: Manifest, consumer: str, after_seq: int) -> int:
    """The last seq of the ingests whose markers :func:`consumer_marks_change` drops from ``m``
    for ``consumer`` at ``after_seq`` (0: none): once they are gone, a seq gap at or below it
    is no longer one a marker speaks for (docs/changes.md, "The registration record")."""
    last = 0
    for c in m.checkpoints:
        mark = parse_marker(c)
        if mark is not None and mark.consumer == consumer and mark.last <= after_seq:
            last = max(last, mark.last)
    return last


def extend_marks(
    checkpoints: Sequence[Checkpoint], consumer: str, expire: int | None
) -> tuple[Checkpoint, ...]:
    """``checkpoints`` with ``consumer``'s markers expiring at ``expire`` (its checkpoint's new
    expiry: a marker lives as long as the consumer it is kept for)."""
    out = []
    for c in checkpoints:
        mark = parse_marker(c)
        if mark is not None and mark.consumer == consumer and c.expire_time_s != expire:
            c = dataclasses.replace(c, expire_time_s=expire)
        out.append(c)
    return tuple(out)


@dataclasses.dataclass(frozen=True, slots=True)
class IngestRows:
    """An ingest's rows (ROW_SCHEMA, timestamps included) in seq order, and the replay point
    of the manifest that committed it: every WAL row older than the ingest is in a WAL SST at
    or below it (the ingest flushed the older memtables, and a flush waits for their WAL)."""

    mark: IngestMark
    replay_after_wal_id: int
    rows: pa.RecordBatch


def load_ingest(
    store: ObjectStore, manifests: ManifestStore, mark: IngestMark, after_seq: int
) -> IngestRows:
    """The rows of the ingest ``mark`` above ``after_seq``, read from the SSTs of the manifest
    its marker pins; ChangesCollected when they are gone (the marker lapsed)."""
    try:
        m = manifests.read(mark.manifest_id).manifest
        tables = []
        for view in m.l0[: mark.ssts]:
            reader = SstReader.open(store, sst_path(manifests.db_path, view.sst_id))
            tables.extend(reader.read_all(timestamps=True).to_batches())
    except ObjectNotFound as e:
        raise ChangesCollected(
            manifests.db_path,
            f"the SSTs of the ingest of seqs {mark.first}..{mark.last} are gone "
            f"(manifest {mark.manifest_id}): {e.path}",
        ) from e
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return IngestRows(mark, m.replay_after_wal_id, pa.RecordBatch.from_pylist([], ROW_SCHEMA))
    rows = concat_rows(tables)
    seq = rows.column(1)
    lo = max(after_seq + 1, mark.first)
    keep = pc.and_(
        pc.greater_equal(seq, pa.scalar(lo, seq.type)),
        pc.less_equal(seq, pa.scalar(mark.last, seq.type)),
    )
    rows = rows.filter(keep)
    # by seq; within one seq (an SST re-encoded at one seq) in key order, as it is stored
    order = pc.sort_indices(
        pa.table({"s": rows.column(1), "k": rows.column(0)}),
        sort_keys=[("s", "ascending"), ("k", "ascending")],
    )
    return IngestRows(mark, m.replay_after_wal_id, rows.take(order))


__all__ = [
    "INGEST_PREFIX",
    "IngestMark",
    "IngestMerge",
    "IngestRows",
    "consumer_marks_change",
    "extend_marks",
    "history_unknown",
    "live_marks",
    "load_ingest",
    "mark_ingest",
    "marker_name",
    "parse_marker",
    "pruned_marks_last",
    "unmarked_ingest_committed",
    "unmarked_ingests",
]


def unmarked_ingest_committed(
    manifests: ManifestStore, lo: int, hi: int, memo: dict[int, int | None] | None = None
) -> bool | None:
    """Whether an ingest committed seqs in ``lo..hi``, a seq gap between two WAL rows that
    L0 covers: False when the manifests prove none did, True when one did, None when the
    manifests that would tell are collected (see :func:`_commits_in`)."""
    found = _commits_in(manifests, lo, hi, {} if memo is None else memo)
    return None if found is None else bool(found)


def unmarked_ingests(
    manifests: ManifestStore, lo: int, hi: int, memo: dict[int, int | None] | None = None
) -> list[IngestMark] | None:
    """The ingests no marker names that committed seqs in ``lo..hi`` (a seq gap between two WAL
    rows that L0 covers), by seq, as marks :func:`load_ingest` reads: each one's SSTs are the L0
    views at the front of the manifest that committed it (:func:`_commits_in`) that the
    manifest before it does not have (an ingest's commit puts them there in one update,
    :mod:`slatedb_core.writer.ingest`). [] when the manifests prove none committed there; None
    when a manifest that would tell is collected (the caller raises ChangesCollected)."""
    found = _commits_in(manifests, lo, hi, {} if memo is None else memo)
    if found is None:
        return None
    out = []
    for before_id, commit_id, prev_seq, last in found:
        try:
            before = manifests.read(before_id).manifest
            commit = manifests.read(commit_id).manifest
        except ObjectNotFound:
            return None
        had = {v.view_id for v in before.l0}
        ssts = 0
        for view in commit.l0:
            if view.view_id in had:
                break
            ssts += 1
        if not ssts:
            return None  # no new L0 SST: not an ingest's commit we can read
        out.append(IngestMark(max(lo, prev_seq + 1), last, ssts, "", commit_id))
    return out


def _commits_in(
    manifests: ManifestStore, lo: int, hi: int, seen: dict[int, int | None]
) -> list[tuple[int, int, int, int]] | None:
    """``(id of the manifest before, id of the commit, the last_l0_seq before, the commit's
    last_l0_seq)`` of every manifest update whose ``last_l0_seq`` lands in ``lo..hi``, a seq
    gap between two WAL rows that L0 covers, by seq; None when a manifest that would tell is
    collected (``seen``: a memo of manifest id to ``last_l0_seq``, None: gone).

    An ingest holds the L0 lock from its reservation to its commit, and commits with one
    manifest update whose ``last_l0_seq`` is its last seq (every L0 row before it is older than
    the reservation, :mod:`slatedb_core.writer.ingest`); ``last_l0_seq`` never goes down
    (a flush and an ingest both set it to a max), and a flush sets it to a WAL row's seq, never
    one in the gap. So a manifest's ``last_l0_seq`` lands in ``lo..hi`` exactly when an ingest
    committed there (several ingests in a row: one manifest each); a reservation that never
    committed leaves two consecutive manifests whose ``last_l0_seq`` jumps from below it to
    past it (the next L0 commit holds only rows written after it). Binary searches over the
    listed manifest ids: one LIST and a few GETs per ingest, paid only at such a gap."""

    def l0_seq(manifest_id: int) -> int | None:
        if manifest_id not in seen:
            try:
                seen[manifest_id] = manifests.read(manifest_id).manifest.last_l0_seq
            except ObjectNotFound:
                seen[manifest_id] = None
        return seen[manifest_id]

    ids = [e.id for e in manifests.list()]
    if not ids:
        return None
    first = l0_seq(ids[0])
    if first is None or first >= lo:
        return None  # the manifest before the first one past lo is collected
    found: list[tuple[int, int, int, int]] = []
    below = 0  # ids[below] is under lo
    while True:
        above = len(ids)  # ids[above:] are at or past lo
        while above - below > 1:
            mid = (below + above) // 2
            s = l0_seq(ids[mid])
            if s is None:
                return None  # collected meanwhile
            if s < lo:
                below = mid
            else:
                above = mid
        if above == len(ids) or ids[above] != ids[below] + 1:
            return None  # nothing past lo yet (the gap is not covered), or a collected id
        s = l0_seq(ids[above])
        prev = l0_seq(ids[below])
        if s is None or prev is None:
            return None
        if s > hi:
            return found
        found.append((ids[below], ids[above], prev, s))
        if s >= hi:
            return found
        lo, below = s + 1, above


def history_unknown(manifests: ManifestStore) -> bool:
    """Whether the stored manifests may miss the commit of an ingest: the GC collected a
    manifest after which ``last_l0_seq`` grew (the first listed is not manifest 1 and has L0
    rows, or ids around a hole differ in ``last_l0_seq``). A feed with no cursor starts from a
    snapshot then (docs/changes.md, "Ingested rows"): reading the WAL from SST 1 it could meet
    an ingest no marker names and no manifest tells, after it yielded batches. One LIST and the
    manifests around each hole."""
    ids = [e.id for e in manifests.list()]
    if not ids:
        return True
    try:
        if ids[0] != 1 and manifests.read(ids[0]).manifest.last_l0_seq > 0:
            return True
        for a, b in itertools.pairwise(ids):
            if b != a + 1:
                before = manifests.read(a).manifest.last_l0_seq
                if manifests.read(b).manifest.last_l0_seq > before:
                    return True
    except ObjectNotFound:
        return True
    return False


def _filled(marks: Sequence[IngestMark], lo: int, hi: int) -> bool:
    """Whether the ingests ``marks`` fill every seq of ``lo..hi``."""
    pos = lo
    for m in sorted(marks, key=lambda m: m.first):
        if m.first > pos:
            return False
        pos = max(pos, m.last + 1)
    return pos > hi


def _merged(marks: Sequence[IngestMark], found: Sequence[IngestMark]) -> list[IngestMark]:
    """``marks`` and the ingests of ``found`` no mark of them names (one ingest: one last
    seq), by seq."""
    lasts = {m.last for m in marks}
    return sorted([*marks, *(m for m in found if m.last not in lasts)], key=lambda m: m.first)


def _gaps(seqs: npt.NDArray[np.uint64], start: int, before: int) -> list[int]:
    """The indexes ``j >= start`` of ``seqs`` (ascending) whose seq is more than one past the
    one before it (``before`` for ``start``): where a seq gap ends."""
    if start >= len(seqs):
        return []
    tail = seqs[start:]
    prevs = np.empty_like(tail)
    prevs[0] = before
    prevs[1:] = tail[:-1]
    return [int(j) + start for j in np.flatnonzero(tail > prevs + np.uint64(1))]


class IngestMerge:
    """The ingests of one feed call, merged into its WAL rows by seq.

    ``marks``: the ingests markers name after the cursor (read from a manifest read after the
    WAL LIST, whose ``last_l0_seq`` is ``l0_seq_after``). A seq gap between two WAL rows (our writer and
    SlateDB's hand out seqs one after another, so a gap is an ingest's reservation) is filled
    with the ingests in it; one that no marker fills is an ingest still in flight unless the
    manifest's ``last_l0_seq`` already covers it (an ingest holds the L0 lock from its
    reservation to its commit, so a later L0 commit means it ended, and a committed one's marker
    is in that manifest): the call stops before it and the next one goes on. A gap the
    manifest covers with no marker, all above ``marked_after``, is a failed ingest's for a
    registered consumer (every ingest committed above that seq since its registration is
    marked for it, :mod:`slatedb_core.feed.registrations`); any other (``marked_after`` None: an
    unregistered feed) is filled with the ingests the manifests that committed them tell
    (:func:`unmarked_ingests`; none: a failed ingest's reservation), and raises
    ChangesCollected there when those manifests are collected, rather than risk a gap. ``l0_seq_before``
    (the ``last_l0_seq`` of a manifest read before the LIST) ends the check that no ingest was
    left behind: every L0 row of that manifest is in a WAL SST listed, or an ingest's.
    ``wal_last_seq(id)``: the highest seq of WAL SST ``id`` (0: it has no rows; None: gone)."""

    def __init__(
        self,
        store: ObjectStore,
        manifests: ManifestStore,
        marks: list[IngestMark],
        marked_after: int | None,
        l0_seq_after: int,
        l0_seq_before: int,
        wal_last_seq: Callable[[int], int | None],
        wal_seqs: Callable[[int], npt.NDArray[np.uint64] | None] | None = None,
        until: Cursor | None = None,
    ) -> None:
        self.store = store
        self.manifests = manifests
        self.marks = marks
        self.marked_after = marked_after
        self.l0_seq_after = l0_seq_after
        self.l0_seq_before = l0_seq_before
        self.wal_last_seq = wal_last_seq
        self.wal_seqs = wal_seqs
        self.until = until
        self.passed = False
        """Whether :meth:`pieces` went past the gap of an ingest that may be in flight, for a
        read up to ``until`` (:meth:`_past_until`): no cursor past it may be handed out."""
        self._l0_seqs: dict[int, int | None] = {}  # manifest id: its last_l0_seq (None: gone)
        self._floors: dict[int, int | None] = {}  # cursor WAL id: _wal_seq_before's answer

    def pieces(
        self, cursor: Cursor, fetched: Iterator[tuple[int, pa.RecordBatch]]
    ) -> Iterator[tuple[int | None, int, int, pa.RecordBatch]]:
        """``(wal_id or None for an ingest, wal id of a cursor inside it, wal id of the cursor
        after it, rows)`` in seq order (see the class docstring)."""
        pending = deque(self.marks)
        seen = cursor.seq
        prev: int | None = None  # the seq of the WAL row before, in WAL order
        next_wal = cursor.wal_id
        for w, rows in fetched:
            next_wal = w + 1
            seqs = rows.column(1).to_numpy()
            start = int(np.searchsorted(seqs, cursor.seq, side="right")) if prev is None else 0
            if start:
                prev = int(seqs[start - 1])
            i = start
            for j in _gaps(seqs, start, cursor.seq if prev is None else prev):
                before = prev if j == start else int(seqs[j - 1])
                hi = int(seqs[j]) - 1
                if before is None:  # at the cursor: its seq may lag the WAL SSTs before it
                    lagging = self._lagging_ingests(cursor)
                    if lagging is None:
                        return  # an ingest may be in flight below them
                    if lagging:
                        pending = deque(_merged(list(pending), lagging))
                covered = []
                while pending and pending[0].first <= hi:
                    covered.append(pending.popleft())
                how = self._resolved(covered, hi, cursor.wal_id if before is None else None)
                if how is None:
                    gap_lo = (cursor.seq if before is None else before) + 1
                    if self._past_until(gap_lo, w):
                        continue  # its ingest, if it commits, comes after ``until``
                    cut = self._cut_at_until(gap_lo, hi, w)
                    if cut is not None:
                        # settle the part ``until`` delivered; the part above it is passed
                        covered = [m for m in covered if m.first <= cut]
                        hi = cut
                        how = self._resolved(covered, hi, cursor.wal_id if before is None else None)
                if how is None:
                    yield w, w, w, rows.slice(i, j - i)
                    return  # an ingest may be in flight in the gap: the next call goes on
                if before is None:
                    # a cursor's seq may lag the WAL SSTs before it (tail() gives L0's last
                    # seq): the gap starts after the last of their rows, where known
                    floor = self._wal_seq_before(cursor.wal_id, cursor.seq)
                    lo = max(cursor.seq, -1 if floor is None else floor) + 1
                else:
                    floor, lo = before, before + 1
                if how != "wal" and lo <= hi and not _filled(covered, lo, hi):
                    where = "before" if before is None else f"after {before}"
                    if self._unmarked_here(lo):
                        # no marker can speak for (all of) this gap: an unregistered feed's, or
                        # one from before the consumer's registration (it lapsed meanwhile)
                        if floor is None:  # its start unknown: a flush's seqs may be in it
                            raise self._unfollowed(hi, where)
                        covered = self._settle_unmarked(lo, hi, covered, where)
                    elif floor is not None:
                        covered = self._checked_unmarked(lo, hi, covered)
                if covered:
                    yield w, w, w, rows.slice(i, j - i)
                    i = j
                    for mark in covered:
                        got = load_ingest(self.store, self.manifests, mark, cursor.seq)
                        yield None, w, w, got.rows
            yield w, w, w + 1, rows.slice(i)
            if len(seqs):
                prev = int(seqs[-1])
                seen = max(seen, prev)
        if prev is None:  # no WAL row after the cursor: as at a gap at the cursor
            lagging = self._lagging_ingests(cursor)
            if lagging is None:
                return
            if lagging:
                pending = deque(_merged(list(pending), lagging))
        tail = list(pending)
        top = max([seen, *(m.last for m in tail)])
        flushed_before = prev is None and top < self.l0_seq_before
        if flushed_before:
            flushed_before = self._resolved([], self.l0_seq_before, cursor.wal_id) == "wal"
        if self.l0_seq_before > top and not flushed_before and self._unmarked_here(seen + 1):
            # L0 past every row delivered: ingests after the last WAL row, which the manifests
            # that committed them tell while they are there (else ChangesCollected below); with
            # no WAL row after the cursor, after the WAL SSTs before it (a lagging seq's rows)
            after: int | None = seen
            if prev is None:
                floor = self._wal_seq_before(cursor.wal_id, cursor.seq)
                after = None if floor is None else max(seen, floor)
            found = (
                None
                if after is None
                else unmarked_ingests(self.manifests, after + 1, self.l0_seq_before, self._l0_seqs)
            )
            if found is not None:
                tail = _merged(tail, found)
        for mark in tail:
            got = load_ingest(self.store, self.manifests, mark, cursor.seq)
            if got.replay_after_wal_id >= next_wal:
                return  # WAL rows older than it are in WAL SSTs not listed yet
            yield None, next_wal, next_wal, got.rows
            seen = max(seen, mark.last)
        if self.l0_seq_before > seen and not flushed_before:
            # (no WAL row after the cursor: L0's rows may be those of the WAL SSTs before it,
            # flushed since a tail() cursor was taken; the same look-back as a gap's)
            raise self._unfollowed(self.l0_seq_before, f"after {seen}")

    def _wal_seq_before(self, at_cursor: int, seq: int) -> int | None:
        """The last seq of the WAL SSTs before WAL id ``at_cursor`` (0: there are none, or only
        empty ones, a writer's fencing SSTs, back to id 1); ``seq`` (a cursor's) when the last
        non-empty one is gone but a stored manifest puts it in L0 with no row above ``seq``
        (the GC collected a WAL SST the cursor had read: review43); None when unknown: it is
        gone otherwise, or more than LOOK_BACK empty ones were looked back through."""
        if at_cursor in self._floors:
            return self._floors[at_cursor]
        floor: int | None = None
        for wal_id in range(at_cursor - 1, max(0, at_cursor - 1 - LOOK_BACK), -1):
            last = self.wal_last_seq(wal_id)
            if last is None and self._replayed_at_or_below(wal_id, seq):
                floor = seq
                break
            if last is None or last:
                floor = last
                break
        else:
            floor = 0 if at_cursor - 1 <= LOOK_BACK else None
        self._floors[at_cursor] = floor
        return floor

    def _lagging_ingests(self, cursor: Cursor) -> list[IngestMark] | None:
        """The unmarked ingests with seqs above a cursor's seq that lags the WAL SSTs before it
        (``tail()`` gives L0's last seq): an ingest in flight when the cursor was taken, whose
        seqs lie below a write after it already in the WAL, commits after the cursor and is
        in none of those WAL SSTs. They are the ones the manifests tell in the seq holes those
        WAL SSTs leave above the cursor's seq (a flush's ``last_l0_seq`` is a WAL row's seq,
        never one in a hole). [] when there is none (or a marker speaks for them); None when
        L0 does not cover a hole yet (an ingest may be in flight: the call delivers nothing),
        a registered consumer's hole no marker fills too (the marker of an ingest in flight is
        not committed yet; review43).
        ChangesCollected when a WAL SST or manifest that would tell is collected (review84)."""
        if self.wal_seqs is None:
            return []
        floor = self._wal_seq_before(cursor.wal_id, cursor.seq)
        if floor is None or floor <= cursor.seq:
            return []
        unmarked = self._unmarked_here(cursor.seq + 1)
        holes = self._wal_holes(cursor.wal_id, cursor.seq, floor)
        if holes is None:
            if unmarked:
                raise self._unfollowed(floor, f"before WAL SST {cursor.wal_id}")
            # a registered consumer's markers speak for its holes, once the ingests that may
            # be in flight in them ended: L0 past them (review43)
            if self.l0_seq_after < floor and not self._past_until(
                cursor.seq + 1, cursor.wal_id - 1
            ):
                return None
            return []
        found: list[IngestMark] = []
        for lo, hi in holes:
            if not unmarked and _filled(self.marks, lo, hi):
                continue
            if self.l0_seq_after < hi:
                if self._past_until(lo, cursor.wal_id - 1):
                    continue  # its ingest, if it commits, comes after ``until``
                cut = self._cut_at_until(lo, hi, cursor.wal_id - 1)
                if cut is None:
                    # an ingest may be in flight there, its marker (for a registered consumer)
                    # not committed yet: passing the hole would skip it (review43)
                    return None
                hi = cut  # the part above ``until``'s seq is passed
                if not unmarked and _filled(self.marks, lo, hi):
                    continue
            got = unmarked_ingests(self.manifests, lo, hi, self._l0_seqs)
            if got is None:
                if not unmarked:
                    continue  # the markers' word stands (as in _checked_unmarked)
                raise self._unfollowed(hi, f"before WAL SST {cursor.wal_id}")
            found.extend(got)
        return found

    def _past_until(self, lo: int, wal_id: int) -> bool:
        """Whether a read up to ``until`` goes past a seq gap from ``lo`` that L0 does not
        cover yet (an ingest may be in flight there) before a row of WAL SST ``wal_id``: it does
        when ``until`` has delivered that row (its WAL SST is below ``until``'s) and no seq of
        the gap (all above ``until.seq``): an ingest there commits after ``until``, whose
        ``last_l0_seq`` was below its seqs (it holds the L0 lock from its reservation to its
        commit), so its rows are not ``until``'s (``delivered_by``). Sets :attr:`passed`."""
        u = self.until
        if u is None or lo <= u.seq or wal_id >= u.wal_id:
            return False
        self.passed = True
        return True

    def _cut_at_until(self, lo: int, hi: int, wal_id: int) -> int | None:
        """For a read up to ``until``, a seq gap ``lo..hi`` before a row of WAL SST ``wal_id``
        that starts at or below ``until.seq`` and ends above it (ingests committed before
        ``until`` was taken, then one in flight then: one ingest at a time holds the L0 lock;
        review50): ``until.seq``, the end of the part the read must still settle, when L0
        covers that part and ``until`` has delivered the row; the part above it is passed as
        :meth:`_past_until` passes a whole gap (sets :attr:`passed`). None otherwise."""
        u = self.until
        if u is None or wal_id >= u.wal_id or not lo <= u.seq < hi or self.l0_seq_after < u.seq:
            return None
        self.passed = True
        return u.seq

    def _wal_holes(self, at_cursor: int, seq: int, floor: int) -> list[tuple[int, int]] | None:
        """The seq ranges in ``seq + 1..floor`` that no row of the WAL SSTs before WAL id
        ``at_cursor`` holds (read back to the first one whose lowest row is at most ``seq + 1``:
        WAL SSTs hold seqs in id order, or to one the oldest stored manifest says is in L0 at or
        below ``seq``: a clone's WAL starts past its parent's); None when one of them is gone."""
        assert self.wal_seqs is not None
        parts = []
        for wal_id in range(at_cursor - 1, 0, -1):
            seqs = self.wal_seqs(wal_id)
            if seqs is None:
                if self._replayed_at_or_below(wal_id, seq):
                    break
                return None
            parts.append(seqs[seqs > np.uint64(seq)])
            if len(seqs) and int(seqs[0]) <= seq + 1:
                break  # the older ones hold seqs below seqs[0] only: none above ``seq``
        held = np.unique(np.concatenate(parts)) if parts else np.empty(0, np.uint64)
        lows = np.concatenate([np.array([seq], np.uint64), held])
        highs = np.concatenate([held, np.array([floor + 1], np.uint64)])
        at = np.flatnonzero(highs > lows + np.uint64(1))
        return [(int(lows[i]) + 1, int(highs[i]) - 1) for i in at]

    def _replayed_at_or_below(self, wal_id: int, seq: int) -> bool:
        """Whether a stored manifest puts WAL SST ``wal_id`` (and every one before it) in L0
        with no row above ``seq``: its ``replay_after_wal_id`` is at or past the id, its
        ``last_l0_seq`` at or below ``seq``. The first listed manifest whose replay point is
        at or past the id is asked (both fields never go down, so a later one has no lower
        ``last_l0_seq``): a clone's first manifest for the WAL ids of its parent it never had
        (SlateDB RFC 0004, "Clones"), or the flush that put a WAL SST the GC collected in L0."""
        try:
            ids = [e.id for e in self.manifests.list()]
            lo, hi = 0, len(ids)  # the first index whose manifest's replay point is >= wal_id
            while lo < hi:
                mid = (lo + hi) // 2
                if self.manifests.read(ids[mid]).manifest.replay_after_wal_id >= wal_id:
                    hi = mid
                else:
                    lo = mid + 1
            if lo == len(ids):
                return False
            return self.manifests.read(ids[lo]).manifest.last_l0_seq <= seq
        except ObjectNotFound:
            return False

    def _unmarked_here(self, lo: int) -> bool:
        """Whether a seq gap from ``lo`` may hold an ingest no marker names for this feed: an
        unregistered feed's, or one starting at or below the consumer's registration."""
        return self.marked_after is None or lo <= self.marked_after

    def _settle_unmarked(
        self, lo: int, hi: int, covered: list[IngestMark], where: str
    ) -> list[IngestMark]:
        """A seq gap ``lo..hi`` that L0 covers and the markers ``covered`` do not fill, for a
        feed no marker can speak for: the ingests to deliver in it, by seq (``covered`` and
        those the manifests that committed them tell, :func:`unmarked_ingests`); what the
        manifests prove no ingest committed is a failed ingest's reservation. ChangesCollected
        when those manifests are collected."""
        found = unmarked_ingests(self.manifests, lo, hi, self._l0_seqs)
        if found is None:
            raise self._unfollowed(hi, where)
        return _merged(covered, found)

    def _checked_unmarked(self, lo: int, hi: int, covered: list[IngestMark]) -> list[IngestMark]:
        """A registered consumer's gap ``lo..hi`` above its registration that its markers do not
        fill: a failed ingest's reservation, unless the manifests that are still stored show an
        ingest committed there, whose marker another process of the same consumer pruned after
        this feed read the registration record (a stale record written back lowers
        ``marked_after``): then that ingest is delivered as an unmarked one is. The manifests
        collected, the markers' word stands (docs/changes.md, "The registration record")."""
        found = unmarked_ingests(self.manifests, lo, hi, self._l0_seqs)
        return covered if not found else _merged(covered, found)

    def _unfollowed(self, hi: int, where: str) -> ChangesCollected:
        return ChangesCollected(
            self.manifests.db_path,
            f"rows up to seq {hi} ({where}) are in L0 but in no WAL SST: an ingest "
            "(Db.ingest_ssts, bulk_ingest) no marker names; only a consumer registered "
            "(ChangesOptions.consumer) before the ingest committed, and live since, follows it; "
            "start again from a snapshot (since=None)" + self._why(),
        )

    def _why(self) -> str:
        if self.marked_after is None:
            return ""
        return (
            f" (this consumer's registration marks ingests above seq {self.marked_after} only: "
            "it registered after this cursor, or its checkpoint lapsed, consumer_lifetime)"
        )

    def _resolved(self, covered: list[IngestMark], hi: int, at_cursor: int | None) -> str | None:
        """How the seq gap ending at ``hi`` before a WAL row is settled: the
        ingests ``covered`` fill it to its end (``"marks"``); (a gap right after a cursor whose
        WAL id is ``at_cursor``) the last non-empty WAL SST before that id holds its seqs
        (``"wal"``: a cursor from ``tail()`` skips them; a writer's fencing WAL SST is empty,
        and a few are looked back through); a manifest's L0 is past it
        (``"l0"``: a failed ingest's, or one no marker names); None: not yet (an ingest may be
        in flight)."""
        if covered and max(m.last for m in covered) >= hi:
            return "marks"
        if at_cursor is not None:
            for wal_id in range(at_cursor - 1, max(0, at_cursor - 1 - LOOK_BACK), -1):
                last = self.wal_last_seq(wal_id)
                if last is None or last:  # gone, or its last seq
                    if last is not None and last >= hi:
                        return "wal"
                    break
        if self.l0_seq_after >= hi:
            return "l0"
        return None
