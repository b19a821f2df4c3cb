"""Contract tests for the ObjectStore interface on every store kind, plus ``open_store`` parsing."""

from __future__ import annotations

import os
import random
import re
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from slatedb_core.errors import (
    InvalidArgument,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
)
from slatedb_core.store.objectstore import (
    ObjectStore,
    ObjectVersion,
    ObstoreObjectStore,
    validate_relative_path,
)
from slatedb_core.store.url import open_store
from tests.conftest import MotoS3

# -- reads -------------------------------------------------------------------------------------


def test_get_whole_and_byte_range(store: ObjectStore) -> None:
    data = bytes(range(256)) * 4
    store.put("obj/data", data)
    whole = store.get("obj/data")
    assert whole.data == data
    assert whole.meta.size == len(data)
    assert whole.meta.path == "obj/data"
    assert store.get("obj/data", byte_range=(10, 300)).data == data[10:300]
    assert store.get("obj/data", byte_range=(0, 1)).data == data[:1]
    assert store.get("obj/data", byte_range=(1000, 1024)).data == data[1000:]
    assert store.get("obj/data", byte_range=(5, 5)).data == b""


def test_get_missing_raises_object_not_found(store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFound) as info:
        store.get("no/such/key")
    assert isinstance(info.value, FileNotFoundError)
    assert info.value.path == "no/such/key"
    with pytest.raises(FileNotFoundError):
        store.get("no/such/key", byte_range=(0, 4))


def test_head(store: ObjectStore) -> None:
    v = store.put("h/x", b"hello")
    meta = store.head("h/x")
    assert meta.path == "h/x"
    assert meta.size == 5
    assert meta.e_tag is not None
    assert ObjectVersion.of(meta) == v
    with pytest.raises(ObjectNotFound):
        store.head("h/missing")
    assert store.exists("h/x")
    assert not store.exists("h/missing")


def test_put_overwrites(store: ObjectStore) -> None:
    v1 = store.put("p/x", b"first")
    v2 = store.put("p/x", b"second, longer")
    assert store.get("p/x").data == b"second, longer"
    assert v1 != v2
    # Rewriting identical bytes is still a new write: a stale reader must notice it.
    v3 = store.put("p/x", b"second, longer")
    assert store.get("p/x").data == b"second, longer"
    assert store.head("p/x").size == len(b"second, longer")
    assert v3.e_tag is not None


# -- conditional writes ------------------------------------------------------------------------


def test_put_if_absent_twice(store: ObjectStore) -> None:
    v = store.put_if_absent("c/once", b"first")
    assert v.e_tag is not None or v.version is not None
    with pytest.raises(ObjectAlreadyExists) as info:
        store.put_if_absent("c/once", b"second")
    assert info.value.path == "c/once"
    assert store.get("c/once").data == b"first"


def test_put_if_match(store: ObjectStore) -> None:
    v1 = store.put("c/m", b"one")
    v2 = store.put_if_match("c/m", b"two", v1)
    assert v2 != v1
    assert store.get("c/m").data == b"two"
    with pytest.raises(PreconditionFailed):
        store.put_if_match("c/m", b"stale", v1)
    assert store.get("c/m").data == b"two"
    v3 = store.put_if_match("c/m", b"three", store.get("c/m").version)
    assert store.head("c/m").e_tag == v3.e_tag


def test_put_if_match_on_missing_key(store: ObjectStore) -> None:
    v = store.put("c/other", b"x")
    with pytest.raises(PreconditionFailed):
        store.put_if_match("c/missing", b"y", v)
    assert not store.exists("c/missing")
    store.delete("c/other")
    with pytest.raises(PreconditionFailed):
        store.put_if_match("c/other", b"y", v)
    assert not store.exists("c/other")


def test_put_if_match_needs_a_version(store: ObjectStore) -> None:
    store.put("c/v", b"x")
    with pytest.raises(InvalidArgument):
        store.put_if_match("c/v", b"y", ObjectVersion())


