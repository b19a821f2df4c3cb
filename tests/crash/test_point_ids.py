"""The crash points' test ids and their order are the same in every process (issue 41, item 6):
pytest-xdist's workers each collect the suite and refuse to start when their lists differ, and
an unordered scenario's calls (the hard destroy's pool of deletes) come in another order per run.
"""

from __future__ import annotations

import random

import pytest

from tests.crash.enumerate import point_list, record
from tests.crash.scenarios import SCENARIOS

UNORDERED = [name for name, s in SCENARIOS.items() if not s.ordered]


def test_some_scenarios_are_unordered() -> None:
    assert "destroy_hard" in UNORDERED


@pytest.mark.parametrize("name", UNORDERED)
def test_an_unordered_scenarios_ids_do_not_depend_on_the_order_of_its_calls(name: str) -> None:
    calls = list(record(name))
    shuffled = calls[:]
    random.Random(41).shuffle(shuffled)
    assert shuffled != calls
    assert [p.id for p in point_list(name, tuple(shuffled))] == [
        p.id for p in point_list(name, tuple(calls))
    ]
