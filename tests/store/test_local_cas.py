"""The local filesystem's conditional update must hold across processes, not just threads.

Several SlateDB processes (writer, compactor, GC, CLI) may share one local database directory; an
in-process lock would not stop them from both "winning" a put_if_match, so these tests use real
processes started with 'spawn' (no inherited state, as for separately launched programs).
"""

from __future__ import annotations

import multiprocessing as mp
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import pytest

from slatedb_core.errors import PreconditionFailed
from slatedb_core.store.url import open_store

N = 50
PROCS = 4
COUNTER = "meta/counter"


def _increment_worker(url: str, n: int, go: Event, out: Any) -> None:
    """Runs in a child process: n read-modify-write increments, retrying lost races."""
    try:
        store = open_store(url)
        go.wait(30)
        conflicts = 0
        done = 0
        while done < n:
            res = store.get(COUNTER)
            value = int(res.data)
            try:
                store.put_if_match(COUNTER, str(value + 1).encode(), res.version)
            except PreconditionFailed:
                conflicts += 1
                continue
            done += 1
        out.put(("ok", conflicts))
    except BaseException as e:  # report, don't just die: the parent asserts on it
        out.put(("error", repr(e)))


def _overwrite_worker(url: str, data: bytes) -> None:
    open_store(url).put(COUNTER, data)


def test_put_if_match_increments_are_atomic_across_processes(tmp_path: Path) -> None:
    url = (tmp_path / "db").as_uri()
    open_store(url).put(COUNTER, b"0")
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_increment_worker, args=(url, N, go, out), daemon=True)
        for _ in range(PROCS)
    ]
    for p in procs:
        p.start()
    go.set()
    try:
        results = [out.get(timeout=60) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    assert [r for r in results if r[0] != "ok"] == []
    assert all(p.exitcode == 0 for p in procs)
    assert int(open_store(url).get(COUNTER).data) == PROCS * N


def test_overwrite_between_read_and_put_if_match_fails(tmp_path: Path) -> None:
    url = (tmp_path / "db").as_uri()
    store = open_store(url)
    store.put(COUNTER, b"10")
    res = store.get(COUNTER)
    # Another instance in this process: same bytes, same size, so only the e-tag can tell.
    open_store(url).put(COUNTER, b"10")
    with pytest.raises(PreconditionFailed):
        store.put_if_match(COUNTER, b"11", res.version)
    assert store.get(COUNTER).data == b"10"


def test_overwrite_from_another_process_makes_put_if_match_fail(tmp_path: Path) -> None:
    url = (tmp_path / "db").as_uri()
    store = open_store(url)
    store.put(COUNTER, b"10")
    res = store.get(COUNTER)
    proc = mp.get_context("spawn").Process(target=_overwrite_worker, args=(url, b"99"))
    proc.start()
    proc.join(timeout=60)
    assert proc.exitcode == 0
    with pytest.raises(PreconditionFailed):
        store.put_if_match(COUNTER, b"11", res.version)
    assert store.get(COUNTER).data == b"99"
    # The fresh version does win, and the object is an ordinary file afterwards.
    store.put_if_match(COUNTER, b"100", store.get(COUNTER).version)
    assert (tmp_path / "db" / "meta" / "counter").read_bytes() == b"100"


def test_delete_between_read_and_put_if_match_fails(tmp_path: Path) -> None:
    url = (tmp_path / "db").as_uri()
    store = open_store(url)
    store.put(COUNTER, b"1")
    res = store.get(COUNTER)
    open_store(url).delete(COUNTER)
    with pytest.raises(PreconditionFailed):
        store.put_if_match(COUNTER, b"2", res.version)
    assert not store.exists(COUNTER)
