"""Manifest -> bytes, as SlateDB 0.17 stores a manifest (see :mod:`slatedb_core.manifest.codec`)."""

from __future__ import annotations

import os
import struct
import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import compress, islice
from operator import attrgetter, not_

import numpy as np
from ulid import ULID

from slatedb_core.errors import InvalidArgument
from slatedb_core.manifest import tables as tb
from slatedb_core.manifest.flatbuf import FbWriter, gc_paused
from slatedb_core.manifest.model import (
    MAX_PARALLEL_WRITES,
    WAL_STORE_ID_SIZE,
    Checkpoint,
    CompactedSst,
    Manifest,
    SortedRun,
    SstView,
)
from slatedb_core.manifest.sst_info import write_sst_info
from slatedb_core.store.checksum import crc32

FORMAT_VERSION = 2
"""The big-endian u16 in front of every manifest: SlateDB's ManifestV2 root (what 0.17 writes)."""
VERSION_PREFIX = struct.pack(">H", FORMAT_VERSION)
NONCE_SIZE = 16
U32_MAX = 2**32 - 1
_SST_GAP = (None,) * (tb.SST_OURS - 3)
_MANIFEST_GAP = (None,) * (tb.MANIFEST_OURS - 18)

DESTROYED_CHECKPOINT_NAME = "slatedb-lakehouse:destroyed"
"""How ``Manifest.destroyed_at_s`` is stored: a checkpoint of this name and id that never expires,
created at ``destroyed_at_s`` and pinning the manifest holding it. SlateDB keeps checkpoints when
it rewrites a manifest, so a database stays destroyed for this engine whoever writes next
(docs/format.md, "Manifest"). It never appears in ``Manifest.checkpoints``."""
DESTROYED_CHECKPOINT_ID = uuid.UUID("afd27f4e-8bc7-5097-a78f-006853901a22")
"""uuid5(NAMESPACE_URL, DESTROYED_CHECKPOINT_NAME)."""


class _Ids:
    """Ulid/Uuid tables, each distinct id written once and shared by every field naming it
    (an SST's id and its views' ``sst_id``): FlatBuffers allows a table to be referenced twice."""

    def __init__(self, w: FbWriter) -> None:
        self._w = w
        self._written: dict[bytes, int] = {}

    def of(self, raw: bytes) -> int:
        pos = self._written.get(raw)
        if pos is None:
            pos = self._written[raw] = self._w.pair(tb.ULID_TABLE, *tb.HALVES.unpack(raw))
        return pos

    def opt(self, u: ULID | None) -> int | None:
        return None if u is None else self.of(u.bytes)


def _write_sst(w: FbWriter, ids: _Ids, sst: CompactedSst) -> int:
    info = write_sst_info(w, sst.info)
    return w.table(
        tb.SST,
        (ids.of(sst.id.bytes), info, sst.format_version, *_SST_GAP, ids.opt(sst.original_id)),
    )


def _write_view(w: FbWriter, ids: _Ids, view: SstView) -> int:
    rng = None if view.visible_range is None else tb.write_range(w, view.visible_range)
    return w.table(tb.VIEW, (ids.of(view.view_id.bytes), ids.of(view.sst_id.bytes), rng))


def _write_run(w: FbWriter, ids: _Ids, run: SortedRun) -> int:
    views = w.tables([_write_view(w, ids, v) for v in run.views])
    return w.table(tb.RUN, (run.id, views))


def _u32(value: int, what: str) -> int:
    if not 0 <= value <= U32_MAX:
        raise InvalidArgument(f"{what} {value} does not fit SlateDB's u32 seconds")
    return value


def _expiry(expire_time_s: int) -> int:
    """SlateDB's u32 expiry: 0 means never, so an expiry at 0 is stored as 1 (still expired);
    one past the last second a u32 holds (2106-02-07) is stored as that second."""
    if expire_time_s < 0:
        raise InvalidArgument(f"expire time {expire_time_s} is negative")
    return min(max(1, expire_time_s), U32_MAX)


