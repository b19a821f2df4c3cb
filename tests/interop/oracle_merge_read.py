"""SlateDB 0.17's merge operator through its Python binding, for the read-side tests of issue 38
(items 1 and 2): a ``slatedb.uniffi.MergeOperator`` the wheel calls back, the writer and reader
builders that install it, and merges and TTL merges through the wheel's ``Db``.

Only helpers: :mod:`tests.interop.oracle` drives the wheel; this adds what it has no call for."""

from __future__ import annotations

import uuid

import slatedb.uniffi as sdb  # type: ignore[import-untyped]  # the wheel ships no py.typed

from tests.interop.oracle import DB, FULL_RANGE, Oracle, SlateReader, SlateWriter, _drain, settings


class StringAppend(sdb.MergeOperator):  # type: ignore[misc]
    """SlateDB's callback interface: ``existing + operand`` (our built-in ``string_append``)."""

    def merge(self, key: bytes, existing_value: bytes | None, operand: bytes) -> bytes:
        return (existing_value or b"") + operand


class AddInt64(sdb.MergeOperator):  # type: ignore[misc]
    """8-byte little-endian wrapping sums (our built-in ``add_int64``)."""

    def merge(self, key: bytes, existing_value: bytes | None, operand: bytes) -> bytes:
        base = int.from_bytes(existing_value, "little", signed=True) if existing_value else 0
        total = (base + int.from_bytes(operand, "little", signed=True)) % (1 << 64)
        return total.to_bytes(8, "little")


def open_merge_db(
    oracle: Oracle, op: sdb.MergeOperator, *, compactor: bool = False, path: str = DB
) -> SlateWriter:
    """SlateDB's ``Db`` with merge operator ``op`` (its compactor off unless ``compactor``)."""
    builder = sdb.DbBuilder(path, oracle.store())
    builder.with_settings(settings(compactor=compactor))
    builder.with_merge_operator(op)
    writer = SlateWriter(oracle, oracle.run(builder.build()))
    oracle._open.append(writer.db.shutdown)
    return writer


def open_merge_reader(
    oracle: Oracle, op: sdb.MergeOperator | None, checkpoint: uuid.UUID | None = None
) -> SlateReader:
    """SlateDB's ``DbReader`` with merge operator ``op`` (None: without one)."""
    builder = sdb.DbReaderBuilder(DB, oracle.store())
    if op is not None:
        builder.with_merge_operator(op)
    if checkpoint is not None:
        builder.with_reader_mode(sdb.ReaderMode.CHECKPOINT(str(checkpoint)))
    reader = SlateReader(oracle, oracle.run(builder.build()))
    oracle._open.append(reader.reader.shutdown)
    return reader


def merge(w: SlateWriter, key: bytes, operand: bytes, ttl_ms: int | None = None) -> None:
    """One durable merge (with a TTL when ``ttl_ms``)."""

    async def run() -> None:
        if ttl_ms is None:
            handle = await w.db.merge(key, operand)
        else:
            options = sdb.MergeOptions(ttl=sdb.Ttl.EXPIRE_AFTER_MILLIS(ttl_ms))
            handle = await w.db.merge_with_options(key, operand, options, sdb.WriteOptions())
        await handle.await_durable()

    w.oracle.run(run())


def merge_batch(w: SlateWriter, ops: list[tuple[bytes, bytes]]) -> None:
    """One durable WriteBatch of merges."""
    batch = sdb.WriteBatch()
    for key, operand in ops:
        batch.merge(key, operand)

    async def run() -> None:
        handle = await w.db.write(batch)
        await handle.await_durable()

    w.oracle.run(run())


def snapshot_scan(w: SlateWriter, snap: sdb.DbSnapshot) -> list[tuple[bytes, bytes]]:
    async def scan() -> list[tuple[bytes, bytes]]:
        return await _drain(await snap.scan(FULL_RANGE))

    return w.oracle.run(scan())


def reads_of(reader: SlateReader | SlateWriter, keys: list[bytes]) -> dict[bytes, object]:
    """``key -> value`` (or the error's class name) of each of ``keys`` through SlateDB."""
    out: dict[bytes, object] = {}
    for k in keys:
        try:
            out[k] = reader.get(k)
        except sdb.Error as e:
            out[k] = type(e).__name__
    return out
