"""Human-friendly durations for the CLI (SlateDB RFC 0004: ``--lifetime "7days 30min 10s"``).

Operators type lifetimes by hand, so the parser accepts the spellings people reach for ("1h",
"2 days", "90s", "7days 30min 10s") and sums every token. It rejects anything it is not sure about
rather than guessing: a checkpoint lifetime read wrongly either pins data far too long (storage
cost) or lets it expire early (readers lose their SSTs to GC). That is why units are lowercase
only ("M" could be minutes or months) and why months are not offered at all (their length varies).
A year is 365 days.

Every duration the engine takes (options' intervals, lifetimes, grace periods and min ages, and
the CLI's duration flags) is at most :data:`MAX_DURATION`, one year: a longer poll interval or
flush interval is never meant (and beyond ``threading.TIMEOUT_MAX`` it killed the background
thread that waited on it, RELIABILITY.md, review finding 15), and a checkpoint meant to outlive a year is one
without a lifetime (it never expires; delete it explicitly).
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal, InvalidOperation

from slatedb_core.errors import InvalidArgument

MAX_DURATION = timedelta(days=365)
"""The longest duration any option, argument or CLI flag accepts (one year; see above)."""

_US_PER: dict[str, int] = {
    "us": 1,
    "ms": 1_000,
    "s": 1_000_000,
    "m": 60_000_000,
    "h": 3_600_000_000,
    "d": 86_400_000_000,
    "w": 7 * 86_400_000_000,
    "y": 365 * 86_400_000_000,
}

_UNITS: dict[str, str] = {
    **dict.fromkeys(("y", "yr", "yrs", "year", "years"), "y"),
    **dict.fromkeys(("w", "week", "weeks"), "w"),
    **dict.fromkeys(("d", "day", "days"), "d"),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), "h"),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), "m"),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), "s"),
    **dict.fromkeys(("ms", "msec", "msecs", "millisecond", "milliseconds"), "ms"),
    **dict.fromkeys(("us", "usec", "usecs", "microsecond", "microseconds"), "us"),
}

_TOKEN = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*")

FORMAT_HELP = (
    'a sum of <number><unit> tokens, e.g. "7days 30min 10s", "1h", "2d", "500ms"; units: '
    "y/year(s), w/week(s), d/day(s), h/hr/hour(s), m/min(s)/minute(s), s/sec(s)/second(s), "
    "ms, us"
)
"""What the accepted format looks like; quoted in every parse error and in CLI help."""


def _invalid(text: str, why: str) -> InvalidArgument:
    return InvalidArgument(f"invalid duration {text!r}: {why}; expected {FORMAT_HELP}")


def parse_duration(
    text: str, *, allow_zero: bool = False, maximum: timedelta | None = None
) -> timedelta:
    """Parse a positive duration such as ``"7days 30min 10s"``.

    Raises InvalidArgument (naming the accepted format) for anything unparsable, for zero
    unless ``allow_zero`` (a GC ``min_age`` of 0 is meaningful; a zero checkpoint lifetime would
    create a checkpoint that is already expired), and for more than ``maximum`` if given (the CLI
    passes :data:`MAX_DURATION`).
    """
    if not isinstance(text, str):
        raise InvalidArgument(f"duration must be a str, got {type(text).__name__}")
    stripped = text.strip()
    if not stripped:
        raise _invalid(text, "it is empty")
    total_us = Decimal(0)
    pos = 0
    while pos < len(stripped):
        m = _TOKEN.match(stripped, pos)
        if m is None:
            raise _invalid(text, f"cannot read {stripped[pos:]!r}")
        number, unit = m.group(1), m.group(2)
        canonical = _UNITS.get(unit)
        if canonical is None:
            raise _invalid(text, f"unknown unit {unit!r}")
        try:
            total_us += Decimal(number) * _US_PER[canonical]
        except InvalidOperation as e:  # pragma: no cover - the regex only admits decimals
            raise _invalid(text, f"bad number {number!r}") from e
        pos = m.end()
    if total_us < 0 or (total_us == 0 and not allow_zero):
        raise _invalid(text, "it must be greater than zero")
    try:
        # Sub-microsecond fractions ("1.5us") round up so a lifetime is never shortened.
        value = timedelta(microseconds=int(total_us.to_integral_value(rounding="ROUND_CEILING")))
    except OverflowError as e:
        raise _invalid(text, "it is too large") from e
    if maximum is not None and value > maximum:
        raise _invalid(text, f"it is too large (at most {format_duration(maximum)})")
    return value


def format_duration(td: timedelta) -> str:
    """Render ``td`` in the largest units first, in a form :func:`parse_duration` reads back
    (for positive values), so CLI output can be pasted into the next command."""
    total_us = (td.days * 86_400 + td.seconds) * 1_000_000 + td.microseconds
    if total_us == 0:
        return "0s"
    sign = "-" if total_us < 0 else ""
    rest = abs(total_us)
    parts: list[str] = []
    for unit in ("y", "w", "d", "h", "m", "s", "ms", "us"):
        count, rest = divmod(rest, _US_PER[unit])
        if count:
            parts.append(f"{count}{unit}")
    return sign + " ".join(parts)
