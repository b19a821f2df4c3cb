"""An SST opened again after its folder was swapped behind the store's back reads the object
its name now holds, never its index from one file and its blocks from another (review 52 of
a627206).

A point lookup's block read (``ObjectStore.read_range``) on a ``file://`` store checks only the
file's own name in the directory it holds open, not the directories above it. A pipeline that
publishes a folder by renaming (``mv out out.prev && mv out.tmp out``) leaves the held directory
in ``out.prev``, where the old file still has its name. Opening the SST again without its info
read the footer and index from the new file (a suffix read walks afresh) and then its blocks
from the old one through the held descriptors: the old file's values under the new file's
index, silently when the two have the same layout (an ingest of a regenerated file). With its
info, the open read the old file's index too, and served the old file whole.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slatedb_core.sst import SstOptions, SstReader, encode_sst
from slatedb_core.store.objectstore import ObstoreObjectStore
from slatedb_core.store.url import open_store
from tests.sst import batch_of, entries_of

KEY = "out/part-0.sst"
OLD = [(b"key-%06d" % i, i + 1, 0, b"old-%096d" % i) for i in range(2000)]
NEW = [(b"key-%06d" % i, i + 1, 0, b"new-%096d" % i) for i in range(2000)]


def _swap_folder(root: Path, data: bytes) -> None:
    """What another process does: the folder moved aside and a new one put in its place."""
    (root / "out.tmp").mkdir()
    (root / "out.tmp/part-0.sst").write_bytes(data)
    os.rename(root / "out", root / "out.prev")
    os.rename(root / "out.tmp", root / "out")


@pytest.mark.parametrize("with_info", [False, True])
def test_an_sst_opened_after_its_folder_was_swapped_reads_the_new_file(
    tmp_path: Path, with_info: bool
) -> None:
    old, old_info = encode_sst(batch_of(OLD), SstOptions(block_size=4096))
    new, new_info = encode_sst(batch_of(NEW), SstOptions(block_size=4096))
    assert old_info == new_info  # the same layout: nothing but the values tells them apart
    store = open_store(tmp_path.as_uri())
    assert isinstance(store, ObstoreObjectStore)
    store.put(KEY, old)
    first = SstReader.open(store, KEY, old_info if with_info else None)
    assert first.get(OLD[700][0]) == OLD[700][1:]  # its descriptors are held now
    _swap_folder(tmp_path, new)
    again = SstReader.open(store, KEY, new_info if with_info else None)
    assert again.get(NEW[700][0]) == NEW[700][1:]
    assert again.get(NEW[1500][0]) == NEW[1500][1:]
    assert [row for b in again.scan() for row in entries_of(b)] == NEW
