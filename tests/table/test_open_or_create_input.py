"""``Table.open_or_create`` checks its split points whether or not the table exists (adversarial
review of 950881d, issue 37 item 7e): bad input gets a typed error, not a silent open of the
existing table (a caller's bug that shows only on the first run, when the table is new)."""

from __future__ import annotations

import pytest

from slatedb_core.errors import InvalidArgument
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from tests.table.conftest import OPTS


@pytest.mark.parametrize("points", [b"ab", "m", [b"m", b"a"], [b""], [b"m", "t"], 5])
def test_bad_split_points_are_refused_when_the_table_exists(
    mem: ObjectStore, points: object
) -> None:
    Table.create("t", mem, [b"m"], OPTS).close()
    with pytest.raises(InvalidArgument):
        Table.open_or_create("t", mem, points, OPTS)  # type: ignore[arg-type]


def test_other_good_split_points_open_the_existing_table(mem: ObjectStore) -> None:
    Table.create("t", mem, [b"m"], OPTS).close()
    t, created = Table.open_or_create("t", mem, [b"c", b"x"], OPTS)
    with t:
        assert not created
        assert [s.key_range.start for s in t.shards] == [None, b"m"]
