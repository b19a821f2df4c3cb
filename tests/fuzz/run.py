"""Long fuzz campaign over every decoder: ``python -m tests.fuzz.run --inputs 100000``.

Inputs are split evenly over the targets (``--target`` picks some). Each input is a valid encoding
from the target's seed pool with 0-4 stacked mutations, re-sealed or checksum-repaired on 80% of
inputs. Prints, per target, the inputs run, how many decoded and how many were rejected as
corrupt, the time and the slowest input; then every distinct finding with a one-line command that
reproduces it. Exit status 1 if anything other than ``CorruptionError`` (or a violated property)
came out of a decoder.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field

from tests.fuzz.targets import CORRUPT, OK, TARGETS, random_case, run_case, seed_pool


@dataclass
class Report:
    target: str
    inputs: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    slowest: float = 0.0
    findings: dict[str, tuple[int, str]] = field(default_factory=dict)
    """Distinct finding (type and message) -> (first input number, traceback)."""


def run_target(name: str, inputs: int, seed: int, time_limit: float, pool_size: int) -> Report:
    target = TARGETS[name]
    pool = seed_pool(target, pool_size, seed)
    rng = random.Random(f"{seed}/{name}")
    report = Report(name)
    start = time.perf_counter()
    for i in range(inputs):
        index, mutations, repair = random_case(rng, len(pool))
        t0 = time.perf_counter()
        try:
            report.outcomes[run_case(target, pool, index, mutations, repair)] += 1
        except Exception as e:  # a finding: anything but CorruptionError, or a broken property
            key = f"{type(e).__name__}: {str(e)[:160]}"
            report.outcomes["finding"] += 1
            if key not in report.findings:
                report.findings[key] = (i, traceback.format_exc(limit=-4))
        report.slowest = max(report.slowest, time.perf_counter() - t0)
        report.inputs += 1
        if time.perf_counter() - start > time_limit:
            break
    report.seconds = time.perf_counter() - start
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.run", description=__doc__)
    parser.add_argument("--inputs", type=int, default=100_000, help="total inputs (all targets)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--target",
        action="append",
        choices=sorted(TARGETS),
        help="fuzz only this target (repeatable); default: all",
    )
    parser.add_argument("--pool", type=int, default=64, help="valid seeds per target")
    parser.add_argument(
        "--time-limit", type=float, default=3600.0, help="seconds per target before it stops early"
    )
    args = parser.parse_args(argv)
    if args.inputs < 1 or args.pool < 1:
        parser.error("--inputs and --pool must be positive")
    logging.disable(logging.WARNING)  # decoders log the garbage they skip; millions of lines
    names = args.target or sorted(TARGETS)
    per_target = -(-args.inputs // len(names))
    print(f"fuzzing {len(names)} targets, {per_target} inputs each, seed {args.seed}")
    print(
        f"{'target':<16}{'inputs':>9}{'decoded':>9}{'corrupt':>9}{'findings':>9}"
        f"{'seconds':>9}{'slowest ms':>11}"
    )
    reports = []
    for name in names:
        r = run_target(name, per_target, args.seed, args.time_limit, args.pool)
        reports.append(r)
        print(
            f"{name:<16}{r.inputs:>9}{r.outcomes[OK]:>9}{r.outcomes[CORRUPT]:>9}"
            f"{r.outcomes['finding']:>9}{r.seconds:>9.1f}{r.slowest * 1000:>11.1f}",
            flush=True,
        )
    total = sum(r.inputs for r in reports)
    seconds = sum(r.seconds for r in reports)
    findings = sum(r.outcomes["finding"] for r in reports)
    print(
        f"{'total':<16}{total:>9}{sum(r.outcomes[OK] for r in reports):>9}"
        f"{sum(r.outcomes[CORRUPT] for r in reports):>9}{findings:>9}{seconds:>9.1f}"
    )
    for r in reports:
        for key, (i, tb) in r.findings.items():
            print(
                f"\n[{r.target}] {key}\n  first at input {i}; reproduce: python -m tests.fuzz.run "
                f"--target {r.target} --inputs {i + 1} --seed {args.seed} --pool {args.pool}\n{tb}"
            )
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
