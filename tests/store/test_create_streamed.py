"""``ObjectStore.create_streamed`` (issue 42, goal 3): an object created from chunks produced while
it is written (a compaction's output SST, streamed as it is encoded) on the memory store, a local
disk (a staged file written chunk by chunk, synced, linked if absent) and S3 (joined: one
conditional PUT, see the last test) holds the bytes a single
``put_if_absent`` of the joined chunks holds; a name that exists raises ObjectAlreadyExists as
``put_if_absent`` does, and leaves the object there alone; an error raised by the chunks midway
propagates as itself and leaves nothing at the name (no staged file on disk, no multipart upload
left open on S3); a wrapper store (faults) keeps its own create semantics through the default,
a landed-but-unanswered attempt included."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from slatedb_core.errors import InjectedFault, ObjectAlreadyExists, ObjectNotFound
from slatedb_core.store.objectstore import STREAM_PART_BYTES, ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultyStore

SMALL: list[bytes | memoryview | bytearray] = [b"abc", memoryview(b"defgh"), bytearray(b"ij"), b""]
LARGE_PART = 3 << 20  # chunks of 3 MiB: the 8 MiB parts of S3's upload span chunks


def large_chunks(total: int, seed: int = 0) -> list[bytes]:
    data = os.urandom(16) * (total // 16) + os.urandom(total % 16 + seed)
    return [data[a : a + LARGE_PART] for a in range(0, len(data), LARGE_PART)]


def failing(chunks: list[bytes], after: int) -> Iterator[bytes]:
    for i, c in enumerate(chunks):
        if i == after:
            raise RuntimeError("the encoder failed")
        yield c


def leftovers(store: ObjectStore, root: Path | None) -> list[str]:
    """Staged files on a local disk (names obstore's listing hides), or objects."""
    if root is not None:
        return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    return sorted(m.path for m in store.list(""))


def root_of(store_url: str) -> Path | None:
    return Path(store_url.removeprefix("file://")) if store_url.startswith("file://") else None


@pytest.mark.parametrize("size", ["small", "large"])
def test_streamed_create_holds_the_single_put_s_bytes(
    store: ObjectStore, store_url: str, size: str
) -> None:
    chunks = SMALL if size == "small" else large_chunks(2 * STREAM_PART_BYTES + 12345)
    joined = b"".join(chunks)
    store.put_if_absent("ref/one.sst", joined)
    counts = store.counters.snapshot()
    store.create_streamed("db/compacted/x.sst", iter(chunks))
    assert store.counters.snapshot()["put_if_absent"] == counts["put_if_absent"] + 1
    assert store.get("db/compacted/x.sst").data == store.get("ref/one.sst").data == joined
    assert store.head("db/compacted/x.sst").size == len(joined)
    root = root_of(store_url)
    assert [p for p in leftovers(store, root) if "#" in p] == []


@pytest.mark.parametrize("size", ["small", "large"])
def test_streamed_create_of_an_existing_name_raises_and_keeps_it(
    store: ObjectStore, size: str
) -> None:
    chunks = SMALL if size == "small" else large_chunks(STREAM_PART_BYTES + 1)
    store.put_if_absent("db/x.sst", b"someone else's")
    with pytest.raises(ObjectAlreadyExists):
        store.create_streamed("db/x.sst", iter(chunks))
    assert store.get("db/x.sst").data == b"someone else's"


@pytest.mark.parametrize("after", [0, 1, 4])
def test_chunks_raising_midway_leave_nothing_at_the_name(
    store: ObjectStore, store_url: str, moto_s3_if_s3: object, after: int
) -> None:
    chunks = large_chunks(2 * STREAM_PART_BYTES + 1)  # 6 chunks: after 4, one part is uploaded
    before = leftovers(store, root_of(store_url))
    with pytest.raises(RuntimeError, match="the encoder failed"):
        store.create_streamed("db/compacted/y.sst", failing(chunks, after))
    with pytest.raises(ObjectNotFound):
        store.head("db/compacted/y.sst")
    after_files = leftovers(store, root_of(store_url))
    assert [p for p in after_files if p not in before and not p.endswith("/")] == []
    if moto_s3_if_s3 is not None:  # no multipart upload left open (nor completed)
        bucket = store_url.split("://", 1)[1].split("?", 1)[0].split("/", 1)[0]
        uploads = moto_s3_if_s3.client.list_multipart_uploads(Bucket=bucket)  # type: ignore[attr-defined]
        assert not uploads.get("Uploads")
    # the name is still free: a later create succeeds
    store.create_streamed("db/compacted/y.sst", iter(chunks))
    assert store.get("db/compacted/y.sst").data == b"".join(chunks)


@pytest.fixture
def moto_s3_if_s3(store_url: str, request: pytest.FixtureRequest) -> object:
    return request.getfixturevalue("moto_s3") if store_url.startswith("s3://") else None


def test_wrapper_store_creates_through_its_put_if_absent(store: ObjectStore) -> None:
    faulty = FaultyStore(store)
    faulty.fail_next("put_if_absent", "a/*", after_effect=True)  # landed, answer lost
    with pytest.raises(InjectedFault):
        faulty.create_streamed("a/x.sst", iter(SMALL))
    faulty.create_streamed("a/x.sst", iter(SMALL))  # the retry meets our own bytes: success
    assert store.get("a/x.sst").data == b"".join(SMALL)
    with pytest.raises(ObjectAlreadyExists):
        faulty.create_streamed("a/x.sst", iter([b"other"]))


def test_local_streamed_create_writes_each_chunk_before_taking_the_next(tmp_path: Path) -> None:
    store = open_store((tmp_path / "s").as_uri())
    seen: list[int] = []

    def chunks() -> Iterator[bytes]:
        for i in range(4):
            staged = [p for p in (tmp_path / "s" / "db").glob("x.sst#*")]
            seen.append(sum(p.stat().st_size for p in staged))
            yield bytes([i]) * 1000

    store.create_streamed("db/x.sst", chunks())
    assert seen == [0, 1000, 2000, 3000]  # on disk as it came: nothing held until the end
    assert store.get("db/x.sst").data == b"".join(bytes([i]) * 1000 for i in range(4))


def test_chunks_that_read_the_same_store_while_streamed(store: ObjectStore) -> None:
    """The chunks of a compaction's output are encoded while the sources are read, through the
    same store (the cluster test's distributed compaction on its S3 server). An S3 create that
    pulled the chunks inside obstore's multipart upload ran those reads inside obstore's own
    runtime, and the process panicked ("Cannot start a runtime from within a runtime"), a
    compaction step failed every time (make test-slow, tests/cluster, session 50)."""
    source = large_chunks(2 * STREAM_PART_BYTES + 99)
    for i, c in enumerate(source):
        store.put_if_absent(f"db/src/{i}", c)

    def reading() -> Iterator[bytes]:
        for i in range(len(source)):
            yield store.get(f"db/src/{i}").data  # a read per chunk, as the merge does

    store.create_streamed("db/compacted/y.sst", reading())
    assert store.get("db/compacted/y.sst").data == b"".join(source)
