"""A no-op maintenance run for one database, launched the way the Dagster daemon launches it: a
temporary DAGSTER_HOME (default run launcher and coordinator), ``dagster job launch`` against this
file as the code location, so each run starts its own run worker process (``dagster api
execute_run``) and that start is counted. The run coordinator is the immediate one (no daemon
queue). Prints figures; asserts nothing.

The database (one, local store in a temp directory) has 2 L0 SSTs, under the compactor's L0
trigger of 4, so every compaction run is a real pass that finds nothing to compact. Two jobs over
the same ``compaction`` asset:

* ``compaction_job_multiprocess``: the multiprocess executor (Dagster's default, what the
  maintenance jobs used before): the run worker starts one more process for the step;
* ``compaction_job``: orchestration.jobs' job, on the in-process executor.

Per run, from the instance's run record: ``total`` = created -> finished (what an operator waits),
``worker start`` = created -> the run worker reports it started, ``execution`` = started ->
finished. Launches are sequential; the CLI's own start (Python, imports, loading the code
location) is not counted.

Usage: python bench/dagster_run_bench.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import dagster as dg  # noqa: E402

from orchestration.assets import ASSETS, compaction  # noqa: E402
from orchestration.jobs import JOBS  # noqa: E402
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource  # noqa: E402

STORE_ENV = "DAGSTER_RUN_BENCH_STORE"
DB = "orders"
MULTIPROCESS = "compaction_job_multiprocess"

compaction_job_multiprocess = dg.define_asset_job(
    MULTIPROCESS, selection=[compaction], executor_def=dg.multiprocess_executor
)

defs = dg.Definitions(
    assets=ASSETS,
    jobs=[*JOBS, compaction_job_multiprocess],
    resources={
        "store": ObjectStoreResource(url=os.environ.get(STORE_ENV, "memory://unset")),
        "managed": ManagedDatabasesResource(databases=[DB]),
    },
)
"""The code location ``dagster job launch -f`` loads (the store comes from the environment)."""


DAGSTER_YAML = """\
telemetry:
  enabled: false
run_coordinator:
  module: dagster._core.run_coordinator
  class: DefaultRunCoordinator
"""
"""Launch at submission: the queued coordinator (the default with a daemon) would add the daemon's
dequeue interval, which is not what the executor choice changes."""


def launch(home: Path, env: dict[str, str], job: str) -> str:
    run_id = str(uuid.uuid4())
    subprocess.run(
        [
            str(Path(sys.executable).with_name("dagster")),
            "job",
            "launch",
            "-f",
            __file__,
            "-a",
            "defs",
            "-j",
            job,
            "--run-id",
            run_id,
            "--tags",
            json.dumps({"dagster/partition": DB}),
        ],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return run_id


def wait(instance: dg.DagsterInstance, run_id: str, timeout_s: float = 120) -> dict[str, float]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        record = instance.get_run_record_by_id(run_id)
        if record is not None and record.dagster_run.is_finished:
            if record.dagster_run.status != dg.DagsterRunStatus.SUCCESS:
                raise RuntimeError(f"run {run_id} ended {record.dagster_run.status}")
            created = record.create_timestamp.timestamp()
            assert record.start_time is not None and record.end_time is not None
            return {
                "total": record.end_time - created,
                "worker start": record.start_time - created,
                "execution": record.end_time - record.start_time,
            }
        time.sleep(0.05)
    raise TimeoutError(f"run {run_id} did not finish in {timeout_s} s")


def no_op(instance: dg.DagsterInstance, run_id: str) -> bool:
    """The run materialized compaction with nothing compacted."""
    records = instance.fetch_materializations(compaction.key, limit=50).records
    mine = [r for r in records if r.run_id == run_id]
    if len(mine) != 1 or mine[0].asset_materialization is None:
        return False
    return mine[0].asset_materialization.metadata["compactions"].value == 0


def import_cost(env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of a fresh Python importing this code location: the floor of every run
    worker's start, whatever the executor."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", "import bench.dagster_run_bench"],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=5, help="runs per job (default 5)")
    args = p.parse_args()

    from devtools.sample_data import write_database
    from slatedb_core import open_store

    with tempfile.TemporaryDirectory(prefix="dagster-run-bench-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        (home / "dagster.yaml").write_text(DAGSTER_YAML)
        store_url = (Path(tmp) / "store").as_uri()
        write_database(open_store(store_url), DB, l0_ssts=2, rows_per_sst=200)
        env = {**os.environ, "DAGSTER_HOME": str(home), STORE_ENV: store_url}
        os.environ["DAGSTER_HOME"] = str(home)
        with dg.DagsterInstance.get() as instance:
            instance.add_dynamic_partitions("slatedb_databases", [DB])
            print(
                f"dagster {dg.__version__}, python {sys.version.split()[0]}, "
                f"{os.cpu_count()} cpus, {args.runs} runs per job, one no-op compaction each"
            )
            print(
                f"run launcher: {type(instance.run_launcher).__name__}, "
                f"coordinator: {type(instance.run_coordinator).__name__}"
            )
            print(f"load average {os.getloadavg()[0]:.1f}")
            for _ in range(2):
                wall, cpu = import_cost(env)
                print(
                    f"importing the code location in a fresh process: {wall:.2f} s wall, "
                    f"{cpu:.2f} s CPU"
                )
            for job in (MULTIPROCESS, "compaction_job"):
                figures: list[dict[str, float]] = []
                for _ in range(args.runs):
                    run_id = launch(home, env, job)
                    figures.append(wait(instance, run_id))
                    if not no_op(instance, run_id):
                        raise RuntimeError(f"run {run_id} was not a no-op compaction")
                print(f"\n{job} (load average {os.getloadavg()[0]:.1f})")
                for key in ("total", "worker start", "execution"):
                    values = [f[key] for f in figures]
                    print(
                        f"  {key:<13} median {statistics.median(values):6.2f} s   "
                        f"min {min(values):6.2f} s   max {max(values):6.2f} s"
                    )


if __name__ == "__main__":
    main()
