from __future__ import annotations

from datetime import timedelta

import pytest

from slatedb_core.durations import format_duration, parse_duration
from slatedb_core.errors import InvalidArgument

DAY = timedelta(days=1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7days 30min 10s", timedelta(days=7, minutes=30, seconds=10)),
        ("1h", timedelta(hours=1)),
        ("2d", 2 * DAY),
        ("90s", timedelta(seconds=90)),
        ("1w", 7 * DAY),
        ("1year", 365 * DAY),
        ("2 years", 730 * DAY),
        ("1y", 365 * DAY),
        ("500ms", timedelta(milliseconds=500)),
        ("250us", timedelta(microseconds=250)),
        ("3 hours", timedelta(hours=3)),
        ("3hr", timedelta(hours=3)),
        ("1hour", timedelta(hours=1)),
        ("5m", timedelta(minutes=5)),
        ("5mins", timedelta(minutes=5)),
        ("1 minute", timedelta(minutes=1)),
        ("10sec", timedelta(seconds=10)),
        ("1 second", timedelta(seconds=1)),
        ("2weeks", 14 * DAY),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("  1d  12h ", timedelta(days=1, hours=12)),
        ("1.5h", timedelta(hours=1, minutes=30)),
        ("0.5s", timedelta(milliseconds=500)),
        ("1m 1m", timedelta(minutes=2)),
        ("0s 1ms", timedelta(milliseconds=1)),
    ],
)
def test_parses_human_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "10",
        "h",
        "1 fortnight",
        "1M",
        "1H",
        "1mo",
        "-1h",
        "+1h",
        "1h -5m",
        "1,5h",
        "1.h",
        "1e3s",
        "1h, 2m",
        "0s",
        "0d 0h",
        "99999999999999y",
    ],
)
def test_rejects_malformed_zero_and_negative_with_the_format_in_the_message(text: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        parse_duration(text)
    assert "7days 30min 10s" in str(info.value)


def test_rejects_non_strings() -> None:
    with pytest.raises(InvalidArgument):
        parse_duration(5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("td", "text"),
    [
        (timedelta(0), "0s"),
        (timedelta(days=7, minutes=30, seconds=10), "1w 30m 10s"),
        (timedelta(days=366, hours=1), "1y 1d 1h"),
        (timedelta(milliseconds=1500), "1s 500ms"),
        (timedelta(microseconds=7), "7us"),
        (-timedelta(hours=2), "-2h"),
    ],
)
def test_formats_largest_units_first(td: timedelta, text: str) -> None:
    assert format_duration(td) == text


@pytest.mark.parametrize(
    "td",
    [
        timedelta(seconds=1),
        timedelta(days=400, hours=5, minutes=6, seconds=7, microseconds=8009),
        timedelta(days=9, microseconds=1),
    ],
)
def test_format_round_trips_through_parse(td: timedelta) -> None:
    assert parse_duration(format_duration(td)) == td
