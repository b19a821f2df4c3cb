"""The fault-injecting wrapper: what each fault does to the store, determinism, and pause points."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from slatedb_core.errors import (
    InjectedFault,
    InvalidArgument,
    ObjectAlreadyExists,
    ObjectNotFound,
    StoreError,
    is_retryable,
)
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultRule, FaultyStore


@pytest.fixture
def fs() -> FaultyStore:
    return FaultyStore(open_store("memory://"), seed=1)


class Caller:
    """Runs one store call on a thread and keeps its outcome for the test to inspect."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self._fn = fn
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.result = self._fn()
        except BaseException as e:
            self.error = e

    def join(self, timeout: float = 5) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "call still blocked"

    @property
    def done(self) -> bool:
        return not self.thread.is_alive()


def test_wrapper_delegates_everything(fs: FaultyStore) -> None:
    assert fs.url == "faulty+memory://"
    v = fs.put("a/x", b"1")
    fs.put_if_absent("a/y", b"2")
    v2 = fs.put_if_match("a/x", b"3", v)
    assert fs.get("a/x").data == b"3"
    assert fs.get("a/x", byte_range=(0, 1)).data == b"3"
    assert fs.get_if_none_match("a/x", v2.e_tag or "") is None
    assert fs.head("a/y").size == 1
    assert fs.exists("a/y") and not fs.exists("a/z")
    assert [m.path for m in fs.list("a", start_after="a/x")] == ["a/y"]
    fs.delete("a/y")
    assert not fs.inner.exists("a/y")
    with pytest.raises(ObjectNotFound):
        fs.get("a/y")
    with pytest.raises(ObjectAlreadyExists):
        fs.put_if_absent("a/x", b"again")
    fs.copy_if_absent("a/x", "b/x")
    assert fs.get("b/x").data == b"3"
    with pytest.raises(ObjectAlreadyExists):
        fs.copy_if_absent("a/x", "b/x")
    with pytest.raises(ObjectNotFound):
        fs.copy_if_absent("a/missing", "b/y")
    assert fs.events == []


def test_fail_before_leaves_no_object(fs: FaultyStore) -> None:
    fs.fail_next("put_if_absent")
    with pytest.raises(InjectedFault) as info:
        fs.put_if_absent("m/1", b"data")
    assert info.value.took_effect is False
    assert isinstance(info.value, StoreError) and is_retryable(info.value)
    assert info.value.path == "m/1"
    assert not fs.inner.exists("m/1")
    assert fs.inner.counters.snapshot()["put_if_absent"] == 0  # inner was never called
    assert fs.events == [("fail_before", "put_if_absent", "m/1")]
    fs.put_if_absent("m/1", b"data")  # one-shot: the retry goes through
    assert fs.inner.get("m/1").data == b"data"


def test_fail_after_leaves_the_object(fs: FaultyStore) -> None:
    fs.fail_next("put_if_absent", after_effect=True)
    with pytest.raises(InjectedFault) as info:
        fs.put_if_absent("m/1", b"data")
    assert info.value.took_effect is True
    assert fs.inner.get("m/1").data == b"data"
    assert fs.events == [("fail_after", "put_if_absent", "m/1")]
    # The ambiguity a writer must resolve: its own retry now looks like a lost race.
    with pytest.raises(ObjectAlreadyExists):
        fs.put_if_absent("m/1", b"data")


def test_fail_after_delete_and_list(fs: FaultyStore) -> None:
    fs.put("d/x", b"x")
    fs.fail_next("delete", after_effect=True)
    with pytest.raises(InjectedFault) as info:
        fs.delete("d/x")
    assert info.value.took_effect
    assert not fs.inner.exists("d/x")
    fs.put("l/1", b"1")
    fs.fail_next("list", "l", after_effect=True)
    with pytest.raises(InjectedFault):
        fs.list("l")  # raised at call time, not when iterated
    assert [m.path for m in fs.list("l")] == ["l/1"]


def test_faults_on_copy_match_the_destination(fs: FaultyStore) -> None:
    fs.put("stage/s", b"sst")
    fs.fail_next("copy", "db/compacted/*")
    fs.copy_if_absent("stage/s", "elsewhere/c")  # other destination: untouched
    fs.put_if_absent("db/compacted/p", b"x")  # other op: untouched
    with pytest.raises(InjectedFault) as info:
        fs.copy_if_absent("stage/s", "db/compacted/1")
    assert info.value.took_effect is False and info.value.path == "db/compacted/1"
    assert not fs.inner.exists("db/compacted/1")
    assert fs.inner.counters.snapshot()["copy"] == 1  # only the untouched copy reached inner
    fs.fail_next("copy", after_effect=True)
    with pytest.raises(InjectedFault) as info:
        fs.copy_if_absent("stage/s", "db/compacted/1")
    assert info.value.took_effect is True
    assert fs.inner.get("db/compacted/1").data == b"sst"
    assert fs.inner.get("stage/s").data == b"sst"
    # the retry of a copy whose answer was lost meets its own copy
    with pytest.raises(ObjectAlreadyExists):
        fs.copy_if_absent("stage/s", "db/compacted/1")
    assert fs.events == [
        ("fail_before", "copy", "db/compacted/1"),
        ("fail_after", "copy", "db/compacted/1"),
    ]
    assert fs.counters.snapshot()["copy"] == 4


