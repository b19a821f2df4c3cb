"""``DbReader.scan_arrow``'s ``ordered`` takes True or False only (review 53 of 8b7c7cf).

``ordered=None`` (as a caller passing "the default" through would) or ``0`` read as False: the
scan silently returned its rows out of key order to a caller that asked for nothing of the
kind. The writer's boolean options refuse anything but a bool (``await_durable``, as SlateDB
does); so does this one, with InvalidArgument, before anything is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from slatedb_core import DbReader
from slatedb_core.errors import InvalidArgument
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db


@pytest.mark.parametrize("ordered", [None, 0, 1, "yes", ""])
def test_ordered_must_be_a_bool(tmp_path: Path, ordered: object) -> None:
    store = open_store(tmp_path.as_uri())
    with Db.open("db", store) as db:
        db.put(b"a", b"1")
    with DbReader.open("db", store) as reader, pytest.raises(InvalidArgument, match="ordered"):
        reader.scan_arrow(ordered=ordered)  # type: ignore[arg-type]


def test_true_and_false_are_taken(tmp_path: Path) -> None:
    store = open_store(tmp_path.as_uri())
    with Db.open("db", store) as db:
        db.put(b"a", b"1")
    with DbReader.open("db", store) as reader:
        for ordered in (True, False):
            assert reader.scan_arrow(ordered=ordered).read_all().num_rows == 1
