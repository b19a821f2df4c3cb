"""A ``file://`` store's reads answer as obstore's LocalStore does (issue 39, item 4: the reads
moved from LocalStore, which follows links, to the guarded walk of
``slatedb_core/store/local_root.py``). Each answer is compared with the real LocalStore's over
the same directory (``store.inner``)."""

from __future__ import annotations

from pathlib import Path

import obstore
import pytest

from slatedb_core.errors import ObjectNotFound, StoreError
from slatedb_core.store.objectstore import ObstoreObjectStore
from slatedb_core.store.url import open_store


@pytest.fixture
def store(tmp_path: Path) -> ObstoreObjectStore:
    s = open_store(tmp_path.as_uri())
    assert isinstance(s, ObstoreObjectStore)
    s.put("a/b/f1", b"0123456789")
    s.put("a/b/c/empty", b"")
    s.put("a/bc", b"y")
    s.put("a/b/sp ace%20", b"z")
    (tmp_path / "a" / "b" / "g#12").write_bytes(b"staged")  # a write in flight: no object
    (tmp_path / "a" / "b" / "h#x").write_bytes(b"w")  # not a staged name: an object
    return s


def test_metadata_and_bytes_are_localstores(store: ObstoreObjectStore) -> None:
    for key in ("a/b/f1", "a/b/c/empty", "a/b/sp ace%20", "a/b/h#x"):
        theirs = obstore.get(store.inner, key)
        ours = store.get(key)
        assert ours.data == bytes(theirs.bytes())
        meta = theirs.meta
        assert (ours.meta.size, ours.meta.e_tag, ours.meta.last_modified, ours.meta.version) == (
            meta["size"],
            meta["e_tag"],
            meta["last_modified"],
            meta["version"],
        )
        assert store.head(key) == ours.meta


def test_ranges_and_suffixes_are_localstores(store: ObstoreObjectStore) -> None:
    for rng in [(0, 10), (5, 20), (9, 10), (2, 3)]:
        theirs = bytes(obstore.get(store.inner, "a/b/f1", options={"range": rng}).bytes())
        assert store.get("a/b/f1", byte_range=rng).data == theirs
    for n in (1, 3, 10, 100):
        theirs = bytes(obstore.get(store.inner, "a/b/f1", options={"range": {"suffix": n}}).bytes())
        assert store.get_suffix("a/b/f1", n).data == theirs
    assert store.get_suffix("a/b/c/empty", 3).data == b""
    for key, rng in [("a/b/f1", (10, 20)), ("a/b/f1", (12, 20)), ("a/b/c/empty", (0, 3))]:
        with pytest.raises(Exception):  # noqa: B017 (LocalStore: a generic error)
            obstore.get(store.inner, key, options={"range": rng})
        with pytest.raises(StoreError):
            store.get(key, byte_range=rng)


def test_missing_and_directories_are_not_found(store: ObstoreObjectStore) -> None:
    for key in ("a/b", "a/zz", "zz/y", "a/b/f1/x"):
        with pytest.raises(ObjectNotFound):
            store.get(key)
        with pytest.raises(ObjectNotFound):
            store.head(key)
        assert not store.exists(key)


def test_listings_are_localstores(store: ObstoreObjectStore) -> None:
    for prefix in ("a/b", "a", "", "a/b/f1", "zz", "a/b/"):
        theirs = sorted(
            m["path"]
            for batch in obstore.list(store.inner, prefix.rstrip("/") or None)
            for m in batch
        )
        assert [m.path for m in store.list(prefix)] == theirs
    assert [m.path for m in store.list("a", start_after="a/b/c/empty")] == [
        "a/b/f1",
        "a/b/h#x",
        "a/b/sp ace%20",
        "a/bc",
    ]


def test_a_conditional_get_answers_none_for_the_current_e_tag(store: ObstoreObjectStore) -> None:
    e_tag = store.head("a/b/f1").e_tag
    assert e_tag is not None
    assert store.get_if_none_match("a/b/f1", e_tag) is None
    got = store.get_if_none_match("a/b/f1", '"other"')
    assert got is not None and got.data == b"0123456789"
