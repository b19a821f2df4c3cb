"""Adversarial review of the live handle's read states (issue 37 hole 2 follow-up, review of
e03e54c/c96e74e): reads racing map swaps on one handle."""

from __future__ import annotations

from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from tests.table.conftest import OPTS, fill

ROWS = {b"b": b"1", b"c": b"2", b"n": b"3", b"x": b"4"}


def test_a_scan_of_an_old_state_survives_two_swaps_that_retire_a_reader_it_shares(
    mem: ObjectStore,
) -> None:
    """Review hole 1: map v1 [<m, >=m]; a scan on v1 is past its first shard's first row. A
    split of shard 0 (v2) keeps the >=m reader, shared by v1's and v2's states; a split of the
    >=m shard (v3) swaps v2's state out with no read on it, which used to close that shared
    reader at once, under the v1 scan still to read it (ReaderClosed mid-scan)."""
    with Table.create("t", mem, [b"m"], OPTS) as admin:
        fill(admin, ROWS)
        with Table.open("t", mem, OPTS) as h:
            it = h.scan()
            assert next(it) == (b"b", b"1")
            admin.split(0, b"c")
            h.refresh()  # v1 swapped out; the scan keeps it
            admin.split(admin.shard_map.shard_for(b"n").index, b"t")
            h.refresh()  # v2 swapped out, unused: its orphans close now
            assert list(it) == [(b"c", b"2"), (b"n", b"3"), (b"x", b"4")]
            assert h.get(b"x") == b"4"
