"""The developer loop draws fewer hypothesis examples; CI and ``make test`` draw every one.

Issue 41, item 6 (tests/hypothesis_profile.py): ``SLATEDB_HYPOTHESIS=dev`` scales each property
test's ``max_examples`` down; unset (CI) or ``ci`` it runs the count written on the test.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profile import ENV, apply_profile, dev_examples


def counting_test(max_examples: int) -> tuple[Any, list[int]]:
    """A fresh property test asking for ``max_examples`` distinct inputs, and its call log."""
    calls: list[int] = []

    @settings(max_examples=max_examples, deadline=None, database=None, derandomize=True)
    @given(st.integers(0, 10**9))
    def prop(x: int) -> None:
        calls.append(x)

    return prop, calls


def run(prop: Any) -> None:
    prop()


@pytest.mark.parametrize("asked", [300, 40, 12, 5])
def test_ci_runs_the_count_written_on_the_test(asked: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    prop, calls = counting_test(asked)
    assert apply_profile([SimpleNamespace(obj=prop)]) == 0  # type: ignore[list-item]
    run(prop)
    assert len(set(calls)) == asked


@pytest.mark.parametrize(("asked", "drawn"), [(300, 75), (40, 10), (12, 10), (5, 5)])
def test_dev_runs_a_quarter_and_at_least_ten(
    asked: int, drawn: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "dev")
    prop, calls = counting_test(asked)
    item = SimpleNamespace(obj=prop)
    # a parametrised test's cases share one function: scaled once, not once per case
    assert apply_profile([item, item]) == 1  # type: ignore[list-item]
    run(prop)
    assert dev_examples(asked) == drawn
    assert len(set(calls)) == drawn


def test_an_unknown_profile_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "fast")
    prop, _ = counting_test(10)
    with pytest.raises(pytest.UsageError, match="expected one of ci, dev"):
        apply_profile([SimpleNamespace(obj=prop)])  # type: ignore[list-item]
