"""A local-filesystem store keeps what it acknowledged: every write is synced, file and directory
entry, before it returns (issue 37, "A local filesystem that keeps what it acknowledged").

obstore's LocalStore never calls fsync, so a durable put used to return while its WAL SST was only
in the page cache; after a power loss such a file can be empty, and a zero-byte WAL SST reads as a
writer's fence. These tests watch the real system calls: :func:`os.fsync` (spied on, calling
through) and, where installed, ``strace`` on a separate process doing a durable put of a Db.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from slatedb_core.errors import InvalidArgument, ObjectAlreadyExists, ObjectNotFound
from slatedb_core.store.objectstore import ObjectStore, ObjectVersion
from slatedb_core.store.url import SYNC_ENV, open_store

_STAGED = re.compile(r"#\d+$")


class Synced:
    """The paths this process fsyncs (``os.fsync`` spied on: the real call still happens)."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def files(self) -> list[str]:
        return [p for p in self.paths if not os.path.isdir(p)]

    def dirs(self) -> list[str]:
        return [p for p in self.paths if os.path.isdir(p)]

    def clear(self) -> None:
        self.paths.clear()


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> Iterator[Synced]:
    seen = Synced()
    real = os.fsync

    def spy(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        seen.paths.append(_STAGED.sub("", path))  # a staged file counts as the object it becomes
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    yield seen


pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc (Linux)")


@pytest.fixture(autouse=True)
def default_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests see the default (sync on): the test suite turns it off (tests/conftest.py)."""
    monkeypatch.delenv(SYNC_ENV, raising=False)


def test_put_if_absent_syncs_the_file_its_directory_and_each_new_parent(
    tmp_path: Path, synced: Synced
) -> None:
    store = open_store(tmp_path.as_uri())
    root = str(tmp_path)
    synced.clear()
    store.put_if_absent("db/wal/00000000000000000001.sst", b"sst")
    assert synced.files() == [f"{root}/db/wal/00000000000000000001.sst"]
    # the file's entry in wal/, wal's entry in db/, db's entry in the root
    assert synced.dirs() == [f"{root}/db/wal", f"{root}/db", root]


def test_every_write_of_a_local_store_is_synced_before_it_returns(
    tmp_path: Path, synced: Synced
) -> None:
    store = open_store(tmp_path)
    root = str(tmp_path)
    store.put_if_absent("d/a", b"1")
    writes: dict[str, Callable[[ObjectStore], object]] = {
        "put": lambda s: s.put("d/m", b"1"),
        "put over": lambda s: s.put("d/m", b"2"),
        "put_if_match": lambda s: s.put_if_match("d/m", b"3", ObjectVersion.of(s.head("d/m"))),
        "copy_if_absent": lambda s: s.copy_if_absent("d/a", "d/b"),
    }
    for name, write in writes.items():
        synced.clear()
        write(store)
        assert f"{root}/d" in synced.dirs(), name
        assert synced.files(), name
    synced.clear()
    store.delete("d/a")
    assert synced.dirs() == [f"{root}/d"]


def test_sync_false_syncs_nothing(tmp_path: Path, synced: Synced) -> None:
    for store in (
        open_store(f"{tmp_path.as_uri()}/a?sync=false"),
        open_store(tmp_path / "b", sync="false"),
    ):
        synced.clear()
        store.put_if_absent("x/y", b"1")
        store.put("x/z", b"1")
        store.delete("x/y")
        assert synced.paths == []


def test_the_environment_sets_sync_where_the_url_does_not(
    tmp_path: Path, synced: Synced, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SYNC_ENV, "false")
    open_store(tmp_path / "a").put("k", b"1")
    assert synced.paths == []
    open_store(f"{(tmp_path / 'b').as_uri()}?sync=true").put("k", b"1")
    assert synced.files() == [str(tmp_path / "b" / "k")]
    monkeypatch.setenv(SYNC_ENV, "sometimes")
    with pytest.raises(InvalidArgument, match=SYNC_ENV):
        open_store(tmp_path / "c")


def test_a_new_store_directory_is_created_durably(tmp_path: Path, synced: Synced) -> None:
    open_store(tmp_path / "new" / "lake")
    assert synced.dirs() == [str(tmp_path / "new"), str(tmp_path)]


@pytest.mark.parametrize("bad", ["maybe", "", "2"])
def test_a_bad_sync_value_is_invalid_argument(tmp_path: Path, bad: str) -> None:
    with pytest.raises(InvalidArgument, match="sync must be true or false"):
        open_store(f"{tmp_path.as_uri()}?sync={bad}")


@pytest.mark.parametrize("query", ["fsync=false", "sync=false&sync=true", "sync"])
def test_an_unknown_or_repeated_file_option_is_invalid_argument(tmp_path: Path, query: str) -> None:
    with pytest.raises(InvalidArgument):
        open_store(f"{tmp_path.as_uri()}?{query}")


def test_versions_agree_with_obstores_own(tmp_path: Path) -> None:
    """The writes are ours, the reads obstore's: an e-tag a put returns must be the one head
    reports, or every conditional update after a put would fail."""
    store = open_store(tmp_path)
    assert store.put_if_absent("k", b"12").e_tag == store.head("k").e_tag
    assert store.put("k", b"345").e_tag == store.head("k").e_tag
    v = store.put_if_match("k", b"6", ObjectVersion.of(store.head("k")))
    assert v.e_tag == store.head("k").e_tag
    assert store.put("fence", b"").e_tag == store.head("fence").e_tag


def test_local_writes_keep_the_object_store_contract(tmp_path: Path) -> None:
    store: ObjectStore = open_store(tmp_path)
    store.put_if_absent("a/k", b"1")
    with pytest.raises(ObjectAlreadyExists):
        store.put_if_absent("a/k", b"2")
    with pytest.raises(ObjectNotFound):
        store.copy_if_absent("a/missing", "a/c")
    with pytest.raises(ObjectAlreadyExists):
        store.copy_if_absent("a/k", "a/k")
    with pytest.raises(InvalidArgument):
        store.put("a/../../escape", b"1")
    with pytest.raises(InvalidArgument, match="staged"):
        store.put("a/k#12", b"1")
    store.delete("nowhere/at/all")
    assert store.get("a/k").data == b"1"
    assert [m.path for m in store.list("a/")] == ["a/k"]  # no staged file left behind
    assert sorted(os.listdir(tmp_path / "a")) == ["k"]
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(tmp_path / "a" / "k").st_mode) == 0o666 & ~umask  # as obstore's


_PUT_SCRIPT = """
import sys
import slatedb_core as sc
with sc.Db.open("db", sc.open_store(sys.argv[1])) as db:
    db.put(b"k", b"v")
"""
_FSYNC = re.compile(r"^(\d+) +f(?:data)?sync\(\d+<([^>]*)>")
# link or linkat (obstore's), maybe "<unfinished ...>"
# (a directory descriptor, shown with -y as fd<dir>: local stores link relative to one, SECURITY.md)
_DIRFD = r"(?:(?:AT_FDCWD|\d+)(?:<([^>]*)>)?, )?"
_LINK_AT = re.compile(rf'^(\d+) +link(?:at)?\({_DIRFD}"([^"]*)", {_DIRFD}"([^"]*)"')


def _link(call: str) -> tuple[str, str, str] | None:
    """(pid, source, target) of a link or linkat call, names joined to their directories."""
    m = _LINK_AT.match(call)
    if m is None:
        return None
    return m[1], os.path.join(m[2] or "", m[3]), os.path.join(m[4] or "", m[5])


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace not installed")
def test_strace_sees_a_durable_put_sync_its_wal_sst_and_wal_dir(tmp_path: Path) -> None:
    """The system calls of a whole process that opens a Db on file:// and makes one durable put:
    each WAL SST's bytes are fsynced before its name is linked into wal/ (so it is never seen
    empty after a crash), and wal/ is fsynced after, by the same thread, before the put returns."""
    log, lake = tmp_path / "strace.log", tmp_path / "lake"
    subprocess.run(
        [
            "strace",
            "-f",
            "-y",
            "-qq",
            "-o",
            str(log),
            "-e",
            "trace=fsync,fdatasync,link,linkat",
            sys.executable,
            "-c",
            _PUT_SCRIPT,
            lake.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    calls = log.read_text().splitlines()
    wal = f"{lake}/db/wal"
    links = [
        (i, m)
        for i, c in enumerate(calls)
        if (m := _link(c)) and m[2].startswith(f"{wal}/") and m[2].endswith(".sst")
    ]
    assert len(links) == 2, calls  # the writer's fence at open, then the put's WAL SST
    for i, link in links:
        pid, staged = link[0], link[1]
        synced = [(j, f[2]) for j, c in enumerate(calls) if (f := _FSYNC.match(c)) and f[1] == pid]
        assert any(j < i and path == staged for j, path in synced), (staged, calls)
        assert any(j > i and path == wal for j, path in synced), (wal, calls)


def test_an_unsynced_store_is_announced_once_per_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``SLATEDB_FILE_SYNC=false`` (which the test suite sets) or ``sync=false`` turns off what
    makes an acknowledged write durable: it must never do so silently, or one stray variable in
    a production environment loses writes on a power loss unnoticed. A warning names the source,
    once per process and source."""
    import slatedb_core.store.url as url

    monkeypatch.setattr(url, "_warned_unsynced", set())
    monkeypatch.setenv(SYNC_ENV, "false")
    with caplog.at_level("WARNING", logger="slatedb_core.store.url"):
        open_store((tmp_path / "a").as_uri())
        open_store((tmp_path / "b").as_uri())
        open_store((tmp_path / "c").as_uri() + "?sync=false")
        open_store((tmp_path / "d").as_uri() + "?sync=true")
    warned = [r.getMessage() for r in caplog.records if "NOT synced" in r.getMessage()]
    assert len(warned) == 2
    assert SYNC_ENV in warned[0] and "sync option" in warned[1]