def test_get_if_none_match(store: ObjectStore) -> None:
    v = store.put("g/x", b"v1")
    assert v.e_tag is not None
    assert store.get_if_none_match("g/x", v.e_tag) is None
    store.put("g/x", b"v2 changed")
    res = store.get_if_none_match("g/x", v.e_tag)
    assert res is not None
    assert res.data == b"v2 changed"
    assert res.meta.e_tag is not None
    assert store.get_if_none_match("g/x", res.meta.e_tag) is None
    with pytest.raises(ObjectNotFound):
        store.get_if_none_match("g/missing", v.e_tag)


# -- listing -----------------------------------------------------------------------------------


def _paths(store: ObjectStore, prefix: str, start_after: str | None = None) -> list[str]:
    return [m.path for m in store.list(prefix, start_after=start_after)]


def test_list_sorted_and_start_after(store: ObjectStore) -> None:
    names = [f"k/{i:04d}.sst" for i in range(0, 150, 10)] + [f"k/n{i}" for i in range(15)]
    rng = random.Random(7)
    shuffled = names[:]
    rng.shuffle(shuffled)
    for name in shuffled:
        store.put(name, name.encode())
    for other in ("j/x", "k2/x", "kk"):
        store.put(other, b"-")
    expected = sorted(names)
    assert len(expected) == 30
    assert _paths(store, "k") == expected
    assert _paths(store, "k/") == expected
    metas = list(store.list("k"))
    assert all(m.size == len(m.path) for m in metas)
    assert _paths(store, "k", start_after=expected[10]) == expected[11:]
    assert _paths(store, "k", start_after=expected[-1]) == []
    assert _paths(store, "k", start_after="k/0055") == [p for p in expected if p > "k/0055"]
    assert _paths(store, "") == sorted([*names, "j/x", "k2/x", "kk"])
    assert _paths(store, "nothing/here") == []


def test_list_prefix_is_a_directory(store: ObjectStore) -> None:
    for key in ("a/b/1", "a/b/deep/2", "a/bc/x", "a/b.x", "ab/y"):
        store.put(key, b"x")
    assert _paths(store, "a/b") == ["a/b/1", "a/b/deep/2"]
    assert _paths(store, "a") == ["a/b.x", "a/b/1", "a/b/deep/2", "a/bc/x"]


def test_delete_is_idempotent(store: ObjectStore) -> None:
    store.delete("d/never-existed")
    store.put("d/x", b"x")
    store.delete("d/x")
    assert not store.exists("d/x")
    store.delete("d/x")
    assert _paths(store, "d") == []


def test_request_counters(store: ObjectStore) -> None:
    store.counters.reset()
    v = store.put("r/a", b"1")
    store.put_if_absent("r/b", b"2")
    store.put_if_match("r/a", b"3", v)
    store.get("r/a")
    store.get_if_none_match("r/a", '"nope"')
    store.head("r/b")
    store.copy_if_absent("r/b", "r/c")
    list(store.list("r"))
    store.delete("r/b")
    counts = store.counters.snapshot()
    assert counts == {
        "get": 2,
        "head": 1,
        "put": 1,
        "put_if_absent": 1,
        "put_if_match": 1,
        "copy": 1,
        "list": 1,
        "delete": 1,
    }
    assert store.counters.total() == 9
    with pytest.raises(ObjectNotFound):
        store.get("r/missing")
    assert store.counters.snapshot()["get"] == 3  # failed requests are requests too
    store.counters.reset()
    assert store.counters.total() == 0


# -- server-side copy --------------------------------------------------------------------------


def test_copy_if_absent(store: ObjectStore) -> None:
    data = bytes(range(256)) * 40
    store.put("stage/part-0.sst", data)
    store.copy_if_absent("stage/part-0.sst", "db/compacted/x.sst")
    assert store.get("db/compacted/x.sst").data == data
    assert store.head("db/compacted/x.sst").size == len(data)
    assert store.get("stage/part-0.sst").data == data  # the source stays
    # the copy is an object of its own: deleting the source leaves it readable
    store.delete("stage/part-0.sst")
    assert store.get("db/compacted/x.sst").data == data
    assert [m.path for m in store.list("db/compacted")] == ["db/compacted/x.sst"]


def test_copy_if_absent_missing_source(store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFound) as info:
        store.copy_if_absent("stage/missing.sst", "db/y.sst")
    assert info.value.path == "stage/missing.sst"
    assert not store.exists("db/y.sst")


