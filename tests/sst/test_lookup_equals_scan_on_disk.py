"""A point lookup through several overlapping L0 SSTs on a local disk answers what a scan reads
(newest version, tombstones hiding older ones across SSTs, absent keys), lookup after lookup
of each block (past ``PREFIX_AT`` and ``CHECK_AT``), with the same key object and fresh ones;
a damaged data block or bloom filter raises CorruptionError, never answers None or a value.
Adversarial review of 5d63ff3 (review51, session 51)."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import numpy as np
import pytest

from slatedb_core import Db, DbOptions
from slatedb_core.errors import CorruptionError
from slatedb_core.sst import SstReader
from slatedb_core.sst.bloom import bloom_from_filter_block, build_filter_block, hash_key
from slatedb_core.sst.raw_block import CHECK_AT
from slatedb_core.store.url import open_store

OPTIONS = DbOptions(block_size=256, compression="none")


def _build(tmp_path: Path) -> tuple[Db, dict[bytes, bytes | None], list[Path]]:
    store = open_store(tmp_path.as_uri())
    db = Db.open("db", store, OPTIONS)
    rng = random.Random(51)
    model: dict[bytes, bytes | None] = {}
    for gen in range(4):
        for _ in range(300):
            k = b"k%04d" % rng.randrange(600)
            if rng.random() < 0.25:
                db.delete(k, await_durable=False)
                model[k] = None
            else:
                v = b"g%d-%d" % (gen, rng.randrange(10**6))
                db.put(k, v, await_durable=False)
                model[k] = v
        db.flush_memtable()
    ssts = sorted((tmp_path / "db" / "compacted").glob("*.sst"))
    assert len(ssts) == 4
    return db, model, ssts


def test_lookups_answer_the_scan_again_and_again(tmp_path: Path) -> None:
    db, model, _ = _build(tmp_path)
    try:
        scanned = dict(db.scan())
        assert scanned == {k: v for k, v in model.items() if v is not None}
        keys = [b"k%04d" % i for i in range(600)] + [b"k0000\x00", b"a", b"z", b"k0599~"]
        for round_ in range(CHECK_AT + 3):
            for k in keys if round_ % 2 else reversed(keys):
                want = scanned.get(k)
                assert db.get(k) == want, (round_, k)
                assert db.get(bytes(bytearray(k))) == want, (round_, k)  # a fresh key object
    finally:
        db.close()


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x10
    path.chmod(0o644)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("where", ["data", "filter"])
def test_a_damaged_newest_sst_raises_rather_than_answers(tmp_path: Path, where: str) -> None:
    db, model, ssts = _build(tmp_path)
    db.close()
    store = open_store(tmp_path.as_uri())
    newest = ssts[-1]  # ULIDs sort by time: the last flush
    info = SstReader.open(store, f"db/compacted/{newest.name}").info
    if where == "data":
        _flip(newest, 20)  # inside block 0
    else:
        _flip(newest, info.filter_offset + info.filter_len // 2)
    first, last = info.first_key, info.last_key
    assert first is not None and last is not None
    db = Db.open("db", store, OPTIONS)
    try:
        # the newest SST's first key is in its block 0; with a damaged filter every key within
        # its range reaches it first, present anywhere or absent everywhere
        asked = [first] if where == "data" else [first, *model, b"k0300~"]
        for k in asked:
            if first <= k <= last:
                with pytest.raises(CorruptionError):
                    db.get(k)
    finally:
        db.close()


def test_a_viewed_filter_does_not_change_when_its_buffer_is_reused() -> None:
    """review51: BloomFilter viewed its bits in a writable buffer it was given (5d63ff3); a
    reused buffer then answered absent for present keys. It copies a writable one now."""
    keys = [b"key%d" % i for i in range(200)]
    block = build_filter_block(np.array([hash_key(k) for k in keys], np.uint64), 10)
    scratch = bytearray(block)
    bloom = bloom_from_filter_block("x", memoryview(scratch), True)
    assert bloom is not None and all(bloom.may_contain(k) for k in keys)
    scratch[:] = bytes(len(scratch))  # the buffer reused for the next read
    assert all(bloom.may_contain(k) for k in keys)


def test_threads_sharing_key_objects_answer_the_scan(tmp_path: Path) -> None:
    """The walk's remembered key and hash (``reader._ASKED``) are one module global: threads
    looking up the same key objects, and others, at once still answer each key's scan row."""
    db, _, _ = _build(tmp_path)
    try:
        scanned = dict(db.scan())
        keys = [b"k%04d" % i for i in range(600)] + [b"k0000\x00", b"zz"]
        wrong: list[bytes] = []

        def run(seed: int) -> None:
            rng = random.Random(seed)
            for _ in range(3000):
                k = keys[rng.randrange(len(keys))]
                if seed % 2:
                    k = bytes(bytearray(k))
                if db.get(k) != scanned.get(k):
                    wrong.append(k)

        threads = [threading.Thread(target=run, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert wrong == []
    finally:
        db.close()
