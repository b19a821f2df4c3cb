"""Run ``bench/engine_bench.py`` of two checkouts of this repository in one run, rounds alternating,
and print our figures side by side: the "before and after" of a change, on one machine at one time.

Each checkout runs its own ``bench/engine_bench.py`` (so an old checkout runs with its own module
paths); the figures compared are the "ours" column of its summary table. PyPI ``slatedb``'s column
("theirs") is printed too: the same engine in every round, it shows how much the machine itself
moved between rounds (noise).

``--spark`` compares ``bench/spark_ingest_bench.py`` the same way (each checkout's own, its
modules first on ``PYTHONPATH``, which Spark's Python workers inherit): the ingest's and
``format("slatedb")``'s seconds, with Spark's own ``df.write.parquet`` of the same DataFrame as
the noise reference.

``--paths`` compares this checkout's ``bench/rewrite_paths_bench.py`` (bulk ingest, ingest_ssts,
compaction) run with each checkout's modules.

``--base REF`` checks the commit out itself (``git worktree add --detach``, under the system's
temporary directory) instead of ``--before``. ``--out FILE`` also writes the report there.
``engine_bench.py --compare-with REF`` and ``spark_ingest_bench.py --compare-with REF`` run this.

Usage: python bench/compare_trees.py --before /tmp/base --after . [--rounds 3] [--rows 200000]
       python bench/compare_trees.py --base d5ea00b [--spark] [--out bench/results/x.txt]
       (make a checkout of the old commit with ``git worktree add /tmp/base <commit>``)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
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


SPARK_FIGURES = {
    "df.write.parquet (noise reference)": re.compile(r"^df\.write\.parquet: ([\d.]+)s"),
    "spark ingest (spark_jobs.ingest)": re.compile(r"^ingest: ([\d.]+)s"),
    "format('slatedb') write": re.compile(r"^format\('slatedb'\): ([\d.]+)s"),
}


def _env(tree: Path) -> dict[str, str]:
    """The environment of a run of ``tree``: its modules before the installed checkout's."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree), env.get("PYTHONPATH")) if p)
    return env


