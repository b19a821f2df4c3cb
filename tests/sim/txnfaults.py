"""Seeded faults in the transactional store under two-phase CAS (``--two-phase`` schedules).

Every statement that writes (insert, update, delete) may fail before it runs, and a write to an
*intent* may also fail after it took effect: the ambiguous outcome two-phase CAS must resolve
(an insert that took effect is the durable commit of a create). Writes to cells (the boundary
files) only fail before taking effect, for the same reason the object-store DELETEs under the
protocol do: the recorder sits above the protocol and would take a boundary write that raised
after taking effect for one that did nothing. Reads never fail: the fault-free judges go through
them.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from slatedb_core.errors import InjectedFault
from slatedb_core.store.txn import CELLS, SqliteTxnStore


class FaultySqliteTxnStore(SqliteTxnStore):
    def __init__(self, path: Path, *, seed: int, rate: float) -> None:
        super().__init__(path)
        self._rng = random.Random(seed)
        self._rate = rate
        self._lock = threading.Lock()
        self.events: list[tuple[str, str]] = []

    def _connect(self) -> Any:
        # A schedule never survives a machine crash: skip the fsyncs (several per write).
        conn = super()._connect()
        conn.execute("PRAGMA synchronous=OFF")
        return conn

    def clear_rules(self) -> None:
        self.set_rate(0.0)

    def set_rate(self, rate: float) -> None:
        with self._lock:
            self._rate = rate

    def _run(self, kind: str, text: str, params: Sequence[Any]) -> tuple[list[Any], int]:
        if kind == "select":
            return super()._run(kind, text, params)
        with self._lock:
            draw = self._rng.random() if self._rate > 0 else 1.0
            rate = self._rate
        if draw < rate / 2:
            self.events.append(("fail_before", kind))
            raise InjectedFault(f"injected failure before {kind} in {self.url}")
        result = super()._run(kind, text, params)
        if draw < rate and CELLS not in text:
            self.events.append(("fail_after", kind))
            raise InjectedFault(
                f"injected failure after {kind} took effect in {self.url}", took_effect=True
            )
        return result
