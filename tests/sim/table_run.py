"""Command line for table-level simulation campaigns; see :mod:`tests.sim.table_harness`.

    .venv/bin/python -m tests.sim.table_run --seed 12                 # replay one, with its trace
    .venv/bin/python -m tests.sim.table_run --schedules 500 --workers 2

A campaign prints, per invariant that failed, how many schedules failed it and the first
failing seed (the schedules it took to find it), then every failure's replay command.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import sys
import time
import traceback
from collections.abc import Iterable

from tests.sim.recorder import InvariantViolation
from tests.sim.state import Figures
from tests.sim.table_base import REPRO
from tests.sim.table_harness import run_table_schedule
from tests.sim.table_model import TableViolation


def _quiet() -> None:
    """Workers take SIGTERM's default back and log nothing (see tests.sim.run._quiet)."""
    import logging

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    logging.basicConfig(level=logging.CRITICAL)
    logging.getLogger().setLevel(logging.CRITICAL)


Result = tuple[int, Figures | None, list[str], str | None]


def _one(seed: int) -> Result:
    """(seed, figures, invariants broken, message): the figures when it passed."""
    try:
        return seed, run_table_schedule(seed), [], None
    except TableViolation as e:
        return seed, None, [inv for inv, _ in e.found], str(e)
    except InvariantViolation as e:
        return seed, None, ["other"], str(e)
    except Exception as e:  # an engine bug surfacing as a crash is a finding too
        return seed, None, ["crash"], f"{REPRO.format(seed=seed)}  # {e!r} {_where(e)}"


def _where(e: BaseException) -> str:
    """Where a crash was raised: the innermost frames of the project's own code (a campaign
    runs in worker processes, whose tracebacks are otherwise lost)."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "site-packages" not in f.filename]
    return "at " + " <- ".join(
        f"{os.path.relpath(f.filename)}:{f.lineno} {f.name}" for f in reversed(frames[-3:])
    )


def campaign(seeds: Iterable[int], workers: int) -> tuple[Figures, dict[str, list[int]], list[str]]:
    """Run the schedules; returns the summed figures, the failing seeds per invariant (in seed
    order) and the failure messages."""
    seeds = list(seeds)
    total = Figures()
    by: dict[str, list[int]] = {}
    failures: list[str] = []
    if workers <= 1:
        results: Iterable[Result] = map(_one, seeds)
        return _collect(results, total, by, failures)
    with multiprocessing.get_context("spawn").Pool(workers, initializer=_quiet) as pool:
        return _collect(pool.imap_unordered(_one, seeds, chunksize=2), total, by, failures)


def _collect(
    results: Iterable[Result], total: Figures, by: dict[str, list[int]], failures: list[str]
) -> tuple[Figures, dict[str, list[int]], list[str]]:
    for seed, figures, invariants, message in results:
        if figures is not None:
            total.add(figures)
        for invariant in dict.fromkeys(invariants):
            by.setdefault(invariant, []).append(seed)
        if message is not None:
            failures.append(message)
            print(f"FAIL {message}", flush=True)
    for seeds in by.values():
        seeds.sort()
    return total, by, failures


def report(total: Figures, by: dict[str, list[int]], n: int, start: int, wall_s: float) -> str:
    lines = [
        f"schedules        {n} (seeds {start}..{start + n - 1})",
        f"failing          {len({s for v in by.values() for s in v})}",
        f"steps            {total.steps} (passing schedules)",
        f"stalls (parked)  {total.pauses}",
        f"checks           {total.checks}",
        f"wall time        {wall_s:.1f}s ({total.seconds:.1f}s in passing schedules)",
    ]
    for inv, seeds in sorted(by.items(), key=lambda kv: kv[1][0]):
        lines.append(
            f"invariant {inv:<18} {len(seeds):>4} failing; first seed {seeds[0]} "
            f"(found after {seeds[0] - start + 1} schedules); seeds {seeds[:8]}"
        )
    top = sorted(total.outcomes.items(), key=lambda kv: -kv[1])
    lines.append("outcomes         " + ", ".join(f"{k}={v}" for k, v in top[:50]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.sim.table_run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seed", type=int, help="replay one schedule and print its trace")
    parser.add_argument("--schedules", type=int, default=200)
    parser.add_argument("--start-seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    _quiet()
    if args.seed is not None:
        try:
            figures = run_table_schedule(args.seed, trace=print)
        except InvariantViolation as e:
            print(f"FAIL {e}")
            return 1
        print(report(figures, {}, 1, args.seed, figures.seconds))
        return 0
    if args.schedules <= 0 or args.workers <= 0:
        parser.error("--schedules and --workers must be positive")
    started = time.monotonic()
    seeds = range(args.start_seed, args.start_seed + args.schedules)
    total, by, failures = campaign(seeds, args.workers)
    print(report(total, by, args.schedules, args.start_seed, time.monotonic() - started))
    for f in failures:
        print(f"FAIL {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