def _write_checkpoint(w: FbWriter, cp: Checkpoint) -> int:
    if cp.id == DESTROYED_CHECKPOINT_ID:
        raise InvalidArgument(f"checkpoint id {cp.id} is reserved for {DESTROYED_CHECKPOINT_NAME}")
    name = None if cp.name is None else w.string(cp.name)
    meta = None if cp.writer_epoch is None else w.table(tb.WRITER_CP, (cp.writer_epoch,))
    expire = 0 if cp.expire_time_s is None else _expiry(cp.expire_time_s)
    return w.table(
        tb.CP,
        (
            w.pair(tb.UUID_TABLE, *tb.HALVES.unpack(cp.id.bytes)),
            cp.manifest_id,
            expire,
            _u32(cp.create_time_s, "create time"),
            None if meta is None else tb.WRITER_CHECKPOINT,
            meta,
            name,
        ),
    )


_EXPIRY = attrgetter("expire_time_s")
_CHECKPOINT_ID = attrgetter("id.int")
"""A checkpoint's id as an int: a set of them hashes in C (``uuid.UUID.__hash__`` is Python)."""


def decodes_as_given(m: Manifest) -> bool:
    """Whether decoding ``m``'s bytes gives ``m`` back: not when an expiry had to be adjusted to
    SlateDB's u32 (:func:`_expiry`), the one field the encoding changes."""
    expiries = set(map(_EXPIRY, m.checkpoints))  # in C: a writer's commits have 1,000s
    expiries.discard(None)
    return not expiries or (1 <= min(expiries) and max(expiries) <= U32_MAX)


def _destroyed_marker(w: FbWriter, destroyed_at_s: int, manifest_id: int | None) -> int:
    if manifest_id is None:
        raise InvalidArgument("a destroyed manifest is encoded with its id (its marker pins it)")
    return w.table(
        tb.CP,
        (
            w.pair(tb.UUID_TABLE, *tb.HALVES.unpack(DESTROYED_CHECKPOINT_ID.bytes)),
            manifest_id,
            0,
            _u32(destroyed_at_s, "destroyed_at_s"),
            None,
            None,
            w.string(DESTROYED_CHECKPOINT_NAME),
        ),
    )


def _write_external_dbs(w: FbWriter, ids: _Ids, m: Manifest) -> int | None:
    if not m.external_dbs:
        return None
    out = []
    for e in m.external_dbs:
        final = e.final_checkpoint_id
        out.append(
            w.table(
                tb.EXT_DB,
                (
                    w.string(e.path),
                    w.pair(tb.UUID_TABLE, *tb.HALVES.unpack(e.source_checkpoint_id.bytes)),
                    None
                    if final is None
                    else w.pair(tb.UUID_TABLE, *tb.HALVES.unpack(final.bytes)),
                    w.tables([ids.of(s.bytes) for s in e.sst_ids]),
                ),
            )
        )
    return w.tables(out)


def _check(m: Manifest) -> None:
    """The checks of the whole manifest; :func:`_check_ssts` and :func:`_check_views` check
    what an encode writes anew (what it keeps was checked when it was written)."""
    if not 1 <= m.max_parallel_writes <= MAX_PARALLEL_WRITES:
        raise InvalidArgument(
            f"max_parallel_writes {m.max_parallel_writes} does not fit 1..{MAX_PARALLEL_WRITES}"
        )
    if m.wal_store_id is not None and len(m.wal_store_id) != WAL_STORE_ID_SIZE:
        raise InvalidArgument(f"a WAL store id is {WAL_STORE_ID_SIZE} bytes")
    if len(set(map(_CHECKPOINT_ID, m.checkpoints))) != len(m.checkpoints):
        raise InvalidArgument("manifest lists a checkpoint id twice")
    apps = [t.app_id for t in m.transactions]
    if apps != sorted(set(apps)):
        raise InvalidArgument("manifest transactions must be sorted by app id, one per app")


