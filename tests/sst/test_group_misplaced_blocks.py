"""Two blocks of one GET swapped in place (each still CRC-valid, the same sizes, so the index
offsets still frame them; review 53 of 9d58aea): whether the blocks come as one Block spanning
the group or one by one, every reader of a key range (grouped scans, compaction's blocks and
source rows) must raise a CorruptionError naming the misplaced block, never serve its rows,
for every codec."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from slatedb_core.compactor.sources import sst_rows
from slatedb_core.errors import CorruptionError
from slatedb_core.sst import SstOptions, SstReader, encode_sst
from tests.sst import batch_of

READS: dict[str, Callable[[SstReader], object]] = {
    "scan": lambda r: list(r.scan(groups=True)),
    "scan-range": lambda r: list(r.scan(b"k0005", b"k0390", groups=True)),
    "blocks": lambda r: list(r.blocks(0, r.block_count)),
    "sst_rows": lambda r: list(sst_rows(r, b"k0001", b"k0399", None)),
    "sst_rows-readahead": lambda r: list(sst_rows(r, None, None, 600)),
}


@pytest.mark.parametrize("read", sorted(READS))
@pytest.mark.parametrize("codec", ["none", "lz4", "zstd"])
def test_swapped_blocks_of_a_group_are_corruption_naming_the_block(codec: str, read: str) -> None:
    entries = [(b"k%04d" % i, 1000 - i, 0, b"v" * 20) for i in range(400)]
    data, _ = encode_sst(batch_of(entries), SstOptions(block_size=256, compression=codec))
    offs = SstReader.from_bytes(data, "t").block_offsets
    sizes = [b - a for a, b in itertools.pairwise(offs)]
    j = next(j for j in range(3, len(sizes) - 3) if sizes[j] == sizes[j + 2])
    buf = bytearray(data)
    a, b, c, d = offs[j], offs[j + 1], offs[j + 2], offs[j + 3]
    buf[a:b], buf[c:d] = data[c:d], data[a:b]
    with pytest.raises(CorruptionError, match=f"block {j} keys disagree with the index"):
        READS[read](SstReader.from_bytes(bytes(buf), "t"))
