"""``python -m lakehouse_demo``: set up the demo's data, run the main job through Dagster, print
the summary.

Layout of ``--dir`` (default ``demo-data``)::

    input/          the generated orders (Parquet)
    store/          the object store (local filesystem; unless --store-url or --s3)
    seaweedfs/      SeaweedFS's data (--s3 only)
    delta/orders/   the Delta export of the checkpoint
    dagster_home/   Dagster's instance: the run shows in ``make ui``
    .lakehouse-demo the marker: only a directory holding it is reset (lakehouse_demo.workdir)
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from lakehouse_demo import interrupts, progress, workdir
from lakehouse_demo.dataset import DatasetOptions, describe, generate, write_dataset
from lakehouse_demo.summary import RunFacts, render, ui_hint
from slatedb_core.errors import InvalidArgument

DEFAULT_ROWS = 5_000_000
DAGSTER_YAML = "telemetry:\n  enabled: false\n"


@dataclass(frozen=True)
class DemoOptions:
    data_dir: Path = Path("demo-data")
    rows: int = DEFAULT_ROWS
    reset: bool = True
    store_url: str | None = None
    """Default: ``<data_dir>/store`` on the local filesystem."""
    s3: bool = False
    """Start SeaweedFS (lakehouse_demo.s3server) and use it as the store."""
    new_orders: int | None = None
    """Orders written during the checkpoint read (default: 1% of rows, at least 2,000)."""
    gc_grace_s: float = 2.0
    spark_master: str = "local[2]"
    quiet: bool = False

    def __post_init__(self) -> None:
        if self.rows < 100:
            raise InvalidArgument("--rows must be at least 100")
        if self.s3 and self.store_url is not None:
            raise InvalidArgument("--s3 and --store-url are exclusive")
        if self.store_url is not None and self.store_url.startswith("memory:"):
            raise InvalidArgument(
                "a memory:// store lives in one process: Spark's Python workers cannot see it"
            )


@dataclass(frozen=True)
class DemoRun:
    outputs: dict[str, dict[str, Any]]
    facts: RunFacts
    success: bool


def _prepare_dir(opts: DemoOptions) -> str:
    mode = workdir.prepare(opts.data_dir, opts.reset)
    if opts.store_url and mode.startswith("reset"):
        mode += " (the store at --store-url is not wiped)"
    return mode


def _setup_dataset(opts: DemoOptions) -> dict[str, Any]:
    started = time.monotonic()
    input_dir = opts.data_dir / "input"
    existing = None
    if input_dir.exists():
        with contextlib.suppress(InvalidArgument):
            existing = describe(input_dir)
    progress.start("0 dataset", None, "")
    if existing is not None and existing.rows == opts.rows:
        info, action = existing, "reused"
    else:
        progress.advance("0 dataset", 0, f"generating {opts.rows:,} orders")
        info = write_dataset(generate(DatasetOptions(rows=opts.rows)), input_dir, 4)
        action = "generated"
    progress.finish("0 dataset", f"{info.rows:,} orders {action} ({info.files} Parquet files)")
    return {
        "rows": info.rows,
        "files": info.files,
        "bytes": info.bytes,
        "regions": info.region_rows,
        "action": action,
        "path": str(input_dir),
        "duration_s": time.monotonic() - started,
    }


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Send this process's stderr (file descriptor 2: Spark's JVM inherits it, Dagster's and
    py4j's loggers write to it) to ``path`` while the job runs, so the progress display stays
    readable; restored afterwards (an error is then reported on the terminal)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    with path.open("ab") as f:
        os.dup2(f.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def _env(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the run, restoring the earlier values after it."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _store(opts: DemoOptions) -> Iterator[str]:
    if opts.s3:
        from lakehouse_demo.s3server import SeaweedFS

        data = opts.data_dir / "seaweedfs"
        # The keys go in the URL: Spark's Python workers get their environment from the JVM,
        # which keeps the one it started with (an earlier session in this process had none).
        # They are the fixed keys of a server that listens on 127.0.0.1 only; the summary shows
        # the URL without its query.
        with SeaweedFS(data_dir=data) as server, _env(server.env()):
            yield server.store_url("lake")
        return
    if opts.store_url is not None:
        yield opts.store_url
        return
    store_dir = (opts.data_dir / "store").resolve()
    store_dir.mkdir(parents=True, exist_ok=True)
    yield str(store_dir)


def _instance(home: Path) -> Any:
    """Dagster's instance on local storage under ``home`` (telemetry off), as ``make ui``
    opens it with ``DAGSTER_HOME=home``."""
    from dagster import DagsterInstance

    home.mkdir(parents=True, exist_ok=True)
    cfg = home / "dagster.yaml"
    if not cfg.exists():
        cfg.write_text(DAGSTER_YAML)
    return DagsterInstance.from_config(str(home.resolve()))


def _console(quiet: bool) -> Console:
    """A console on a duplicate of stdout's file descriptor: Dagster captures the steps' fd 1
    into its compute logs, and the progress must still reach the terminal."""
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1, encoding="utf-8")
    console = Console(file=out, quiet=quiet)
    if not console.is_terminal:  # logs and CI: wide enough for the summary's table
        console = Console(file=out, quiet=quiet, width=120)
    return console


def run(opts: DemoOptions, console: Console | None = None) -> DemoRun:
    """Set up, run the Dagster job in-process, return its outputs and facts."""
    started = time.monotonic()
    mode = _prepare_dir(opts)  # first: a refused --dir fails before anything starts
    if console is None:
        console = _console(opts.quiet)
    console.print(f"[yellow]{mode}[/]")
    opts.data_dir.mkdir(parents=True, exist_ok=True)
    logging.getLogger("py4j").setLevel(logging.ERROR)
    from pyspark.sql import SparkSession

    ours = SparkSession.getActiveSession() is None  # else: the caller's session; leave it be
    log_path = log_path_of(opts)
    shown = progress.DemoProgress(console)
    try:
        with interrupts.installed():
            done = _run_job(opts, console, started, mode, ours, log_path, shown)
            if interrupts.requested():  # every raise of it was swallowed: still an interrupt
                raise KeyboardInterrupt
            return done
    except BaseException as e:
        if not interrupted(e):
            raise
        if ours:
            _end_spark_jvm()
        # The with-blocks have stopped what the run started (Spark, Dagster's instance,
        # SeaweedFS); the chain of tracebacks (Dagster's, py4j's) stays out of the terminal.
        raise DemoInterrupted(log_path.resolve(), shown.running()) from None


def log_path_of(opts: DemoOptions) -> Path:
    """Where a run sends Spark's and Dagster's output (the file descriptor 2 of the process)."""
    return opts.data_dir / "logs" / "demo.log"


class DemoInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) stopped the run; what it started has been stopped."""

    def __init__(self, log_path: Path, steps: list[str]) -> None:
        super().__init__(log_path, steps)
        self.log_path = log_path
        self.steps = steps

    def line(self, prog: str) -> str:
        during = f" during step '{self.steps[-1]}'" if self.steps else ""
        return f"{prog}: interrupted{during}; stopped Spark and Dagster; log: {self.log_path}"


