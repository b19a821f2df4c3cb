"""How many examples each property test draws: every one in CI, a quarter in the developer loop.

Issue 41, item 6: a third of ``make test-quick``'s CPU time went to hypothesis property tests
drawing their full example counts (300 for the iterator models, 150 for the SST encoders, ...).
The counts stay written where they are (``@settings(max_examples=...)``) and stay what ``make
test``, ``make test-fast`` and CI run. ``SLATEDB_HYPOTHESIS=dev`` (set by ``make test-quick``)
scales each test's count down to :func:`dev_examples` of it when the session collects, so the
quick loop checks every property on fewer inputs: a quick signal, not the full search. Unset or
``ci``, nothing changes. docs/contributing.md, "Test loops", says which loop runs which count.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import pytest
from hypothesis import settings

ENV = "SLATEDB_HYPOTHESIS"
PROFILES = ("ci", "dev")
DEV_DIVISOR = 4  # the dev loop draws a quarter of each test's examples ...
DEV_FLOOR = 10  # ... and at least this many (or all, for a test that asks for fewer)


def dev_examples(n: int) -> int:
    """The dev loop's count for a test that asks for ``n`` examples."""
    return min(n, max(DEV_FLOOR, n // DEV_DIVISOR))


def profile() -> str:
    """The session's profile: ``ci`` (every example; the default) or ``dev``."""
    name = os.environ.get(ENV, "") or "ci"
    if name not in PROFILES:
        raise pytest.UsageError(f"{ENV}={name!r}: expected one of {', '.join(PROFILES)}")
    return name


def apply_profile(items: Iterable[pytest.Item]) -> int:
    """Scale the example counts of the collected property tests to the session's profile;
    returns how many tests were scaled (0 under ``ci``)."""
    if profile() == "ci":
        return 0
    scaled = 0
    for item in items:
        test = getattr(item, "obj", None)
        if not getattr(test, "is_hypothesis_test", False):
            continue
        if getattr(test, "_slatedb_dev_examples", False):  # a parametrised test's other cases
            continue
        # the settings a @given test runs with, read when it is called (hypothesis 6.x)
        current: settings = test._hypothesis_internal_use_settings  # type: ignore[union-attr]
        test._hypothesis_internal_use_settings = settings(  # type: ignore[union-attr]
            current, max_examples=dev_examples(current.max_examples)
        )
        test._slatedb_dev_examples = True  # type: ignore[union-attr]
        scaled += 1
    return scaled