def test_copy_if_absent_existing_destination_is_left_alone(store: ObjectStore) -> None:
    store.put("stage/new", b"new bytes")
    store.put_if_absent("db/taken", b"old bytes")
    before = store.head("db/taken")
    with pytest.raises(ObjectAlreadyExists) as info:
        store.copy_if_absent("stage/new", "db/taken")
    assert info.value.path == "db/taken"
    assert store.get("db/taken").data == b"old bytes"
    assert store.head("db/taken").e_tag == before.e_tag
    # a copy onto an object that is itself a copy is refused too
    store.copy_if_absent("stage/new", "db/copy")
    with pytest.raises(ObjectAlreadyExists):
        store.copy_if_absent("db/taken", "db/copy")
    assert store.get("db/copy").data == b"new bytes"


def test_copy_if_absent_on_a_local_filesystem_is_a_hard_link(tmp_path: Path) -> None:
    store = open_store(tmp_path.as_uri())
    store.put("stage/a.sst", b"sst bytes")
    store.copy_if_absent("stage/a.sst", "db/compacted/b.sst")
    src, dst = os.stat(tmp_path / "stage/a.sst"), os.stat(tmp_path / "db/compacted/b.sst")
    assert (src.st_ino, src.st_dev) == (dst.st_ino, dst.st_dev)
    assert src.st_nlink == 2
    # objects are replaced, never written in place: an overwrite of the source (a new inode)
    # and its delete leave the copy as it was
    store.put("stage/a.sst", b"other bytes")
    assert store.get("db/compacted/b.sst").data == b"sst bytes"
    store.delete("stage/a.sst")
    assert store.get("db/compacted/b.sst").data == b"sst bytes"
    assert os.stat(tmp_path / "db/compacted/b.sst").st_nlink == 1


def test_copy_if_absent_race_has_one_winner(store: ObjectStore) -> None:
    for t in range(THREADS):
        store.put(f"race/src{t}", f"source {t}".encode())

    def attempt(i: int) -> bytes | None:
        try:
            store.copy_if_absent(f"race/src{i}", "race/dst")
        except ObjectAlreadyExists:
            return None
        return f"source {i}".encode()

    wins = _race(attempt)
    assert len(wins) == 1, f"{len(wins)} winners"
    assert store.get("race/dst").data == wins[0]


@pytest.mark.s3
def test_copy_if_absent_without_conditional_copy_falls_back(moto_s3: MotoS3) -> None:
    """An S3Store configured without copy_if_not_exists answers NotSupported to a conditional
    copy; the adapter then GETs the source and creates the copy with put_if_absent."""
    from obstore.store import S3Store

    inner = S3Store(
        moto_s3.new_bucket(),
        config={
            "conditional_put": "etag",
            "endpoint": moto_s3.endpoint,
            "region": "us-east-1",
            "access_key_id": "testing",
            "secret_access_key": "testing",
            "virtual_hosted_style_request": False,
        },
        client_options={"allow_http": True},
    )
    store = ObstoreObjectStore(inner, url="s3://plain", sorted_listing=True)
    store.put("stage/s", b"payload")
    store.copy_if_absent("stage/s", "db/d")
    assert store.get("db/d").data == b"payload"
    assert store.counters.snapshot()["copy"] == 1
    assert store.counters.snapshot()["put_if_absent"] == 1  # the fallback's create
    with pytest.raises(ObjectAlreadyExists):
        store.copy_if_absent("stage/s", "db/d")
    with pytest.raises(ObjectNotFound):
        store.copy_if_absent("stage/missing", "db/e")
    assert not store.exists("db/e")


# -- races -------------------------------------------------------------------------------------

THREADS = 8


def _race(attempt: Callable[[int], bytes | None]) -> list[bytes]:
    """Run ``attempt(i)`` on THREADS threads released together; return what the winners wrote."""
    barrier = threading.Barrier(THREADS)
    wins: list[bytes] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=10)
            won = attempt(i)
            if won is not None:
                with lock:
                    wins.append(won)
        except BaseException as e:
            with lock:
                errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    return wins