def spark_run_once(tree: Path, rows: int, shards: int) -> dict[str, tuple[float, float, str]]:
    """{figure: (seconds, parquet seconds, "s")} from one run of ``tree``'s Spark ingest bench
    (one round on a fresh session)."""
    where = subprocess.run(
        [sys.executable, "-c", "import slatedb_core, spark_jobs; print(slatedb_core.__file__)"],
        cwd=tree,
        env=_env(tree),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not where.startswith(str(tree)):
        raise SystemExit(f"{tree}: slatedb_core imports from {where}, not from the checkout")
    done = subprocess.run(
        [
            sys.executable,
            str(tree / "bench" / "spark_ingest_bench.py"),
            "--rows",
            str(rows),
            "--shards",
            str(shards),
            "--partitions",
            str(shards),
            "--driver-memory",
            "2g",
        ],
        cwd=tree,
        env=_env(tree),
        capture_output=True,
        text=True,
        check=False,
    )
    found: dict[str, float] = {}
    for line in done.stdout.splitlines():
        for name, pattern in SPARK_FIGURES.items():
            m = pattern.match(line)
            if m:
                found[name] = float(m[1])
    if done.returncode or len(found) != len(SPARK_FIGURES):
        raise SystemExit(f"no figures from {tree}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    parquet = found["df.write.parquet (noise reference)"]
    return {name: (secs, parquet, "s") for name, secs in found.items()}


def paths_run_once(tree: Path, rows: int) -> dict[str, tuple[float, float, str]]:
    """{operation: (ms, 0, "ms")} from one run of THIS checkout's rewrite_paths_bench.py with
    ``tree``'s modules (the public calls it makes exist in both)."""
    script = Path(__file__).resolve().parent / "rewrite_paths_bench.py"
    done = subprocess.run(
        [sys.executable, str(script), "--rows", str(rows)],
        cwd=tree,
        env=_env(tree),
        capture_output=True,
        text=True,
        check=True,
    )
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return {name: (secs * 1000, 0.0, "ms") for name, secs in figures.items()}


def checkout(ref: str) -> Path:
    """A detached worktree of ``ref`` (made once, reused while it exists)."""
    repo = Path(__file__).resolve().parent.parent
    sha = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", f"{ref}^{{commit}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    tree = Path(tempfile.gettempdir()) / f"slatedb-bench-{sha[:12]}"
    if not (tree / "bench").is_dir():
        subprocess.run(
            ["git", "-C", str(repo), "worktree", "add", "--detach", str(tree), sha],
            check=True,
            capture_output=True,
        )
    return tree


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--before", type=Path)
    which.add_argument("--base", metavar="REF", help="a commit to check out as 'before'")
    ap.add_argument("--after", type=Path, default=Path(__file__).resolve().parent.parent)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rows", type=int, default=None, help="default 200,000; 1,000,000 --spark")
    ap.add_argument("--spark", action="store_true", help="compare spark_ingest_bench.py")
    ap.add_argument("--paths", action="store_true", help="compare rewrite_paths_bench.py")
    ap.add_argument("--shards", type=int, default=4, help="--spark: shards and input partitions")
    ap.add_argument("--out", type=Path, help="also write the report to this file")
    ap.add_argument(
        "--stat",
        choices=("median", "best"),
        default="median",
        help="figure per checkout: the median round, or the best (on a loaded machine)",
    )
    args = ap.parse_args(argv)
    before = args.before.resolve() if args.before is not None else checkout(args.base)
    trees = {"before": before, "after": args.after.resolve()}
    rows = args.rows or (1_000_000 if args.spark else 200_000)
    lines: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    run: Callable[[Path], dict[str, tuple[float, float, str]]]
    if args.spark:
        run = lambda tree: spark_run_once(tree, rows, args.shards)  # noqa: E731
    elif args.paths:
        run = lambda tree: paths_run_once(tree, rows)  # noqa: E731
    else:
        run = lambda tree: run_once(tree, rows)  # noqa: E731
    runs: dict[str, list[dict[str, tuple[float, float, str]]]] = {k: [] for k in trees}
    started = time.perf_counter()
    for r in range(args.rounds):
        for name in ("before", "after") if r % 2 == 0 else ("after", "before"):
            t0 = time.perf_counter()
            runs[name].append(run(trees[name]))
            print(f"# round {r + 1} {name}: {time.perf_counter() - t0:.0f} s", flush=True)
    bench = (
        "spark_ingest_bench.py"
        if args.spark
        else "rewrite_paths_bench.py"
        if args.paths
        else "engine_bench.py"
    )
    say(
        f"# bench/{bench}: {args.rounds} rounds each, {rows:,} rows, alternating; "
        f"before = {trees['before']} ({_head(trees['before'])}), after = {trees['after']} "
        f"({_head(trees['after'])}); {time.perf_counter() - started:.0f} s; load average "
        f"{os.getloadavg()[0]:.1f}"
    )
    say(
        f"# {args.stat} of the rounds [min-max]"
        + (" (best: max for rates, min for times)" if args.stat == "best" else "")
        + "; after/before above 1 is better for rates, worse for s/ms"
    )
    reference = "parquet, all rounds" if args.spark else "-" if args.paths else "theirs, all rounds"
    _table(runs, say, reference, args.stat)
    if args.out is not None:
        with args.out.open("a") as f:
            f.write("\n".join(lines) + "\n\n")


def _head(tree: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(tree), "log", "-1", "--format=%h"], capture_output=True, text=True
    )
    dirty = subprocess.run(
        ["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return done.stdout.strip() + (" + uncommitted changes" if dirty else "")


def _table(
    runs: dict[str, list[dict[str, tuple[float, float, str]]]],
    say: Callable[[str], None],
    reference: str,
    stat: str = "median",
) -> None:
    header = f"{'operation':48} | {'before':>30} | {'after':>30} | after/before | {reference}"
    say(header)
    say("-" * len(header))
    for op, (_, _, unit) in runs["before"][0].items():
        if not all(op in run for run in runs["after"]):
            continue
        digits = 1 if unit in ("ms", "s") else 0
        medians: list[float] = []
        texts: list[str] = []
        for name in ("before", "after"):
            xs = [run[op][0] for run in runs[name]]
            rate = unit not in ("ms", "s")
            pick = statistics.median(xs) if stat == "median" else (max(xs) if rate else min(xs))
            medians.append(pick)
            span = f"[{min(xs):,.{digits}f}-{max(xs):,.{digits}f}]"
            texts.append(f"{pick:,.{digits}f} {span} {unit}")
        theirs = [run[op][1] for name in runs for run in runs[name]]
        (b, a), (b_text, a_text) = medians, texts
        say(
            f"{op:48} | {b_text:>30} | {a_text:>30} | {a / b:12.2f} | "
            f"{min(theirs):,.{digits}f}-{max(theirs):,.{digits}f} {unit}"
        )


if __name__ == "__main__":
    main()