def test_pause_a_copy(fs: FaultyStore) -> None:
    fs.put("stage/s", b"sst")
    pp = fs.pause("slow-copy", "copy", "db/*")
    copier = Caller(lambda: fs.copy_if_absent("stage/s", "db/c"))
    assert pp.wait_reached(5)
    assert not copier.done and not fs.inner.exists("db/c")
    pp.release()
    copier.join()
    assert copier.error is None
    assert fs.inner.get("db/c").data == b"sst"


def test_fail_next_matches_op_and_glob(fs: FaultyStore) -> None:
    fs.fail_next("put", "wal/*", times=2)
    fs.put("manifest/1", b"m")  # other path: untouched
    fs.put_if_absent("wal/0", b"w")  # other op: untouched
    for key in ("wal/1", "wal/2"):
        with pytest.raises(InjectedFault):
            fs.put(key, b"w")
    fs.put("wal/3", b"w")
    assert sorted(m.path for m in fs.inner.list("")) == ["manifest/1", "wal/0", "wal/3"]


def test_successive_fail_next_apply_in_order(fs: FaultyStore) -> None:
    fs.fail_next("put")
    fs.fail_next("put", after_effect=True)
    with pytest.raises(InjectedFault) as first:
        fs.put("k", b"1")
    with pytest.raises(InjectedFault) as second:
        fs.put("k", b"2")
    assert (first.value.took_effect, second.value.took_effect) == (False, True)
    assert fs.inner.get("k").data == b"2"


def _schedule(seed: int) -> tuple[list[str], list[tuple[str, str, str]]]:
    s = FaultyStore(
        open_store("memory://"),
        seed=seed,
        rules=[
            FaultRule(op="put", fail_before=0.2, fail_after=0.2),
            FaultRule(op=None, path_glob="k/1*", fail_before=0.3),
            FaultRule(op="get", latency_s=(0.0, 0.0001)),
        ],
    )
    outcomes: list[str] = []
    for i in range(120):
        key = f"k/{i % 25}"
        for op in ("put", "get"):
            try:
                s.put(key, b"v") if op == "put" else s.get(key)
                outcomes.append("ok")
            except InjectedFault as e:
                outcomes.append("after" if e.took_effect else "before")
            except ObjectNotFound:
                outcomes.append("missing")
    return outcomes, s.events


def test_same_seed_same_fault_sequence() -> None:
    a = _schedule(42)
    assert a == _schedule(42)
    assert {"ok", "before", "after"} <= set(a[0])
    assert a[0] != _schedule(43)[0]


def test_fixed_and_ranged_latency(fs: FaultyStore) -> None:
    fs.put("x", b"x")
    fs.add_rule(FaultRule(op="get", latency_s=0.05, max_hits=1))
    t0 = time.monotonic()
    fs.get("x")
    assert time.monotonic() - t0 >= 0.05
    t0 = time.monotonic()
    fs.get("x")  # rule is spent
    assert time.monotonic() - t0 < 0.05
    fs.add_rule(FaultRule(op="head", latency_s=(0.02, 0.04)))
    for _ in range(3):
        t0 = time.monotonic()
        fs.head("x")
        assert 0.02 <= time.monotonic() - t0 < 0.5
    assert [e[0] for e in fs.events].count("latency") == 4


def test_max_hits_and_skip(fs: FaultyStore) -> None:
    fs.put("x", b"x")
    rule = fs.add_rule(FaultRule(op="get", fail_before=1.0, skip=2, max_hits=2))
    outcomes = []
    for _ in range(6):
        try:
            fs.get("x")
            outcomes.append("ok")
        except InjectedFault:
            outcomes.append("fail")
    assert outcomes == ["ok", "ok", "fail", "fail", "ok", "ok"]
    assert rule.hits == 2
    assert rule.exhausted


def test_probability_zero_never_fires_and_clear_rules(fs: FaultyStore) -> None:
    fs.add_rule(FaultRule(op=None, fail_before=0.0, fail_after=0.0))
    fs.add_rule(FaultRule(op="put", fail_before=1.0))
    with pytest.raises(InjectedFault):
        fs.put("x", b"x")
    fs.clear_rules()
    fs.put("x", b"x")
    assert fs.events == [("fail_before", "put", "x")]


