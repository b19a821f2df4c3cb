"""The table's record of how its values hold columns (``ShardMap.value_encoding``): set once by
the first write that encodes columns, kept by every later map version (rescales included),
refused when another write brings other columns, and validated when read back."""

from __future__ import annotations

import json

import pytest

from slatedb_core import Table, ValueEncoding, open_store
from slatedb_core.errors import CorruptionError, InvalidArgument
from slatedb_core.meta.envelope import open_sealed, seal
from slatedb_core.table.shardmap import (
    FORMAT_VERSION,
    SHARDMAP_MAGIC,
    decode_shard_map,
    encode_shard_map,
)

SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [{"name": "qty", "type": "long", "nullable": True, "metadata": {}}],
    }
)


def test_recorded_once_kept_across_versions_and_processes(tmp_path) -> None:
    store = open_store(tmp_path.as_uri())
    with Table.create("t", store, split_points=[b"m"]) as table:
        assert table.value_encoding is None
        enc = ValueEncoding("json", SCHEMA)
        assert table.record_value_encoding(enc) == enc
        recorded_at = table.shard_map.id
        table.record_value_encoding(enc)  # the same record: no new map version
        assert table.shard_map.id == recorded_at
        table.split(1, b"t")  # a rescale keeps it
        assert table.shard_map.value_encoding == enc
        snap = table.snapshot()
    with Table.open("t", open_store(tmp_path.as_uri())) as again:
        assert again.value_encoding == enc
    with Table.open("t", store, snapshot=snap) as frozen:
        assert frozen.value_encoding == enc


def test_other_columns_are_refused_and_nothing_changes(tmp_path) -> None:
    store = open_store(tmp_path.as_uri())
    with Table.create("t", store) as table:
        table.record_value_encoding(ValueEncoding("arrow", SCHEMA))
        before = table.shard_map.id
        with pytest.raises(InvalidArgument, match="holds arrow values"):
            table.record_value_encoding(ValueEncoding("json", SCHEMA))
        with pytest.raises(InvalidArgument, match="holds arrow values"):
            table.record_value_encoding(ValueEncoding("arrow", json.dumps({"fields": []})))
        assert table.refresh().id == before


@pytest.mark.parametrize(
    "fmt, schema, match",
    [
        ("csv", SCHEMA, "must be one of"),
        ("json", "not json", "not JSON"),
        ("json", "[1, 2]", "JSON object"),
    ],
)
def test_bad_encodings_are_refused(fmt: str, schema: str, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        ValueEncoding(fmt, schema)


def test_a_damaged_record_reads_as_corruption(tmp_path) -> None:
    store = open_store(tmp_path.as_uri())
    with Table.create("t", store) as table:
        m = table.record_value_encoding(ValueEncoding("json", SCHEMA)) and table.shard_map
    data = encode_shard_map(m, "t")
    assert decode_shard_map(data, map_id=m.id, table_path="t", name="x").value_encoding == (
        m.value_encoding
    )
    # the envelope's payload (its header holds a random nonce, which may contain a '{' byte)
    payload = open_sealed(
        data, magic=SHARDMAP_MAGIC, name="x", versions=frozenset({FORMAT_VERSION})
    ).payload
    doc = json.loads(payload)
    for bad in ({"format": "yaml", "schema": "{}"}, "json", {"format": "json"}):
        doc["value_encoding"] = bad
        damaged = seal(SHARDMAP_MAGIC, FORMAT_VERSION, json.dumps(doc).encode())
        with pytest.raises(CorruptionError):
            decode_shard_map(damaged, map_id=m.id, table_path="t", name="x")
