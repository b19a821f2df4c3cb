"""SlateDB 0.17's GC cutoff, applied by our GC while a SlateDB writer or compactor holds the
database (slatedb_core.gc.cutoffs; docs/format.md, "What each engine ignores of the other's")."""

from __future__ import annotations

from ulid import ULID

from slatedb_core.compactor.compactions_model import CompactionRecord, CompactionsState
from slatedb_core.gc.cutoffs import slatedb_cutoff_ms
from slatedb_core.manifest.codec import decode_manifest, encode_manifest
from slatedb_core.manifest.model import CompactedSst, Manifest, SstView


def _ulid(ms: int) -> ULID:
    return ULID.from_timestamp(ms / 1000)


def _with_l0(ms: int, **kw: int) -> Manifest:
    sst = _ulid(ms)
    return Manifest(ssts=(CompactedSst(sst),), l0=(SstView(sst, sst),), **kw)


def test_only_our_actors_no_cutoff() -> None:
    m = _with_l0(
        5_000, writer_epoch=3, our_writer_epoch=3, compactor_epoch=2, our_compactor_epoch=2
    )
    assert slatedb_cutoff_ms(m, None) >= 2**47


def test_slatedb_writer_keeps_everything_from_the_newest_l0_on() -> None:
    m = _with_l0(5_000, writer_epoch=4, our_writer_epoch=3)
    assert slatedb_cutoff_ms(m, None) == 4_999
    # no L0: the last compacted L0 view; neither: nothing may go
    assert (
        slatedb_cutoff_ms(Manifest(writer_epoch=1, last_compacted_l0_view_id=_ulid(7_000)), None)
        == 6_999
    )
    assert slatedb_cutoff_ms(Manifest(writer_epoch=1), None) == -1


def test_slatedb_compactor_keeps_everything_from_its_oldest_compaction_on() -> None:
    m = _with_l0(9_000, compactor_epoch=2, our_compactor_epoch=1)
    record = CompactionsState(
        compactor_epoch=2,
        compactions=(
            CompactionRecord(_ulid(3_000), "l0", (), (), 0),
            CompactionRecord(_ulid(6_000), "l0", (), (), 0),
        ),
    )
    assert slatedb_cutoff_ms(m, (1, record)) == 2_999
    assert slatedb_cutoff_ms(m, None) >= 2**47  # no record: no compaction running


def test_our_epochs_survive_our_codec() -> None:
    m = Manifest(writer_epoch=3, our_writer_epoch=3, compactor_epoch=2, our_compactor_epoch=2)
    back = decode_manifest(encode_manifest(m), name="m")
    assert (back.our_writer_epoch, back.our_compactor_epoch) == (3, 2)
