"""A local-filesystem put is durable with its whole path even when another writer created the
directories it lands in and has not synced them yet (adversarial review of 81a3c23, issue 37
"A local filesystem that keeps what it acknowledged").

``LocalFiles._commit`` synced the parent of each directory *it* found missing. A put into a
directory that a concurrent put had just made (mkdir done, that put's own directory syncs not
yet) found nothing missing, synced only its file's directory and returned: after a power loss
the unsynced directory entry, and with it the acknowledged object, could be gone. ``os.fsync``
is spied on (the real call still happens) and the first writer is held inside its own put."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from slatedb_core.store.url import open_store

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc (Linux)")


class Held:
    """Every path ``os.fsync`` syncs, by thread; the thread named ``held`` waits at its first."""

    def __init__(self) -> None:
        self.paths: dict[str, list[str]] = {}
        self.reached = threading.Event()
        self.go = threading.Event()


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[Held]:
    h = Held()
    real = os.fsync

    def spy(fd: int) -> None:
        name = threading.current_thread().name
        h.paths.setdefault(name, []).append(os.readlink(f"/proc/self/fd/{fd}"))
        if name == "held" and not h.reached.is_set():
            h.reached.set()
            assert h.go.wait(10)
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    yield h
    h.go.set()


def test_a_put_into_a_directory_another_put_just_made_syncs_its_path(
    tmp_path: Path, held: Held
) -> None:
    store = open_store(f"{tmp_path.as_uri()}?sync=true")  # the suite runs without (conftest)
    root = str(tmp_path.resolve())
    first = threading.Thread(target=store.put, args=("x/y/a", b"1"), name="held")
    first.start()
    try:
        assert held.reached.wait(10)  # x and x/y made; nothing of them synced yet
        store.put("x/y/b", b"2")
        mine = held.paths[threading.current_thread().name]
        assert f"{root}/x" in mine, "x/y's entry in x was not synced"
        assert root in mine, "x's entry in the root was not synced"
    finally:
        held.go.set()
        first.join(10)
    # once synced, a directory is not synced again by later puts of this store
    mine.clear()
    store.put("x/y/c", b"3")
    assert [p.split("#")[0] for p in mine] == [f"{root}/x/y/c", f"{root}/x/y"]
