"""Command line for simulation campaigns; see :mod:`tests.sim.harness`.

.venv/bin/python -m tests.sim.run --seed 1234            # replay one schedule, with its trace
.venv/bin/python -m tests.sim.run --schedules 10000 --workers 2
"""

from __future__ import annotations

import argparse
import functools
import logging
import multiprocessing
import signal
import sys
import time
from collections.abc import Iterable

from tests.sim.harness import Figures, run_schedule
from tests.sim.recorder import InvariantViolation


def _quiet() -> None:
    """The engine logs every injected fault it retries; a campaign wants only the figures.

    A spawned worker inherits its parent's ignored signals. In one CI run of the whole suite the
    pytest process had SIGTERM ignored (by which test is not known) and a worker had died: the
    survivor, blocked on the task queue's lock, ignored ``Pool.terminate``'s SIGTERM and the
    campaign hung in ``join``. The worker takes SIGTERM's default back."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    logging.basicConfig(level=logging.CRITICAL)


def _one(seed: int, two_phase: bool = False) -> tuple[int, Figures | None, str | None]:
    try:
        return seed, run_schedule(seed, two_phase=two_phase), None
    except InvariantViolation as e:
        return seed, None, str(e)
    except Exception as e:  # an engine bug surfacing as a crash is a finding too
        flag = " --two-phase" if two_phase else ""
        return seed, None, f".venv/bin/python -m tests.sim.run --seed {seed}{flag}  # {e!r}"


def campaign(
    seeds: Iterable[int], workers: int, *, two_phase: bool = False
) -> tuple[Figures, list[str]]:
    total = Figures()
    failures: list[str] = []
    seeds = list(seeds)
    one = functools.partial(_one, two_phase=two_phase)
    if workers <= 1:
        results: Iterable[tuple[int, Figures | None, str | None]] = map(one, seeds)
        return _collect(results, total, failures, len(seeds))
    with multiprocessing.get_context("spawn").Pool(workers, initializer=_quiet) as pool:
        return _collect(pool.imap_unordered(one, seeds, chunksize=8), total, failures, len(seeds))


def _collect(
    results: Iterable[tuple[int, Figures | None, str | None]],
    total: Figures,
    failures: list[str],
    n: int,
) -> tuple[Figures, list[str]]:
    done = 0
    for _seed, figures, failure in results:
        done += 1
        if figures is not None:
            total.add(figures)
        if failure is not None:
            failures.append(failure)
            print(f"FAIL {failure}", flush=True)
        if done % 500 == 0:
            print(f"... {done}/{n} schedules, {len(failures)} failing", flush=True)
    return total, failures


def report(total: Figures, failures: list[str], wall_s: float) -> str:
    fenced = total.outcomes.get("fenced", 0)
    crashes = total.outcomes.get("crash:ok", 0)
    lines = [
        f"schedules        {total.schedules}",
        f"failing          {len(failures)}",
        f"steps            {total.steps}",
        f"store requests   {total.requests}",
        f"faults injected  {total.faults}",
        f"stalls (paused)  {total.pauses}",
        f"writer crashes   {crashes}",
        f"fencings seen    {fenced}",
        f"invariant checks {total.checks}",
        f"wall time        {wall_s:.1f}s ({total.seconds:.1f}s in schedules)",
    ]
    top = sorted(total.outcomes.items(), key=lambda kv: -kv[1])
    lines.append("outcomes         " + ", ".join(f"{k}={v}" for k, v in top[:40]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.sim.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seed", type=int, help="replay one schedule and print its trace")
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--start-seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--two-phase",
        action="store_true",
        help="over two-phase CAS (SQLite) on a store without conditional writes",
    )
    args = parser.parse_args(argv)
    _quiet()
    if args.seed is not None:
        try:
            figures = run_schedule(args.seed, trace=print, two_phase=args.two_phase)
        except InvariantViolation as e:
            print(f"FAIL {e}")
            return 1
        print(report(figures, [], figures.seconds))
        return 0
    if args.schedules <= 0 or args.workers <= 0:
        parser.error("--schedules and --workers must be positive")
    started = time.monotonic()
    seeds = range(args.start_seed, args.start_seed + args.schedules)
    total, failures = campaign(seeds, args.workers, two_phase=args.two_phase)
    print(report(total, failures, time.monotonic() - started))
    for f in failures:
        print(f"FAIL {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
