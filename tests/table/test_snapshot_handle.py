"""A table opened on a snapshot answers for the snapshot, not for the latest map (follow-up of
issue 37 hole 3, commit b49159b): its ``value_encoding`` is the snapshot's own
(``snapshot_value_encoding``, the lookup every read path uses), and its ``shard_map``,
``shards``, ``shard_for`` and ``route`` are those of the snapshot's map version, whatever split,
merge or overwrite committed since. Before, ``value_encoding`` read the latest map, so after an
overwrite that recorded other columns the snapshot handle named the new columns."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta

import pyarrow as pa
import pytest

from slatedb_core.errors import InvalidArgument
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.table.shardmap import ValueEncoding

from .conftest import OPTS, fill

OLD = ValueEncoding(
    "json",
    json.dumps(
        {
            "type": "struct",
            "fields": [{"name": "a", "type": "long", "nullable": True, "metadata": {}}],
        }
    ),
)
NEW = ValueEncoding(
    "json",
    json.dumps(
        {
            "type": "struct",
            "fields": [{"name": "b", "type": "string", "nullable": True, "metadata": {}}],
        }
    ),
)
KEYS = [b"a", b"k", b"m", b"q", b"t", b"z"]


def _overwrite(t: Table, encoding: ValueEncoding | None) -> None:
    t.overwrite(
        [pa.record_batch({"key": pa.array([b"a"]), "value": pa.array([b'{"b": "x"}'])})],
        value_encoding=encoding,
    )


def test_a_snapshot_handle_reports_the_snapshots_encoding_after_an_overwrite_changed_it(
    mem: ObjectStore,
) -> None:
    with Table.create("t", mem, [b"m"], OPTS) as t:
        t.record_value_encoding(OLD)
        fill(t, {b"a": b'{"a": 1}', b"q": b'{"a": 2}'}, flush=True)
        snap = t.snapshot()
        _overwrite(t, NEW)
        assert t.value_encoding == NEW
        with Table.open("t", mem, OPTS, snapshot=snap) as at:
            assert at.value_encoding == OLD
            assert at.shard_map.value_encoding == OLD
            assert at.get(b"q") == b'{"a": 2}'


def test_a_snapshot_handle_of_plain_values_reports_none_after_an_encoded_overwrite(
    mem: ObjectStore,
) -> None:
    with Table.create("t", mem, [], OPTS) as t:
        t.record_value_encoding(None)
        fill(t, {b"a": b"plain"}, flush=True)
        snap = t.snapshot()
        _overwrite(t, NEW)
        with Table.open("t", mem, OPTS, snapshot=snap) as at:
            assert at.value_encoding is None
            assert at.shard_map.value_encoding is None


def test_a_snapshot_serialised_before_snapshots_carried_the_encoding_looks_up_its_version(
    mem: ObjectStore,
) -> None:
    with Table.create("t", mem, [b"m"], OPTS) as t:
        t.record_value_encoding(OLD)
        snap = t.snapshot()
        old_style = dataclasses.replace(snap, value_encoding=None, carries_encoding=False)
        _overwrite(t, NEW)
        with Table.open("t", mem, OPTS, snapshot=old_style) as at:
            assert at.value_encoding == OLD
            assert at.shard_map.value_encoding == OLD


def test_a_snapshot_handle_routes_by_the_snapshots_map_after_splits_and_an_overwrite(
    mem: ObjectStore,
) -> None:
    with Table.create("t", mem, [b"m"], OPTS) as t:
        t.record_value_encoding(OLD)
        fill(t, {k: b'{"a": 0}' for k in KEYS}, flush=True)
        snap = t.snapshot()
        t.split(1, b"t")
        t.split(0, b"c")
        with Table.open("t", mem, OPTS, snapshot=snap) as at:
            _overwrite(t, NEW)
            t.split(1, b"f")  # the overwrite kept the split points c, m, t
            at.refresh()  # a snapshot handle never changes its map
            assert at.shard_map.id == snap.shard_map_id
            assert at.shard_map.shards == snap.shards
            assert at.shards == list(snap.shards)
            assert at.shard_map.split_points == (b"m",)
            want = [0 if k < b"m" else 1 for k in KEYS]
            assert at.route(KEYS).to_pylist() == want
            assert [at.shard_for(k).index for k in KEYS] == want
            assert [at.shard_for(k).db_path for k in KEYS] == [snap.shards[i].db_path for i in want]
            assert at.get_many(KEYS) == [b'{"a": 0}'] * len(KEYS)
            assert at.value_encoding == OLD


def test_a_snapshot_handle_whose_encoding_nothing_tells_any_more_says_so_and_still_reads(
    mem: ObjectStore,
) -> None:
    with Table.create("t", mem, [b"m"], OPTS) as t:
        t.record_value_encoding(OLD)
        fill(t, {b"a": b'{"a": 1}'}, flush=True)
        snap = t.snapshot()
        old_style = dataclasses.replace(snap, value_encoding=None, carries_encoding=False)
        _overwrite(t, NEW)
        assert t.maps.collect(timedelta(0)) >= 1  # the snapshot's map version is gone
        with Table.open("t", mem, OPTS, snapshot=old_style) as at:
            with pytest.raises(InvalidArgument, match="read its raw values"):
                _ = at.value_encoding
            assert at.shard_map.value_encoding is None  # unknown
            assert at.get(b"a") == b'{"a": 1}'
