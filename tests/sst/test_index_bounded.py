"""An SST index whose block entries all name one entry is refused within bounded memory.

Issue 39, item 5 (the sibling of the manifest attack): the index is FlatBuffers too, so every
``BlockMeta`` offset can name the one whose ``first_key`` is 60 KB, and each would be copied.
The index decoder charges what it copies to the budget of
:mod:`slatedb_core.manifest.flatbuf` (twice the buffer plus a little).
"""

from __future__ import annotations

import struct
import tracemalloc

from slatedb_core.errors import CorruptionError
from slatedb_core.lsm.entries import batch_from_lists
from slatedb_core.sst import SstOptions, SstReader, encode_sst
from slatedb_core.sst.index import decode_index
from tests.fuzz.mutate import repair_sst

BIG = 60_000
ROWS = 3000


def test_index_entries_naming_one_entry_are_refused_within_bounds() -> None:
    # two long keys differing in their last byte: the second block's index key is long too
    keys = [b"k" * BIG + b"0", b"k" * BIG + b"1"] + [b"l%06d" % i for i in range(ROWS)]
    batch = batch_from_lists(keys, [1] * len(keys), [0] * len(keys), [b"v"] * len(keys))
    data, info = encode_sst(batch, SstOptions(block_size=64, bloom_bits_per_key=0))
    buf = bytearray(data)
    base = info.index_offset
    root = base + struct.unpack_from("<I", buf, base)[0]
    vt = root - struct.unpack_from("<i", buf, root)[0]
    field = root + struct.unpack_from("<H", buf, vt + 4)[0]  # SsTableIndex slot 0: block_meta
    vector = field + struct.unpack_from("<I", buf, field)[0]
    count = struct.unpack_from("<I", buf, vector)[0]
    assert count > ROWS // 4
    _, index_keys = decode_index("s.sst", data[base : base + info.index_len - 4])
    longest = max(range(count), key=lambda i: len(index_keys[i]))
    assert len(index_keys[longest]) > BIG
    at = vector + 4 + 4 * longest
    target = at + struct.unpack_from("<I", buf, at)[0]
    for i in range(count):
        at = vector + 4 + 4 * i
        struct.pack_into("<I", buf, at, target - at)
    crafted = repair_sst(bytes(buf))
    tracemalloc.start()
    try:
        try:
            SstReader.from_bytes(crafted, "s.sst")
            error = None
        except CorruptionError as e:
            error = e
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    bound = 64 * len(crafted) + (2 << 20)
    assert peak <= bound, f"peak {peak >> 20} MiB for a {len(crafted)}-byte SST"
    assert error is not None