def test_counters_count_calls_through_the_wrapper(fs: FaultyStore) -> None:
    fs.fail_next("put")
    with pytest.raises(InjectedFault):
        fs.put("x", b"x")
    fs.put("x", b"x")
    fs.get_if_none_match("x", '"other"')
    assert fs.counters.snapshot()["put"] == 2
    assert fs.counters.snapshot()["get"] == 1
    assert fs.inner.counters.snapshot()["put"] == 1


@pytest.mark.parametrize(
    "kwargs",
    [
        {"op": "bogus"},
        {"fail_before": 1.5},
        {"fail_after": -0.1},
        {"latency_s": -1.0},
        {"latency_s": (0.3, 0.1)},
        {"max_hits": -1},
        {"skip": -2},
    ],
)
def test_rule_validation(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument):
        FaultRule(**kwargs)


def test_fault_after_effect_on_every_store_kind(store: ObjectStore) -> None:
    fs = FaultyStore(store)
    fs.fail_next("put_if_absent", "manifest/*", after_effect=True)
    with pytest.raises(InjectedFault):
        fs.put_if_absent("manifest/00000000000000000001.manifest", b"m1")
    assert store.get("manifest/00000000000000000001.manifest").data == b"m1"
    assert fs.url == f"faulty+{store.url}"


# -- pause points ------------------------------------------------------------------------------


def test_pause_before_blocks_writer_until_released(fs: FaultyStore) -> None:
    pp = fs.pause("stalled-writer", "put_if_absent", "manifest/*")
    assert not pp.reached
    writer = Caller(lambda: fs.put_if_absent("manifest/2", b"stale"))
    assert pp.wait_reached(5)
    assert pp.reached and pp.hits == 1 and pp.name == "stalled-writer"
    assert not writer.done
    assert not fs.inner.exists("manifest/2")
    # Meanwhile a competing writer is not paused (times=1) and wins the race.
    fs.put_if_absent("manifest/2", b"fresh")
    pp.release()
    writer.join()
    assert isinstance(writer.error, ObjectAlreadyExists)
    assert fs.inner.get("manifest/2").data == b"fresh"
    assert ("pause_before:stalled-writer", "put_if_absent", "manifest/2") in fs.events


def test_pause_after_effect(fs: FaultyStore) -> None:
    pp = fs.pause("after-put", "put", "k", when="after")
    writer = Caller(lambda: fs.put("k", b"v"))
    assert pp.wait_reached(5)
    assert fs.inner.get("k").data == b"v"  # took effect, but the caller has not heard yet
    assert not writer.done
    pp.release()
    writer.join()
    assert writer.error is None
    assert writer.result.e_tag == fs.inner.head("k").e_tag


def test_pause_only_matches_its_op_and_path(fs: FaultyStore) -> None:
    pp = fs.pause("p", "put", "wal/*")
    fs.put("manifest/1", b"x")
    fs.put_if_absent("wal/1", b"x")
    assert not pp.reached
    assert not pp.wait_reached(0.01)
    pp.release()


def test_release_all_unblocks_every_paused_call(fs: FaultyStore) -> None:
    a = fs.pause("a", "put", "a/*")
    b = fs.pause("b", "get", "b/*", when="after")
    fs.inner.put("b/1", b"b")
    ca = Caller(lambda: fs.put("a/1", b"a"))
    cb = Caller(lambda: fs.get("b/1"))
    assert a.wait_reached(5) and b.wait_reached(5)
    fs.release_all()
    ca.join()
    cb.join()
    assert ca.error is None and cb.error is None
    assert cb.result.data == b"b"


def test_paused_call_times_out_instead_of_hanging() -> None:
    fs = FaultyStore(open_store("memory://"), pause_timeout_s=0.05)
    fs.pause("forgotten", "put", "x")
    with pytest.raises(InjectedFault, match="forgotten") as info:
        fs.put("x", b"x")
    assert info.value.took_effect is False
    assert not fs.inner.exists("x")
    fs.pause("forgotten-after", "delete", "x", when="after")
    fs.put("x", b"x")
    with pytest.raises(InjectedFault, match="forgotten-after") as info:
        fs.delete("x")
    assert info.value.took_effect is True
    assert not fs.inner.exists("x")


def test_pause_validation(fs: FaultyStore) -> None:
    fs.pause("p", "put")
    with pytest.raises(InvalidArgument):
        fs.pause("p", "get")
    with pytest.raises(InvalidArgument):
        fs.pause("q", "nope")
    with pytest.raises(InvalidArgument):
        fs.pause("r", "put", when="during")  # type: ignore[arg-type]
    fs.release_all()
