"""SlateDB 0.17's own WAL reader (SlateDB RFC 0019, the wheel's ``SlateDbWalReader``) as the
oracle of our change feed: every WAL row from WAL SST 1 to the tail, as our feed shows it."""

from __future__ import annotations

import asyncio
from typing import Any

import slatedb.uniffi as sdb  # type: ignore[import-untyped]  # the wheel ships no py.typed

from tests.interop.oracle import DB, Oracle

OPS = {
    sdb.RowEntryKind.VALUE: "put",
    sdb.RowEntryKind.TOMBSTONE: "delete",
    sdb.RowEntryKind.MERGE: "merge",
}
Row = tuple[bytes, str, bytes | None, int, int | None, int | None]
"""(key, op, value, seq, create_ts, expire_ts): a change as both readers give it."""


def slatedb_wal_rows(oracle: Oracle) -> list[Row]:
    """Every row SlateDB's WAL reader returns from WAL SST 1 to the tail it saw at the start."""

    async def read() -> list[Row]:
        reader = sdb.SlateDbWalReader(DB, oracle.store())
        tail = await reader.last_wal_file_id(0)
        it = await reader.iterator(1)
        out: list[Row] = []
        done = 0
        while done < tail:
            got = await asyncio.wait_for(it.next(), timeout=30)
            assert got is not None
            out += [
                (
                    e.key,
                    OPS[e.kind],
                    e.value if e.kind != sdb.RowEntryKind.TOMBSTONE else None,
                    e.seq,
                    e.create_ts,
                    e.expire_ts,
                )
                for e in got.rows
            ]
            done = got.last_consumed_wal_file_id
        return out

    return oracle.run(read())


def feed_rows(rows: list[dict[str, Any]]) -> list[Row]:
    """Our feed's rows (``to_pylist``) as :data:`Row` tuples."""
    return [(r["key"], r["op"], r["value"], r["seq"], r["create_ts"], r["expire_ts"]) for r in rows]