def test_put_if_match_race_has_one_winner_per_round(store: ObjectStore) -> None:
    store.put("race/m", b"start")
    for rnd in range(20):
        base = store.get("race/m").version

        def attempt(i: int, rnd: int = rnd, base: ObjectVersion = base) -> bytes | None:
            data = f"round {rnd} thread {i}".encode()
            try:
                store.put_if_match("race/m", data, base)
            except PreconditionFailed:
                return None
            return data

        wins = _race(attempt)
        assert len(wins) == 1, f"round {rnd}: {len(wins)} winners"
        assert store.get("race/m").data == wins[0]


def test_put_if_absent_race_has_one_winner(store: ObjectStore) -> None:
    for rnd in range(3):
        key = f"race/a{rnd}"

        def attempt(i: int, key: str = key) -> bytes | None:
            data = f"thread {i}".encode()
            try:
                store.put_if_absent(key, data)
            except ObjectAlreadyExists:
                return None
            return data

        wins = _race(attempt)
        assert len(wins) == 1, f"{key}: {len(wins)} winners"
        assert store.get(key).data == wins[0]


# -- open_store --------------------------------------------------------------------------------


def test_open_memory() -> None:
    a = open_store("memory://")
    b = open_store("memory://")
    a.put("k", b"a")
    assert not b.exists("k")  # an anonymous memory store is private
    assert a.url == "memory://"


def test_open_named_memory_is_shared() -> None:
    name = f"memory://shared-{random.Random().getrandbits(64):x}"
    a = open_store(name)
    open_store(name).put("k", b"v")
    assert a.get("k").data == b"v"
    assert a.url == name


def test_open_file_url(tmp_path: Path) -> None:
    root = tmp_path / "db root"
    s = open_store(root.as_uri())
    assert root.is_dir()
    assert s.url == root.as_uri()
    s.put("x/y", b"data")
    assert (root / "x" / "y").read_bytes() == b"data"
    assert open_store(str(root)).get("x/y").data == b"data"


def test_open_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    s = open_store("rel/db")
    s.put("k", b"v")
    assert (tmp_path / "rel" / "db" / "k").read_bytes() == b"v"
    assert s.url == (tmp_path / "rel" / "db").as_uri()


def test_open_pathlike(tmp_path: Path) -> None:
    s = open_store(tmp_path / "p")
    s.put("k", b"v")
    assert (tmp_path / "p" / "k").read_bytes() == b"v"


@pytest.mark.s3
def test_open_s3_from_query(moto_s3: MotoS3) -> None:
    bucket = moto_s3.new_bucket()
    s = open_store(moto_s3.url(bucket, "some/prefix"))
    assert s.url == f"s3://{bucket}/some/prefix"
    s.put("k", b"from query")
    body = moto_s3.client.get_object(Bucket=bucket, Key="some/prefix/k")["Body"].read()
    assert body == b"from query"
    assert [m.path for m in s.list("")] == ["k"]


@pytest.mark.s3
def test_open_s3_from_environment(moto_s3: MotoS3, monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = moto_s3.new_bucket()
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_s3.endpoint)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    s = open_store(f"s3://{bucket}/envpre")
    s.put("k", b"from env")
    body = moto_s3.client.get_object(Bucket=bucket, Key="envpre/k")["Body"].read()
    assert body == b"from env"


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("gs://x", "unsupported"),
        ("ftp://x", "unsupported"),
        ("file://host/x", "host"),
        ("file:relative", "file"),
        ("file:///tmp/a/../b", ".."),
        ("some/../path", ".."),
        ("s3://", "bucket"),
        ("s3:///prefix", "bucket"),
        ("s3://bucket/a/../b", ".."),
        ("s3://bucket?color=blue", "color"),
        ("s3://bucket?endpoint=ftp://host", "endpoint"),
        ("s3://bucket?endpoint=localhost:9000", "endpoint"),
        ("s3://bucket?endpoint=http://127.0.0.1:9", "allow_http"),
        ("s3://bucket?endpoint=https://s3.test&allow_http=maybe", "allow_http"),
        ("", "non-empty"),
        ("   ", "non-empty"),
    ],
)
def test_open_store_rejects(
    url: str, needle: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A wrongly accepted local path must land in tmp_path, not in the repository.
    monkeypatch.chdir(tmp_path)
    for var in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT", "AWS_ALLOW_HTTP"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(InvalidArgument, match="(?i)" + re.escape(needle)):
        open_store(url)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "path",
    ["/abs", "a/../b", "..", ".", "./a", "a//b", "a/", "a\\b", "", "a\x00b", "C:/x"],
)
def test_validate_relative_path_rejects(path: str) -> None:
    with pytest.raises(InvalidArgument):
        validate_relative_path(path)


