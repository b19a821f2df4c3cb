"""Creating an SST object: the one create-if-absent every SST writer uses.

Every SST the engine writes goes to a name nobody else writes: a fresh ULID under a database's
``compacted/`` directory (SlateDB RFC 0001, "File Layout"), or a staged name of one Spark task's
attempt. The create is conditional (``put_if_absent`` / ``copy_if_absent``) all the same, so that
a write can never replace an object; "already exists" at such a name can only be this writer's
own earlier attempt that landed although its answer was lost (obstore retries a 5xx that came
after the write landed, and the retry meets it). When the bytes there are ours, the create
succeeded; when they are not, the error stands.

Used by the writer (memtable flushes, re-homing behind the GC boundary, ``ingest_ssts``), the
compactors (local and distributed) and the Spark ingest's staging.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from ulid import ULID

from slatedb_core.errors import ObjectAlreadyExists
from slatedb_core.layout import sst_path
from slatedb_core.manifest.model import CompactedSst, SstInfo
from slatedb_core.store.objectstore import ObjectStore


def create_sst(store: ObjectStore, path: str, data: bytes | memoryview) -> None:
    """Create ``path`` holding ``data`` if absent; the same bytes already there are ours.

    ``data`` may be a memoryview (an encoder's scratch buffer): every store takes any buffer
    (obstore does; the memory store copies a mutable one, since it would keep it), so the caller
    need not copy it into bytes first.
    """
    try:
        store.put_if_absent(path, data)  # type: ignore[arg-type]  # any buffer: see above
    except ObjectAlreadyExists:
        if store.get(path).data != data:
            raise


def write_new_sst(
    store: ObjectStore,
    db_path: str,
    data: bytes | memoryview,
    info: SstInfo,
    sst_id: ULID | None = None,
) -> CompactedSst:
    """Create the encoded SST ``data`` in ``db_path``'s ``compacted/`` directory under
    ``sst_id`` (a fresh ULID unless given: a compactor announces its ids before it writes)."""
    if sst_id is None:
        sst_id = ULID()
    create_sst(store, sst_path(db_path, sst_id), data)
    return CompactedSst(id=sst_id, info=info)


class StreamedSst(Protocol):
    """An SST's bytes as parts produced while it is encoded, and its info once they are all
    taken (:class:`slatedb_core.compactor.output_ssts.SstParts`)."""

    def __iter__(self) -> Iterator[bytes | bytearray | memoryview]: ...

    @property
    def info(self) -> SstInfo: ...


def write_new_sst_streamed(
    store: ObjectStore, db_path: str, sst: StreamedSst, sst_id: ULID
) -> CompactedSst:
    """:func:`write_new_sst` of an SST whose bytes are streamed to the store as they are encoded
    (:meth:`ObjectStore.create_streamed`), for compacted SSTs: SlateDB 0.17 writes those with a
    multipart upload too, and keeps the conditional single PUT for WAL SSTs (its
    ``tablestore.rs``), as the writer's L0 flushes keep :func:`write_new_sst` here. ``sst_id``
    is announced (a fresh ULID) before the first part is taken."""
    store.create_streamed(sst_path(db_path, sst_id), sst)
    return CompactedSst(id=sst_id, info=sst.info)


def copy_sst(store: ObjectStore, src: str, db_path: str, info: SstInfo) -> CompactedSst:
    """Copy the SST object ``src`` to a fresh ULID in ``db_path``'s ``compacted/`` directory
    with ``copy_if_absent`` (a hard link or a server-side copy where the store can).

    "Already exists" at the fresh name is accepted once its bytes equal ``src``'s.
    """
    sst_id = ULID()
    dst = sst_path(db_path, sst_id)
    try:
        store.copy_if_absent(src, dst)
    except ObjectAlreadyExists:
        if store.get(dst).data != store.get(src).data:
            raise
    return CompactedSst(id=sst_id, info=info)
