"""A fault-injecting :class:`ObjectStore` wrapper for tests and simulation.

The protocol's hard cases are requests that fail, succeed but report failure, or stall while a
competing writer moves on. Real stores produce them rarely and never on demand, so this wrapper
makes them scriptable: probabilistic rules driven by one seeded RNG (a single-threaded schedule
replays exactly), one-shot failures for unit tests, and named pause points that park a thread at a
precise moment until the test lets it go.
"""

from __future__ import annotations

import builtins
import fnmatch
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from slatedb_core.errors import InjectedFault, InvalidArgument
from slatedb_core.store.objectstore import (
    OPS,
    GetResult,
    ObjectMeta,
    ObjectStore,
    ObjectVersion,
    RequestCounters,
)

T = TypeVar("T")
When = Literal["before", "after"]

# A paused call that nobody releases is a test bug; failing loudly beats hanging the suite.
DEFAULT_PAUSE_TIMEOUT_S = 60.0


def _check_op(op: str | None) -> None:
    if op is not None and op not in OPS:
        raise InvalidArgument(f"unknown store operation {op!r}; expected one of {OPS} or None")


@dataclass
class FaultRule:
    """One source of injected trouble; ``hits`` and ``seen`` are its own bookkeeping."""

    op: str | None = None
    path_glob: str = "*"
    fail_before: float = 0.0
    fail_after: float = 0.0
    latency_s: float | tuple[float, float] = 0.0
    max_hits: int | None = None
    skip: int = 0
    hits: int = field(default=0, init=False, compare=False)
    seen: int = field(default=0, init=False, compare=False)

    def __post_init__(self) -> None:
        _check_op(self.op)
        for name in ("fail_before", "fail_after"):
            p = getattr(self, name)
            if not 0.0 <= p <= 1.0:
                raise InvalidArgument(f"{name} is a probability in [0, 1], got {p!r}")
        lat = self.latency_s
        lo, hi = lat if isinstance(lat, tuple) else (lat, lat)
        if lo < 0 or hi < lo:
            raise InvalidArgument(f"latency_s must be >= 0 or a (low, high) range, got {lat!r}")
        if self.max_hits is not None and self.max_hits < 0:
            raise InvalidArgument(f"max_hits must be >= 0 or None, got {self.max_hits!r}")
        if self.skip < 0:
            raise InvalidArgument(f"skip must be >= 0, got {self.skip!r}")

    def matches(self, op: str, path: str) -> bool:
        """Whether this rule applies to a call of ``op`` on ``path``."""
        return (self.op is None or self.op == op) and fnmatch.fnmatchcase(path, self.path_glob)

    @property
    def exhausted(self) -> bool:
        return self.max_hits is not None and self.hits >= self.max_hits


class PausePoint:
    """Parks matching calls until released, so a test can interleave a 'stalled' request."""

    def __init__(
        self, name: str, op: str, path_glob: str, when: When, times: int, timeout_s: float
    ) -> None:
        self.name = name
        self.op = op
        self.path_glob = path_glob
        self.when: When = when
        self.hits = 0
        self._remaining = times
        self._timeout_s = timeout_s
        self._reached = threading.Event()
        self._released = threading.Event()

    def __repr__(self) -> str:
        where = f"{self.when} {self.op} {self.path_glob!r}"
        return f"PausePoint({self.name!r}, {where}, hits={self.hits})"

    @property
    def reached(self) -> bool:
        return self._reached.is_set()

    @property
    def released(self) -> bool:
        return self._released.is_set()

    def wait_reached(self, timeout: float = 10) -> bool:
        return self._reached.wait(timeout)

    def release(self) -> None:
        self._released.set()

    def _claim(self, op: str, path: str, when: When) -> bool:
        """Caller holds the store lock."""
        if self._remaining <= 0 or self.released or when != self.when or op != self.op:
            return False
        if not fnmatch.fnmatchcase(path, self.path_glob):
            return False
        self._remaining -= 1
        self.hits += 1
        return True

    def _block(self, op: str, path: str) -> None:
        self._reached.set()
        if not self._released.wait(self._timeout_s):
            raise InjectedFault(
                f"pause point {self.name!r} ({self.when} {op} {path}) was not released within "
                f"{self._timeout_s:g}s; did the test forget release()?",
                path=path,
                took_effect=self.when == "after",
            )


@dataclass
class _Plan:
    latency: float = 0.0
    fail_before: bool = False
    fail_after: bool = False


