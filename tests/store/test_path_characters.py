"""Paths with control characters or a lone surrogate are ``InvalidArgument`` at every entry point
(they gave a retryable StoreError), and the store byte-for-byte as it was; other unusual but
valid characters are still accepted."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from slatedb_core import Db, DbReader, ObjectStore, Table
from slatedb_core.checkpoints import list_checkpoints
from slatedb_core.errors import InvalidArgument
from tests.core.bad_input_steps import Case, Lake, good_lake, path_cases, run_cases

IA = InvalidArgument


@pytest.fixture
def lake(store: ObjectStore) -> Iterator[Lake]:
    with good_lake(store) as it:
        yield it


# ---- item 17: control characters and lone surrogates in paths ---------------------------------
BAD_CHARACTER_PATHS = [
    "a\tb",
    "a\x01b",
    "a\udcffb",
    "a\nb",
    "a\x7fb",
    "good/\x1b[31m",
    "a\x85b",
    "\udc80",
]


def _table_cases(store: ObjectStore, p: str) -> list[Case]:
    return [
        (f"Table.create({p!r})", lambda: Table.create(p, store), IA),
        (f"Table.open({p!r})", lambda: Table.open(p, store), IA),
        (f"list_checkpoints({p!r})", lambda: list_checkpoints(p, store), IA),
    ]


def test_paths_with_control_characters_or_surrogates_are_invalid_argument(
    lake: tuple[ObjectStore, uuid.UUID, Db, Table],
) -> None:
    """Found by the review of RELIABILITY.md, items 14-17 (was test_bad_input_review.py)."""
    store, cp, _, _ = lake
    cases: list[Case] = [c for p in BAD_CHARACTER_PATHS for c in path_cases(store, p, cp)]
    for p in BAD_CHARACTER_PATHS:
        cases += _table_cases(store, p)
    run_cases(store, cases)
    for p in BAD_CHARACTER_PATHS:
        with pytest.raises(InvalidArgument, match=r"control character|lone surrogate"):
            Db.open(p, store)


def test_other_unusual_but_valid_characters_are_still_accepted(store: ObjectStore) -> None:
    """Only what no store can hold is refused: spaces, non-ASCII letters and format marks
    remain valid database names.

    Found by the review of RELIABILITY.md, items 14-17 (was test_bad_input_review.py)."""
    for p in ["a b", "é/ü", "a\u200bb", "naïve-日本"]:
        with Db.open(p, store) as db:
            db.put(b"k", b"v")
        with DbReader.open(p, store) as reader:
            assert reader.get(b"k") == b"v"
