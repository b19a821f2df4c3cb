"""SlateDB 0.17 with a merge operator, for the write-side tests of issue 38 (items 1 and 2): the
same writes (puts and merges with TTLs, deletes, batches) through SlateDB's ``Db`` as through
ours (``slatedb_write``, ``ours_write``), and SlateDB's reader of any database path with the
operator installed.

Only helpers: :mod:`tests.interop.oracle` drives the wheel, :mod:`tests.interop.oracle_merge_read`
has the operators (SlateDB's callback interface) and the writer builder."""

from __future__ import annotations

from collections.abc import Sequence

import slatedb.uniffi as sdb  # type: ignore[import-untyped]  # the wheel ships no py.typed

from slatedb_core.writer.batch import WriteBatch
from slatedb_core.writer.db import Db
from tests.interop.oracle import Oracle, SlateReader, SlateWriter

Op = tuple[str, bytes, bytes | None, int | None]
"""One write: (``"put"`` | ``"merge"`` | ``"delete"``, key, value or operand, ttl in ms)."""


def _ttl(ttl_ms: int | None) -> sdb.Ttl:
    return sdb.Ttl.DEFAULT() if ttl_ms is None else sdb.Ttl.EXPIRE_AFTER_MILLIS(ttl_ms)


def slatedb_write(w: SlateWriter, ops: Sequence[Op]) -> None:
    """``ops`` as one durable SlateDB ``WriteBatch`` (several ops) or a single call."""
    if len(ops) == 1:
        kind, key, value, ttl = ops[0]

        async def one() -> None:
            if kind == "put":
                assert value is not None
                h = await w.db.put_with_options(
                    key, value, sdb.PutOptions(ttl=_ttl(ttl)), sdb.WriteOptions()
                )
            elif kind == "merge":
                assert value is not None
                h = await w.db.merge_with_options(
                    key, value, sdb.MergeOptions(ttl=_ttl(ttl)), sdb.WriteOptions()
                )
            else:
                h = await w.db.delete(key)
            await h.await_durable()

        w.oracle.run(one())
        return
    batch = sdb.WriteBatch()
    for kind, key, value, ttl in ops:
        if kind == "put":
            batch.put_with_options(key, value, sdb.PutOptions(ttl=_ttl(ttl)))
        elif kind == "merge":
            batch.merge_with_options(key, value, sdb.MergeOptions(ttl=_ttl(ttl)))
        else:
            batch.delete(key)

    async def many() -> None:
        h = await w.db.write(batch)
        await h.await_durable()

    w.oracle.run(many())


def ours_write(db: Db, ops: Sequence[Op]) -> None:
    """The same ``ops`` through our ``Db``: one ``WriteBatch`` (several ops) or a single call."""
    if len(ops) == 1:
        kind, key, value, ttl = ops[0]
        if kind == "put":
            assert value is not None
            db.put(key, value, ttl=ttl)
        elif kind == "merge":
            assert value is not None
            db.merge(key, value, ttl=ttl)
        else:
            db.delete(key)
        return
    batch = WriteBatch()
    for kind, key, value, ttl in ops:
        if kind == "put":
            assert value is not None
            batch.put(key, value, ttl=ttl)
        elif kind == "merge":
            assert value is not None
            batch.merge(key, value, ttl=ttl)
        else:
            batch.delete(key)
    db.write(batch)


def open_reader_at(oracle: Oracle, path: str, op: sdb.MergeOperator) -> SlateReader:
    """SlateDB's ``DbReader`` of ``path`` with merge operator ``op``."""
    builder = sdb.DbReaderBuilder(path, oracle.store())
    builder.with_merge_operator(op)
    reader = SlateReader(oracle, oracle.run(builder.build()))
    oracle._open.append(reader.reader.shutdown)
    return reader