def _check_ssts(known: dict[bytes, None], new: Iterable[CompactedSst]) -> None:
    """Add the ids of ``new`` to ``known`` (the SSTs of the manifest); an id twice is refused."""
    for s in new:
        raw = s.id.bytes
        if raw in known:
            raise InvalidArgument("manifest lists an SST twice in ssts")
        known[raw] = None


def _check_views(known: dict[bytes, None], views: Iterable[SstView]) -> None:
    for v in views:
        if v.sst_id.bytes not in known:
            raise InvalidArgument(f"view {v.view_id} references SST {v.sst_id}, not in ssts")


def _write_transactions(w: FbWriter, m: Manifest) -> int | None:
    if not m.transactions:
        return None
    return w.tables(
        [w.table(tb.APP_VERSION, (w.string(t.app_id), t.version)) for t in m.transactions]
    )


def _write_ours(
    w: FbWriter, m: Manifest, nonce: bytes, parent: bytes | None, reusable: int | None
) -> int:
    rng = None if m.key_range is None else tb.write_range(w, m.key_range)
    parent_pos = None if parent is None else w.blob(parent)
    txns = _write_transactions(w, m)
    store_id = None if m.wal_store_id is None else w.blob(m.wal_store_id)
    v1_uri = None if m.wal_object_store_uri is None else w.string(m.wal_object_store_uri)
    return w.table(
        tb.OURS,
        (
            m.max_parallel_writes,
            rng,
            w.blob(nonce),
            parent_pos,
            m.next_wal_sst_id,
            0,
            m.our_writer_epoch,
            m.our_compactor_epoch,
            txns,
            m.separate_wal_store or None,
            store_id,
            v1_uri,
            reusable,
        ),
    )


class _Reusable:
    """What one encode leaves for the next (:class:`ManifestEncoder`): its reusable items (SSTs,
    sorted runs, checkpoints: immutable objects, known by identity) in the order they lie in
    the buffer, the bytes they take at its end, and the writer's state right after each."""

    __slots__ = (
        "blob",
        "ends",
        "id_counts",
        "ids",
        "items",
        "keys",
        "pairs",
        "pos",
        "sst_counts",
        "ssts",
        "vtables",
    )

    def __init__(self) -> None:
        self.items: list[object] = []  # kept alive: their ids name them
        self.keys: list[int] = []  # id() of each item
        self.pos: list[int] = []  # where each item's table lies, from the buffer's end
        self.ends: list[int] = []  # where each item ends, from the buffer's end
        self.id_counts: list[int] = []  # len(ids) after each item (ids only grow, in order)
        self.sst_counts: list[int] = []  # len(ssts) after each item
        self.blob = b""  # the last ends[-1] bytes of the buffer
        self.vtables: dict[bytes, int] = {}
        self.pairs: dict[str, tuple[struct.Struct, int]] = {}
        self.ids: dict[bytes, int] = {}  # Ulid tables written, in order
        self.ssts: dict[bytes, None] = {}  # ids of the SST items, in order

    def add(self, item: object, pos: int, w: FbWriter, ids: _Ids, ssts: int) -> None:
        """Record ``item``, just written at ``pos``, with ``ssts`` SST ids before its end."""
        self.items.append(item)
        self.keys.append(id(item))
        self.pos.append(pos)
        self.ends.append(w.size)
        self.id_counts.append(len(ids._written))
        self.sst_counts.append(ssts)

    def cut(self, k: int) -> _Reusable:
        """The first ``k`` items and the state after them (a new object; ``self`` unchanged)."""
        out = _Reusable()
        out.items, out.keys, out.pos = self.items[:k], self.keys[:k], self.pos[:k]
        out.ends, out.id_counts, out.sst_counts = (
            self.ends[:k],
            self.id_counts[:k],
            self.sst_counts[:k],
        )
        if k == 0:
            return out
        end = self.ends[k - 1]
        whole = k == len(self.items)
        out.blob = self.blob if whole else self.blob[len(self.blob) - end :]
        out.vtables = {b: p for b, p in self.vtables.items() if p <= end}
        out.pairs = {n: p for n, p in self.pairs.items() if p[1] <= end}
        out.ids = dict(islice(self.ids.items(), self.id_counts[k - 1]))
        out.ssts = dict(islice(self.ssts.items(), self.sst_counts[k - 1]))
        return out


