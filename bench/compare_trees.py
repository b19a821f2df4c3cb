"""Run ``bench/engine_bench.py`` of two checkouts of this repository in one run, rounds alternating,
and print our figures side by side: the "before and after" of a change, on one machine at one time.

Each checkout runs its own ``bench/engine_bench.py`` (so an old checkout runs with its own module
paths); the figures compared are the "ours" column of its summary table. PyPI ``slatedb``'s column
("theirs") is printed too: the same engine in every round, it shows how much the machine itself
moved between rounds (noise).

Usage: python bench/compare_trees.py --before /tmp/base --after . [--rounds 3] [--rows 200000]
       (make a checkout of the old commit with ``git worktree add /tmp/base <commit>``)
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROW = re.compile(
    r"^(?P<op>[^|]+?)\s*\|\s*(?P<ours>[\d,.]+) (?P<unit>[a-z/]+)\s*\|\s*(?P<theirs>[\d,.]+)"
)


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def run_once(tree: Path, rows: int) -> dict[str, tuple[float, float, str]]:
    """{operation: (ours, theirs, unit)} from one run of ``tree``'s engine bench."""
    done = subprocess.run(
        [sys.executable, str(tree / "bench" / "engine_bench.py"), "--rows", str(rows)],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    out: dict[str, tuple[float, float, str]] = {}
    for line in done.stdout.splitlines():
        m = ROW.match(line)
        if m:
            out[m["op"].strip()] = (_num(m["ours"]), _num(m["theirs"]), m["unit"])
    if not out:
        raise SystemExit(f"no figures from {tree}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--before", type=Path, required=True)
    ap.add_argument("--after", type=Path, default=Path(__file__).resolve().parent.parent)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rows", type=int, default=200_000)
    args = ap.parse_args()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    runs: dict[str, list[dict[str, tuple[float, float, str]]]] = {k: [] for k in trees}
    started = time.perf_counter()
    for r in range(args.rounds):
        for name in ("before", "after") if r % 2 == 0 else ("after", "before"):
            t0 = time.perf_counter()
            runs[name].append(run_once(trees[name], args.rows))
            print(f"# round {r + 1} {name}: {time.perf_counter() - t0:.0f} s", flush=True)
    print(
        f"# {args.rounds} rounds each, {args.rows:,} rows, alternating; "
        f"before = {trees['before']}, after = {trees['after']}; {time.perf_counter() - started:.0f} s"
    )
    print(
        "# median of the rounds [min-max]; after/before above 1 is better for rates, worse for ms"
    )
    header = (
        f"{'operation':48} | {'before':>30} | {'after':>30} | after/before | theirs, all rounds"
    )
    print(header)
    print("-" * len(header))
    for op, (_, _, unit) in runs["before"][0].items():
        if not all(op in run for run in runs["after"]):
            continue
        digits = 1 if unit == "ms" else 0
        medians: list[float] = []
        texts: list[str] = []
        for name in ("before", "after"):
            xs = [run[op][0] for run in runs[name]]
            medians.append(statistics.median(xs))
            span = f"[{min(xs):,.{digits}f}-{max(xs):,.{digits}f}]"
            texts.append(f"{statistics.median(xs):,.{digits}f} {span} {unit}")
        theirs = [run[op][1] for name in runs for run in runs[name]]
        (b, a), (b_text, a_text) = medians, texts
        print(
            f"{op:48} | {b_text:>30} | {a_text:>30} | {a / b:12.2f} | "
            f"{min(theirs):,.{digits}f}-{max(theirs):,.{digits}f} {unit}"
        )


if __name__ == "__main__":
    main()