def interrupted(e: BaseException) -> bool:
    """Whether ``e`` comes from Ctrl-C: a KeyboardInterrupt, or what Dagster (its
    DagsterExecutionInterruptedError) or py4j turned it into, anywhere in the chain."""
    if interrupts.requested():
        return True
    seen: set[int] = set()
    todo: list[BaseException | None] = [e]
    while todo:
        x = todo.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        if (
            isinstance(x, KeyboardInterrupt)
            or type(x).__name__ == "DagsterExecutionInterruptedError"
        ):
            return True
        todo += [x.__cause__, x.__context__]
    return False


def _run_job(
    opts: DemoOptions,
    console: Console,
    started: float,
    mode: str,
    ours: bool,
    log_path: Path,
    shown: progress.DemoProgress,
) -> DemoRun:
    from lakehouse_demo.definitions import build_definitions, resource_for
    from lakehouse_demo.pipeline import asset_outputs

    with (
        _stderr_to(log_path),
        progress.installed(shown),
        _env({"SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")}),
        _store(opts) as url,
    ):
        setup = _setup_dataset(opts)
        new_orders = opts.new_orders or max(2_000, setup["rows"] // 100)
        demo = resource_for(
            opts.data_dir,
            url,
            new_orders=new_orders,
            gc_grace_s=opts.gc_grace_s,
            spark_master=opts.spark_master,
        )
        instance = _instance(opts.data_dir / "dagster_home")
        job = build_definitions(demo).resolve_job_def("lakehouse_demo_job")
        try:
            result = job.execute_in_process(
                instance=instance,
                run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
                raise_on_error=True,
            )
            outputs = asset_outputs(result)
        except Exception as e:
            if interrupted(e):
                raise
            console.print(
                f"[red]the demo failed[/]; Spark's and Dagster's log: {log_path}; the run is in "
                f"{opts.data_dir / 'dagster_home'} ({ui_hint(opts.data_dir)})"
            )
            raise
        finally:
            instance.dispose()
            if ours:
                _stop_spark()
    facts = RunFacts(
        mode=mode.split(":")[0],
        store_url=url,
        data_dir=str(opts.data_dir.resolve()),
        dagster_home=str((opts.data_dir / "dagster_home").resolve()),
        run_id=result.run_id,
        setup=setup,
        total_s=time.monotonic() - started,
        log_path=str(log_path.resolve()),
        store_note=(
            f" (SeaweedFS at {url.split('endpoint=')[1].split('&')[0]}, stopped; its data is in "
            f"{opts.data_dir / 'seaweedfs'})"
            if opts.s3
            else ""
        ),
    )
    render(outputs, facts, console)
    return DemoRun(outputs, facts, result.success)


def _stop_spark() -> None:
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    if spark is not None:
        spark.stop()


def _end_spark_jvm() -> None:
    """Stop the JVM that PySpark launched for this process (after Ctrl-C). Interrupted while a
    session was starting, there is no active session to stop, and the JVM outlived the demo."""
    from pyspark import SparkContext

    with contextlib.suppress(Exception):
        if SparkContext._active_spark_context is not None:
            SparkContext._active_spark_context.stop()
    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        SparkContext._gateway = None
        SparkContext._jvm = None
    # Interrupted inside PySpark's launch_gateway, the JVM's Popen was a local there: find our
    # own children running Spark's launcher (by parent pid, never by name across the machine).
    for pid in _spark_children():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


def _spark_children() -> list[int]:
    """Pids of this process's direct children that run Spark (Linux /proc; else none)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid == os.getpid() and b"org.apache.spark" in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m lakehouse_demo",
        description="The lakehouse main job end to end through Dagster + Spark.",
    )
    p.add_argument("--dir", type=Path, default=Path("demo-data"), help="data directory")
    p.add_argument("--rows", type=int, default=DEFAULT_ROWS, help="orders to generate")
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--reset",
        dest="reset",
        action="store_true",
        default=True,
        help="reset --dir first (default): only a directory the demo created; keeps the dataset",
    )
    g.add_argument(
        "--reuse", dest="reset", action="store_false", help="keep the data of an earlier run"
    )
    s = p.add_mutually_exclusive_group()
    s.add_argument("--store-url", default=None, help="object store URL (default: <dir>/store)")
    s.add_argument(
        "--s3", action="store_true", help="start SeaweedFS on 127.0.0.1 and run against it"
    )
    p.add_argument(
        "--gc-grace",
        type=float,
        default=2.0,
        help="db_delete_grace in seconds for the scratch clone's GC (default 2)",
    )
    p.add_argument(
        "--new-orders",
        type=int,
        default=None,
        help="orders written during the checkpoint read (default 1%% of --rows)",
    )
    a = p.parse_args(argv)
    try:
        opts = DemoOptions(
            data_dir=a.dir,
            rows=a.rows,
            reset=a.reset,
            store_url=a.store_url,
            s3=a.s3,
            new_orders=a.new_orders,
            gc_grace_s=a.gc_grace,
        )
    except InvalidArgument as e:
        p.error(str(e))
    try:
        result = run(opts)
    except workdir.DemoDirRefused as e:
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return 2
    except DemoInterrupted as e:
        print(e.line(p.prog), file=sys.stderr)
        return 130
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main())
