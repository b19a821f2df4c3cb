"""A plain and a first encoded write racing on an empty table (issue 37, item 7a): the check
both Spark write paths run before writing (``spark_jobs.value_columns.check_value_encoding``)
lets exactly one of them through. Before, the plain write's check only looked for a recorded
encoding and the encoded write's check only looked for rows, so a plain write checked before
the encoded write recorded its columns, and writing after the encoded write looked for rows,
put plain values into a table that says its values are JSON-encoded columns. Now the first
write of either kind records its kind in the shard map by one map commit
(``Table.record_value_encoding``, None for plain values), and the other kind is refused."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from slatedb_core.errors import InvalidArgument
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.table.shardmap import ValueEncoding
from spark_jobs.value_columns import check_value_encoding

from .conftest import OPTS, fill

JSON = ValueEncoding("json", json.dumps({"type": "struct", "fields": []}))


def _plain(t: Table) -> None:
    check_value_encoding(t, None, created=False, value_option="option 'value'")


def _encoded(t: Table) -> None:
    check_value_encoding(t, JSON, created=False, value_option="option 'value'")


def test_a_plain_write_checked_first_refuses_the_first_encoded_write(mem: ObjectStore) -> None:
    Table.create("t", mem, [b"m"], OPTS).close()
    with Table.open("t", mem, OPTS) as plain, Table.open("t", mem, OPTS) as encoded:
        _plain(plain)  # passes: the table holds nothing yet
        with pytest.raises(InvalidArgument, match="plain values"):
            _encoded(encoded)  # the table is still empty: only the record can refuse it
        fill(plain, {b"a": b"not json"})  # the plain write's rows land after both checks
        assert encoded.value_encoding is None and plain.value_encoding is None
        _plain(plain)  # later plain writes pass, with no further map commit
        assert plain.shard_map.id == Table.open("t", mem, OPTS).shard_map.id


def test_an_encoded_write_checked_first_refuses_plain_writes(mem: ObjectStore) -> None:
    Table.create("t", mem, [b"m"], OPTS).close()
    with Table.open("t", mem, OPTS) as plain, Table.open("t", mem, OPTS) as encoded:
        _encoded(encoded)
        with pytest.raises(InvalidArgument, match="json-encoded columns"):
            _plain(plain)
        _encoded(encoded)  # the same columns again: fine
        plain.refresh()
        assert plain.value_encoding == JSON


def test_recording_plain_values_is_refused_once_columns_are_recorded(mem: ObjectStore) -> None:
    with Table.create("t", mem, [], OPTS) as t:
        assert t.record_value_encoding(None) is None
        map_id = t.shard_map.id
        assert t.record_value_encoding(None) is None  # recorded already: no commit
        assert t.shard_map.id == map_id
        with pytest.raises(InvalidArgument, match="plain values"):
            t.record_value_encoding(JSON)
    with Table.create("u", mem, [], OPTS) as u:
        u.record_value_encoding(JSON)
        with pytest.raises(InvalidArgument, match="json values"):
            u.record_value_encoding(None)


def test_the_plain_record_survives_a_split_and_an_encoded_overwrite_replaces_it(
    mem: ObjectStore,
) -> None:
    with Table.create("t", mem, [], OPTS) as t:
        t.record_value_encoding(None)
        t.split(0, b"m")
        with pytest.raises(InvalidArgument, match="plain values"):
            t.record_value_encoding(JSON)
        t.overwrite(
            [pa.record_batch({"key": pa.array([b"a"]), "value": pa.array([b"{}"])})],
            value_encoding=JSON,
        )
        assert t.value_encoding == JSON
        with pytest.raises(InvalidArgument, match="json values"):
            t.record_value_encoding(None)