@pytest.mark.parametrize("path", ["a", "a/b.c", "wal/00000000000000000001.sst", "..a/b.."])
def test_validate_relative_path_accepts(path: str) -> None:
    assert validate_relative_path(path) == path


def test_validate_relative_path_empty_allowed() -> None:
    assert validate_relative_path("", allow_empty=True) == ""
    with pytest.raises(InvalidArgument):
        validate_relative_path(123)  # type: ignore[arg-type]


# -- flush_and_evict -------------------------------------------------------------------------


def _resident_pages(path: Path) -> int:
    """Pages of ``path`` in the page cache: mincore(2) on a fresh private mapping (mapping a file
    reads none of it)."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    size = path.stat().st_size
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = (ctypes.c_ubyte * pages)()
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)
        anchor = ctypes.c_char.from_buffer(m)
        try:
            rc = libc.mincore(ctypes.c_void_p(ctypes.addressof(anchor)), ctypes.c_size_t(size), vec)
        finally:
            del anchor
            m.close()
    if rc != 0:
        raise OSError(ctypes.get_errno(), "mincore")
    return sum(v & 1 for v in vec)


def test_flush_and_evict_leaves_the_objects_as_they_were(store: ObjectStore) -> None:
    store.put("bulk/a.sst", b"a" * 10_000)
    store.put_if_absent("bulk/b.sst", b"b")
    store.counters.reset()
    store.flush_and_evict(["bulk/a.sst", "bulk/b.sst"])
    assert store.counters.total() == 0  # no request reaches the store
    assert store.get("bulk/a.sst").data == b"a" * 10_000
    assert store.get("bulk/b.sst").data == b"b"


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="needs posix_fadvise (Linux)")
def test_flush_and_evict_drops_a_local_file_from_the_page_cache(tmp_path: Path) -> None:
    from slatedb_core.store.nocas import NoConditionalWrites
    from slatedb_core.testing import FaultyStore

    store = open_store(tmp_path.as_uri())
    data = os.urandom(4 << 20)
    for wrapped in (store, FaultyStore(store), NoConditionalWrites(store)):  # wrappers pass it on
        name = f"stage/{type(wrapped).__name__}.sst"
        wrapped.put_if_absent(name, data)
        assert _resident_pages(tmp_path / name) > 0  # just written: cached
        wrapped.flush_and_evict([name])
        assert _resident_pages(tmp_path / name) == 0
        assert wrapped.get(name).data == data  # read back from the device
    with pytest.raises(ObjectNotFound):
        store.flush_and_evict(["stage/missing.sst"])
    for bad in ("../outside", "/etc/passwd", "a//b"):
        with pytest.raises(InvalidArgument):
            store.flush_and_evict([bad])


@pytest.mark.parametrize("method", ["put", "put_if_absent"])
def test_a_written_buffer_reused_by_the_caller_does_not_change_the_stored_object(
    store: ObjectStore, method: str
) -> None:
    """Writers hand the store reusable scratch buffers (a bytearray or a memoryview of one: the
    bulk SST encoder does). Once a write returns, the object must hold the bytes it was given,
    whatever the caller then does with its buffer; the memory store used to keep a reference to
    the caller's buffer, so the next SST encoded into it silently rewrote an acknowledged one."""
    scratch = bytearray(b"first SST bytes")
    getattr(store, method)("staged/a.sst", memoryview(scratch))
    scratch[:] = b"the next SST..."
    assert store.get("staged/a.sst").data == b"first SST bytes"
    other = bytearray(b"second")
    getattr(store, method)("staged/b.sst", other)
    other[:] = b"XXXXXX"
    assert store.get("staged/b.sst").data == b"second"
