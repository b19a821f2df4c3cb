"""Print the crash points per operation: ``python -m tests.crash.report [--calls] [--json]``.

The counts are what ``tests/crash/test_crash.py`` runs per store kind (each call twice: the
process killed before it and after it).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

from tests.crash.enumerate import SIDES, record
from tests.crash.scenarios import SCENARIOS


def counts() -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for name in SCENARIOS:
        calls = record(name)
        by_op = Counter(c.op for c in calls)
        out[name] = {
            "calls": len(calls),
            "crash_points": len(calls) * len(SIDES),
            "by_op": dict(sorted(by_op.items())),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", action="store_true", help="list every call of every operation")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args()
    table = counts()
    if args.json:
        print(json.dumps(table, indent=2))
        return
    width = max(map(len, table))
    for name, row in table.items():
        print(f"{name:<{width}}  {row['calls']:>3} calls  {row['crash_points']:>3} crash points")
        if args.calls:
            for c in record(name):
                print(f"{'':<{width}}    {c.index:02d} {c.op:<13} {c.kind}")
    total = sum(int(str(r["crash_points"])) for r in table.values())
    print(f"{'total':<{width}}  {total // len(SIDES):>3} calls  {total:>3} crash points")


if __name__ == "__main__":
    main()