class FaultyStore(ObjectStore):
    """Delegates to ``inner``, injecting failures, latency and pauses as configured."""

    def __init__(
        self,
        inner: ObjectStore,
        *,
        seed: int = 0,
        rules: Sequence[FaultRule] = (),
        pause_timeout_s: float = DEFAULT_PAUSE_TIMEOUT_S,
    ) -> None:
        self._inner = inner
        self.url = f"faulty+{inner.url}"
        self.counters = RequestCounters()
        self.seed = seed
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = list(rules)
        self._pauses: dict[str, PausePoint] = {}
        self._pause_timeout_s = pause_timeout_s
        self.events: list[tuple[str, str, str]] = []

    @property
    def inner(self) -> ObjectStore:
        return self._inner

    def __repr__(self) -> str:
        return f"FaultyStore({self._inner!r}, seed={self.seed})"

    # -- configuration -------------------------------------------------------------------------

    def add_rule(self, rule: FaultRule) -> FaultRule:
        """Inject ``rule`` into every later call it matches; returns it."""
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear_rules(self) -> None:
        """Remove every fault rule; later calls reach the store unchanged."""
        with self._lock:
            self._rules.clear()

    def fail_next(
        self, op: str, path_glob: str = "*", *, after_effect: bool = False, times: int = 1
    ) -> FaultRule:
        """Appended, not prepended, so successive calls fail successive requests in order."""
        if after_effect:
            rule = FaultRule(op, path_glob, fail_after=1.0, max_hits=times)
        else:
            rule = FaultRule(op, path_glob, fail_before=1.0, max_hits=times)
        return self.add_rule(rule)

    def pause(
        self, name: str, op: str, path_glob: str = "*", *, when: When = "before", times: int = 1
    ) -> PausePoint:
        """Hold the next ``times`` calls of ``op`` on ``path_glob`` at a pause point named
        ``name``, ``before`` or ``after`` the store call, until released."""
        _check_op(op)
        if when not in ("before", "after"):
            raise InvalidArgument(f"when must be 'before' or 'after', got {when!r}")
        pp = PausePoint(name, op, path_glob, when, times, self._pause_timeout_s)
        with self._lock:
            if name in self._pauses:
                raise InvalidArgument(f"pause point {name!r} already exists")
            self._pauses[name] = pp
        return pp

    def release_all(self) -> None:
        """Release every pause point, letting the calls they hold continue."""
        with self._lock:
            points = builtins.list(self._pauses.values())
        for pp in points:
            pp.release()

    # -- the injection machinery ---------------------------------------------------------------

    def _record(self, kind: str, op: str, path: str) -> None:
        with self._lock:
            self.events.append((kind, op, path))

    def _plan(self, op: str, path: str) -> _Plan:
        """Consults every rule under the lock so RNG draws happen in a reproducible order."""
        plan = _Plan()
        with self._lock:
            for rule in self._rules:
                if rule.exhausted or not rule.matches(op, path):
                    continue
                rule.seen += 1
                if rule.seen <= rule.skip:
                    continue
                fired = False
                lat = rule.latency_s
                delay = self._rng.uniform(*lat) if isinstance(lat, tuple) else lat
                if delay > 0:
                    plan.latency += delay
                    fired = True
                if rule.fail_before > 0 and self._rng.random() < rule.fail_before:
                    plan.fail_before = fired = True
                elif rule.fail_after > 0 and self._rng.random() < rule.fail_after:
                    plan.fail_after = fired = True
                if fired:
                    rule.hits += 1
                if plan.fail_before or plan.fail_after:
                    break  # the first failing rule decides; later rules never see this call
        return plan

    def _pause_at(self, when: When, op: str, path: str) -> None:
        with self._lock:
            point = next((p for p in self._pauses.values() if p._claim(op, path, when)), None)
        if point is not None:
            self._record(f"pause_{when}:{point.name}", op, path)
            point._block(op, path)

    def _run(self, op: str, path: str, call: Callable[[], T]) -> T:
        self.counters.incr(op)
        self._pause_at("before", op, path)
        plan = self._plan(op, path)
        if plan.latency > 0:
            self._record("latency", op, path)
            time.sleep(plan.latency)
        if plan.fail_before:
            self._record("fail_before", op, path)
            raise InjectedFault(f"injected failure before {op} {path}", path=path)
        result = call()
        self._pause_at("after", op, path)
        if plan.fail_after:
            self._record("fail_after", op, path)
            raise InjectedFault(
                f"injected failure after {op} {path} took effect", path=path, took_effect=True
            )
        return result

    # -- the ObjectStore interface -------------------------------------------------------------

    def get(self, path: str, *, byte_range: tuple[int, int] | None = None) -> GetResult:
        return self._run("get", path, lambda: self._inner.get(path, byte_range=byte_range))

    def get_if_none_match(self, path: str, e_tag: str) -> GetResult | None:
        return self._run("get", path, lambda: self._inner.get_if_none_match(path, e_tag))

    def head(self, path: str) -> ObjectMeta:
        return self._run("head", path, lambda: self._inner.head(path))

    def put(self, path: str, data: bytes) -> ObjectVersion:
        return self._run("put", path, lambda: self._inner.put(path, data))

    def put_if_absent(self, path: str, data: bytes) -> ObjectVersion:
        return self._run("put_if_absent", path, lambda: self._inner.put_if_absent(path, data))

    def put_if_match(self, path: str, data: bytes, expected: ObjectVersion) -> ObjectVersion:
        return self._run(
            "put_if_match", path, lambda: self._inner.put_if_match(path, data, expected)
        )

    def copy_if_absent(self, src: str, dst: str) -> None:
        # Rules and pause points match the object the copy creates, ``dst``.
        self._run("copy", dst, lambda: self._inner.copy_if_absent(src, dst))

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectMeta]:
        # Materialised so that an after-effect fault covers the whole listing, not a lazy stub.
        items = self._run(
            "list", prefix, lambda: builtins.list(self._inner.list(prefix, start_after=start_after))
        )
        return iter(items)

    def delete(self, path: str) -> None:
        self._run("delete", path, lambda: self._inner.delete(path))

    def sweep_staged(self, prefix: str, *, older_than_s: float, now_s: float) -> tuple[int, int]:
        return self._inner.sweep_staged(prefix, older_than_s=older_than_s, now_s=now_s)

    def flush_and_evict(self, paths: Sequence[str]) -> None:
        self._inner.flush_and_evict(paths)  # a cache hint: no rules or pause points