class ManifestEncoder:
    """Manifest -> bytes, reusing the bytes of the previous encode (issue 42, goal 2).

    A FlatBuffers buffer is written back to front and every reference is relative, so the bytes
    written first (the buffer's end) do not depend on anything written after them. The encoder
    writes the manifest's SSTs, then its sorted runs, then its checkpoints, each one an *item*
    that refers only to vtables and items written before it, then everything else (L0, the
    vectors, our table, the root). The next encode keeps the longest run of leading items that
    are still in the new manifest (the same immutable objects: ``dataclasses.replace`` shares
    them), copies their bytes as they are, writes only the new items after them, and lists every
    item in its vector, wherever it lies. A memtable flush (one SST more, the writer checkpoint
    replaced) rewrites a few hundred bytes instead of the whole manifest; a commit that drops an
    item (a compaction, an expired checkpoint) rewrites from that item on. Items are matched by
    identity, so a decoded manifest (new objects) is encoded whole.

    Thread-safe; one per :class:`~slatedb_core.manifest.store.ManifestStore`.
    :func:`encode_manifest` is a fresh encoder's first encode."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: _Reusable | None = None

    def seed(self, manifest: Manifest, data: bytes, layout: Layout) -> None:
        """Take the items of ``manifest``, just decoded from ``data``, as the previous encode's:
        the next encode of a manifest built on it keeps their bytes (a writer's first commit
        after its open, or after it read a compactor's commit, is as cheap as the others)."""
        try:
            with gc_paused():  # see gc_paused: ~10k objects, none of them cyclic
                seeded = _seeded(manifest, data, layout)
        except ValueError:  # a layout that does not match the manifest: encode it whole
            seeded = None
        with self._lock:
            self._last = seeded

    def encode(
        self,
        manifest: Manifest,
        *,
        manifest_id: int | None = None,
        nonce: bytes | None = None,
        parent: bytes | None = None,
    ) -> bytes:
        """See :func:`encode_manifest`."""
        _check(manifest)
        for what, value in (("nonce", nonce), ("parent nonce", parent)):
            if value is not None and len(value) != NONCE_SIZE:
                raise InvalidArgument(f"a {what} is {NONCE_SIZE} bytes")
        with self._lock, gc_paused():  # ~3 dicts of an item each, none cyclic (as seed's)
            try:
                data, self._last = _encode(
                    manifest, manifest_id, nonce or os.urandom(NONCE_SIZE), parent, self._last
                )
            except (struct.error, OverflowError) as e:
                self._last = None
                raise InvalidArgument(
                    f"manifest has a value that does not fit its field: {e}"
                ) from e
            except BaseException:
                self._last = None
                raise
            return data


@dataclass(frozen=True, slots=True)
class Layout:
    """Where a manifest's items lie in the FlatBuffers buffer it was decoded from (positions
    from the buffer's start), for :meth:`ManifestEncoder.seed`: ``reusable`` bytes at the
    buffer's end hold only the items this engine's encoder wrote there (our table records it)."""

    size: int
    reusable: int
    ssts: list[tuple[int, int]]  # (table, id table) of each SST, in ``Manifest.ssts`` order
    runs: list[int]
    checkpoints: list[int]
    vtables: dict[bytes, int]  # the vtables read, by their bytes


def encode_manifest(
    manifest: Manifest,
    *,
    manifest_id: int | None = None,
    nonce: bytes | None = None,
    parent: bytes | None = None,
) -> bytes:
    """``manifest`` as the object ``manifest/{manifest_id:020}.manifest``: SlateDB 0.17's
    version prefix and ManifestV2, with ours in the table at slot 32 (max_parallel_writes,
    key_range, ``nonce``: random if None, ``parent``: the nonce of the manifest this one was
    built on, next_wal_sst_id and a CRC-32 of the whole object). ``manifest_id`` is needed only
    for a destroyed manifest (module :mod:`slatedb_core.manifest.codec`). A writer that commits
    again and again uses a :class:`ManifestEncoder`, which reuses what did not change."""
    return ManifestEncoder().encode(manifest, manifest_id=manifest_id, nonce=nonce, parent=parent)


def _seeded(m: Manifest, data: bytes, layout: Layout) -> _Reusable | None:
    """The state an encode of ``m`` into the FlatBuffers part of ``data`` would have left
    (module :class:`ManifestEncoder`), rebuilt from where its items lie; None if the layout is
    not one our encoder writes. The ids of views are left out (the next encode writes its own,
    a few bytes); only what lies inside the reusable bytes is taken. Numpy passes over the
    positions, not a Python step per item (issue 42: 100 ms of an open at 100k SSTs)."""
    n, end = layout.size, layout.reusable
    if len(data) != n + 2 or not 0 < end <= n:
        return None
    if len(layout.ssts) != len(m.ssts) or len(layout.runs) != len(m.compacted):
        return None
    if len(layout.checkpoints) != len(m.checkpoints):
        return None
    tables = np.array(layout.ssts, np.int64).reshape(-1, 2)  # (table, id table) per SST
    counts = (len(m.ssts), len(m.compacted), len(m.checkpoints))
    # where each item ends, from the buffer's end (an item ends where its table is); its kind
    # (0 SST, 1 run, 2 checkpoint) and its index in the pool of all items
    ends_all = n - np.concatenate(
        [tables[:, 0], np.array(layout.runs, np.int64), np.array(layout.checkpoints, np.int64)]
    )
    kinds_all = np.repeat(np.arange(3, dtype=np.int64), counts)
    at = np.flatnonzero(ends_all <= end)
    at = at[np.argsort(ends_all[at], kind="stable")]
    ends_np = ends_all[at]
    if not len(at) or int(ends_np[-1]) != end or bool((np.diff(ends_np) == 0).any()):
        return None
    kinds = kinds_all[at]
    pool: list[object] = [*m.ssts, *m.compacted, *m.checkpoints]
    objs = list(map(pool.__getitem__, at.tolist()))
    kept_at = at[kinds == 0]  # the SSTs kept, in buffer order (their pool index is theirs)
    kept_ids = list(map(_ID_BYTES, map(m.ssts.__getitem__, kept_at.tolist())))
    id_ends_np = n - tables[kept_at, 1]
    order = np.argsort(id_ends_np, kind="stable")  # the id tables, in buffer order
    id_ends_sorted = id_ends_np[order]
    if len(order) and int(id_ends_sorted[-1]) > end:
        return None
    ends = ends_np.tolist()
    reuse = _Reusable()
    reuse.blob = data[len(data) - end :]
    reuse.ids = dict(
        zip(map(kept_ids.__getitem__, order.tolist()), id_ends_sorted.tolist(), strict=True)
    )
    reuse.vtables = {v: n - p for v, p in layout.vtables.items() if n - p <= end}
    reuse.ssts = dict.fromkeys(kept_ids)
    reuse.items = objs
    reuse.keys = list(map(id, objs))
    reuse.pos = ends
    reuse.ends = list(ends)
    reuse.id_counts = np.searchsorted(id_ends_sorted, ends_np, side="right").tolist()
    reuse.sst_counts = np.cumsum(kinds == 0).tolist()
    return reuse


_ID_BYTES = attrgetter("id.bytes")


def _encode(
    m: Manifest,
    manifest_id: int | None,
    nonce: bytes,
    parent: bytes | None,
    last: _Reusable | None,
) -> tuple[bytes, _Reusable]:
    w = FbWriter()
    ids = _Ids(w)
    k = 0
    if last is not None:  # keep the leading items that m still holds
        present = set(map(id, m.ssts))
        present.update(map(id, m.compacted))
        present.update(map(id, m.checkpoints))
        flags = list(map(present.__contains__, last.keys))
        k = flags.index(False) if False in flags else len(flags)
    reuse = _Reusable() if last is None else last.cut(k)
    if k:
        w.resume(reuse.blob, dict(reuse.vtables), dict(reuse.pairs))
        ids._written = dict(reuse.ids)
    pos = dict(zip(reuse.keys, reuse.pos, strict=True))
    known = reuse.ssts
    new_ssts = list(compress(m.ssts, map(not_, map(pos.__contains__, map(id, m.ssts)))))
    _check_ssts(known, new_ssts)
    if len(known) != len(m.ssts):  # an SST object listed twice
        raise InvalidArgument("manifest lists an SST twice in ssts")
    # a run object listed twice (never by this engine) is written per listing, below
    twice = len(set(map(id, m.compacted))) != len(m.compacted)
    new_runs = [r for r in m.compacted if id(r) not in pos] if not twice else list(m.compacted)
    for r in new_runs:
        _check_views(known, r.views)
    _check_views(known, m.l0)
    count = len(known) - len(new_ssts)
    for s in new_ssts:
        count += 1
        reuse.add(s, _write_sst(w, ids, s), w, ids, count)
    for r in () if twice else new_runs:
        reuse.add(r, _write_run(w, ids, r), w, ids, count)
    kept = map(pos.__contains__, map(id, m.checkpoints))  # stepped over in C
    for c in compress(m.checkpoints, map(not_, kept)):
        reuse.add(c, _write_checkpoint(w, c), w, ids, count)
    reuse.blob = w.collapse()
    reuse.vtables = dict(w.vtables)
    reuse.pairs = dict(w.pairs)
    reuse.ids = dict(ids._written)
    # everything below is rewritten by every encode
    at = dict(zip(reuse.keys, reuse.pos, strict=True)).__getitem__
    ssts = w.tables(list(map(at, map(id, m.ssts))))
    l0 = w.tables([_write_view(w, ids, v) for v in m.l0])
    if twice:
        runs = w.tables([_write_run(w, ids, r) for r in m.compacted])
    else:
        runs = w.tables(list(map(at, map(id, m.compacted))))
    cps = list(map(at, map(id, m.checkpoints)))
    if m.destroyed_at_s is not None:
        cps.append(_destroyed_marker(w, m.destroyed_at_s, manifest_id))
    cps_vec = w.tables(cps)
    tracker = None if m.sequence_tracker is None else w.blob(m.sequence_tracker)
    ours = _write_ours(w, m, nonce, parent, reuse.ends[-1] if reuse.ends else None)
    assert w.last is not None
    crc_at = ours - w.last.offs[tb.OURS_CRC_SLOT]  # from the buffer's end
    root = w.table(
        tb.MANIFEST,
        (
            None,
            _write_external_dbs(w, ids, m),
            m.initialized,
            m.writer_epoch,
            m.compactor_epoch,
            m.replay_after_wal_id,
            m.wal_id_last_seen,
            ids.opt(m.last_compacted_l0_view_id),
            ssts,
            l0,
            runs,
            m.last_l0_clock_tick,
            cps_vec,
            m.last_l0_seq,
            m.recent_snapshot_min_seq,
            tracker,
            w.tables([]),
            None,
            *_MANIFEST_GAP,
            ours,
        ),
    )
    data = bytearray(VERSION_PREFIX + w.finish(root))
    struct.pack_into("<I", data, len(data) - crc_at, crc32(data))
    return bytes(data), reuse
