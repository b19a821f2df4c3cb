"""The simulation's model of what was written, and the read-side invariants judged against it.

Every write the schedule issues gets a global *issue number* (a WriteBatch gets one for all its
keys) and its value carries that number, ``b"<issue>:<payload>"``, so any value read back names
the write that produced it. A write is *acked* once a call that guarantees its durability
returned normally; a write whose call raised, or whose writer crashed, stays *maybe*: it may or
may not have become durable, and either outcome is correct.

Two judgements follow:

* **durability**: reading the latest state, a key must hold the value of its last acked write or
  of a write issued after it (a maybe, or one still in flight); absent only if never acked or
  deleted;
* **consistent prefix**: the state read must be the result of some prefix ``1..c`` of the issue
  order: every key shows its write ``i_k <= c``, and no acked write to that key lies in
  ``(i_k, c]``. That is feasible iff one ``c`` fits every key's interval ``[i_k, next_acked)``.

Bank accounts are written only by atomic batches that preserve their total, so any prefix state
holds either no account (the opening batch not in it) or exactly the opening total.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tests.sim.recorder import InvariantViolation

ACCOUNTS = tuple(b"acct%d" % i for i in range(4))
OPENING_BALANCE = 100
KEYS = tuple(b"k%d" % i for i in range(6))
ALL_KEYS = (*ACCOUNTS, *KEYS)
INF = 1 << 62


def encode(issue: int, payload: bytes) -> bytes:
    return b"%d:%s" % (issue, payload)


def issue_of(value: bytes) -> int:
    head, sep, _ = value.partition(b":")
    if not sep or not head.isdigit():
        raise InvariantViolation(f"value {value[:40]!r} was never written by the simulation")
    return int(head)


def balance_of(value: bytes | None) -> int:
    if value is None:
        return 0
    return int(value.partition(b":")[2])


@dataclass
class Write:
    issue: int
    key: bytes
    value: bytes | None
    writer: int
    acked: bool = False


@dataclass
class Snapshot:
    """What the model allowed at one moment: per key the acceptable values, and the history up
    to then (for prefix checks of states taken at that moment, e.g. a checkpoint)."""

    acceptable: dict[bytes, set[bytes | None]]
    issue: int


@dataclass
class Model:
    """The write history of one database."""

    writes: dict[bytes, list[Write]] = field(default_factory=dict)
    pending: dict[int, list[Write]] = field(default_factory=dict)  # writer -> unacked writes
    next_issue: int = 1
    checks: int = 0

    def issue(self, writer: int, ops: Iterable[tuple[bytes, bytes | None]]) -> int:
        """Record a write (one issue number for a whole batch); values come pre-encoded."""
        n = self.next_issue
        self.next_issue += 1
        for key, value in ops:
            w = Write(n, key, value, writer)
            self.writes.setdefault(key, []).append(w)
            self.pending.setdefault(writer, []).append(w)
        return n

    def next(self) -> int:
        return self.next_issue

    def ack(self, writer: int) -> int:
        """Every write ``writer`` issued so far is durable; returns how many became acked."""
        done = self.pending.pop(writer, [])
        for w in done:
            w.acked = True
        return len(done)

    def forget(self, writer: int) -> None:
        """The writer is gone (crashed, fenced): its unacked writes stay maybe forever."""
        self.pending.pop(writer, None)

    def has_pending(self, writer: int) -> bool:
        return bool(self.pending.get(writer))

    # ---- judgements ------------------------------------------------------------------------
    def acceptable(self, key: bytes) -> set[bytes | None]:
        ws = self.writes.get(key, [])
        last_acked = max((w.issue for w in ws if w.acked), default=0)
        out: set[bytes | None] = {w.value for w in ws if w.issue >= last_acked and w.issue > 0}
        if last_acked == 0:
            out.add(None)
        return out

    def snapshot(self) -> Snapshot:
        return Snapshot({k: self.acceptable(k) for k in ALL_KEYS}, self.next_issue - 1)

    def check_durable(self, state: Mapping[bytes, bytes | None], where: str) -> None:
        """Every acked write is visible unless a later write replaced it."""
        for key in ALL_KEYS:
            self.checks += 1
            ok = self.acceptable(key)
            if state.get(key) not in ok:
                raise InvariantViolation(
                    f"{where}: {key!r} = {state.get(key)!r}, expected one of "
                    f"{sorted(ok, key=repr)[:6]} (acknowledged write lost or stale)"
                )

    def _intervals(self, key: bytes, seen: bytes | None) -> list[tuple[int, int]]:
        ws = self.writes.get(key, [])
        if seen is None:
            starts = [0] + [w.issue for w in ws if w.value is None]
        else:
            starts = [issue_of(seen)]
            if not any(w.issue == starts[0] and w.value == seen for w in ws):
                raise InvariantViolation(f"{key!r} = {seen!r} was never written to {key!r}")
        out = []
        for s in starts:
            nxt = min((w.issue for w in ws if w.acked and w.issue > s), default=INF)
            out.append((s, nxt))
        return out

    def check_prefix(
        self, state: Mapping[bytes, bytes | None], where: str, *, keys: Iterable[bytes] = ALL_KEYS
    ) -> None:
        """The state is the outcome of some prefix of the issue order (see the module doc)."""
        self.checks += 1
        per_key = {k: self._intervals(k, state.get(k)) for k in keys}
        candidates = sorted({s for ivs in per_key.values() for s, _ in ivs})
        for c in candidates:
            if all(any(s <= c < e for s, e in ivs) for ivs in per_key.values()):
                return
        shown = {k.decode(): state.get(k) for k in per_key}
        raise InvariantViolation(f"{where}: state is not a prefix of the write history: {shown}")


def check_bank(state: Mapping[bytes, bytes | None], where: str) -> None:
    """Transfers are atomic batches: every prefix holds no account or the opening total."""
    present = [a for a in ACCOUNTS if state.get(a) is not None]
    total = sum(balance_of(state.get(a)) for a in ACCOUNTS)
    if present and (len(present) != len(ACCOUNTS) or total != OPENING_BALANCE * len(ACCOUNTS)):
        balances = {a.decode(): balance_of(state.get(a)) for a in ACCOUNTS}
        raise InvariantViolation(f"{where}: bank total broken: {balances} (total {total})")


def check_snapshot(state: Mapping[bytes, bytes | None], snap: Snapshot, where: str) -> None:
    """A state pinned at ``snap`` (a checkpoint of everything issued before it) matches it."""
    for key, ok in snap.acceptable.items():
        if state.get(key) not in ok:
            raise InvariantViolation(
                f"{where}: {key!r} = {state.get(key)!r}, the checkpoint allows "
                f"{sorted(ok, key=repr)[:6]}"
            )
