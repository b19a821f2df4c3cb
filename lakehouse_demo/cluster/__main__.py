"""``python -m lakehouse_demo.cluster {start,stop,status}`` (``make cluster``, ``make cluster-stop``).

``start`` starts what is not already running (so it also restarts a service that died or was
killed), printing one status line per service once it answers, and stops what it started if
a signal interrupts it; ``stop`` stops, in reverse order, the processes this folder's
``state.json`` says it started, then any process left that carries this folder in its
``LAKEHOUSE_CLUSTER_DIR`` (a killed launcher's; issue 40, item 7), and with ``--orphans`` every
process of any folder whose cluster has no live supervisor (lakehouse_demo/cluster/orphans.py);
``status`` prints the lines again. Credentials are never printed: they are in
``<dir>/cluster.env`` (mode 0600).
"""

from __future__ import annotations

import argparse
import functools
import io
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakehouse_demo.cluster.orphans import clear_launcher, describe, orphans, record_launcher
from lakehouse_demo.cluster.processes import (
    MARKER,
    ClusterError,
    Stopped,
    alive,
    ancestors,
    marked,
    signals_deferred,
    signals_raise,
    start_time,
    stop,
    stop_marked,
    wait_until,
)
from lakehouse_demo.cluster.services import Service, postmaster_pid, services
from lakehouse_demo.cluster.settings import (
    BUCKET,
    INFRA,
    ClusterSettings,
    Ports,
    client_env,
    load_secrets,
    load_state,
    private_dir,
    read_env_file,
    save_state,
    write_env_file,
    write_spark_confs,
)
from lakehouse_demo.dataset import DatasetOptions, generate
from slatedb_core import open_store
from slatedb_core.errors import InvalidArgument, SlateDBError


def _settings(args: argparse.Namespace, *, for_start: bool) -> ClusterSettings:
    dir = Path(args.dir).resolve()
    ports, _ = load_state(dir)
    if for_start and ports is None:
        ports = Ports.free(args.workers) if args.ports == "auto" else Ports()
    return ClusterSettings(
        dir=dir,
        ports=ports or Ports(),
        workers=args.workers,
        worker_cores=args.worker_cores,
        worker_memory=args.worker_memory,
        config=Path(args.config).resolve(),
    )


def _line(name: str, state: str, detail: str, record: dict[str, object] | None) -> str:
    pid = f"pid {record['pid']}" if record else ""
    return f"  {name:<18} {state:<5} {detail}  {pid}".rstrip()


def start(s: ClusterSettings, only: Sequence[str] | None = None) -> int:
    """Everything this creates, and every service it starts, with umask 077 (issue 39, item 6).
    ``only``: these services alone (in start order), e.g. for a test that needs no Spark.

    SIGTERM, SIGINT or SIGHUP before the last service is up stops what this start started (and
    only that: services found running stay), prints one line and returns 128 + the signal
    (issue 40, item 7). Every service carries ``LAKEHOUSE_CLUSTER_DIR`` (processes.MARKER)."""
    umask = os.umask(0o077)
    launcher: dict[str, object] = {"pid": os.getpid(), "start_time": start_time(os.getpid())}
    marker = os.environ.get(MARKER)
    os.environ[MARKER] = str(s.dir)  # inherited by every service and what it starts
    _, state = load_state(s.dir)
    running = {int(str(r["pid"])) for r in state.values() if alive(r)}
    try:
        with signals_raise():
            try:
                return _start(s, only, launcher)
            except (Stopped, KeyboardInterrupt) as e:
                with signals_deferred():
                    n = _undo_start(s.dir, running)
                name = e.args[0] if isinstance(e, Stopped) else "SIGINT"
                print(
                    f"interrupted ({name}): stopped {n} process(es) this start had started",
                    flush=True,
                )
                return 128 + (e.signum if isinstance(e, Stopped) else signal.SIGINT)
    finally:
        clear_launcher(s.dir, launcher)
        os.umask(umask)
        if marker is None:
            os.environ.pop(MARKER, None)
        else:
            os.environ[MARKER] = marker


def _undo_start(dir: Path, running: set[int]) -> int:
    """Stop every process of the cluster in ``dir`` but the services that were running before
    this start (and what they started: same session, or one of them among its ancestors)."""
    _, state = load_state(dir)
    n = 0
    for name in reversed(list(state)):
        if state[name].get("pid") not in running:
            n += stop(state[name])
            del state[name]
    ours = [
        r
        for r in marked(dir)
        if not running.intersection({_session(int(str(r["pid"]))), *ancestors(int(str(r["pid"])))})
    ]
    n += stop_marked(ours, gentle=_gentle(dir))
    ports, _ = load_state(dir)
    if ports is not None:
        save_state(ClusterSettings(dir=dir, ports=ports, config=INFRA / "slatedb.yaml"), state)
    return n


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def _gentle(dir: Path) -> dict[int, str]:
    """PostgreSQL's fast shutdown is SIGINT (SIGTERM waits for its clients to leave)."""
    pid = postmaster_pid(dir)
    return {} if pid is None else {pid: "SIGINT"}


def _selected(s: ClusterSettings, only: Sequence[str] | None) -> list[Service]:
    every = services(s)
    if only is None:
        return every
    unknown = sorted(set(only) - {svc.name for svc in every})
    if unknown:
        known = ", ".join(svc.name for svc in every)
        raise InvalidArgument(f"unknown service(s) {', '.join(unknown)}; known: {known}")
    return [svc for svc in every if svc.name in only]


def _start(s: ClusterSettings, only: Sequence[str] | None, launcher: dict[str, object]) -> int:
    # PostgreSQL runs as its own user when we are root and must pass through to its folder
    private_dir(s.dir, postgres_traverses=True)
    record_launcher(s.dir, launcher)  # what it starts is no orphan meanwhile (orphans.py)
    private_dir(s.logs, postgres_traverses=True)
    settings_env = client_env(s, load_secrets(s))
    write_env_file(s, settings_env)  # first, so a retry after a failed start keeps the secrets
    write_spark_confs(s, settings_env)
    env = {**os.environ, **settings_env}
    _, state = load_state(s.dir)
    print(f"cluster in {s.dir} (logs: {s.logs})")
    for svc in _selected(s, only):
        why = svc.unavailable()
        if why is not None:  # e.g. no prometheus binary: the rest of the cluster runs
            print(_line(svc.name, "skip", f"not started: {why}", None), flush=True)
            continue
        record = state.get(svc.name)
        if record is not None and alive(record):
            # running, perhaps busy (a late daemon heartbeat): wait for it; a second copy would
            # run beside it (two schedulers) and the first would be forgotten by cluster-stop
            try:
                wait_until(
                    svc.name,
                    functools.partial(svc.ready, s, env),
                    record=record,
                    timeout_s=svc.timeout_s,
                    log=Path(str(record["log"])),
                )
            except ClusterError:
                if alive(record):
                    raise
            else:
                print(_line(svc.name, "up", svc.describe(s), record), flush=True)
                continue
        record = svc.start(s, env)
        state[svc.name] = record
        save_state(s, state)
        log = Path(str(record["log"]))
        wait_until(
            svc.name,
            functools.partial(svc.ready, s, env),
            record=record,
            timeout_s=svc.timeout_s,
            log=log,
        )
        print(_line(svc.name, "up", svc.describe(s), record), flush=True)
    print(f"settings for clients (credentials included): source {s.env_file}")
    return 0


def stop_all(dir: Path) -> int:
    """Stop, in reverse order, what ``state.json`` names, then any process left of the cluster
    in ``dir`` that it does not (a launcher killed before it could record it, a service's
    children that left its process group), found by their ``LAKEHOUSE_CLUSTER_DIR``."""
    with signals_raise(), signals_deferred():  # a second Ctrl-C does not cut the stop short
        _, state = load_state(dir)
        for name in reversed(list(state)):
            stopped = stop(state[name])
            print(f"  {name:<18} {'stopped' if stopped else 'was not running'}", flush=True)
        if state:
            save_state_after_stop(dir)
        left = stop_marked(marked(dir), gentle=_gentle(dir))
        if left:
            print(f"  {'leftovers':<18} {left} process(es) of this cluster stopped", flush=True)
        elif not state:
            print(f"nothing started from {dir}")
    return 0


def stop_orphans(under: Path | None, grace_s: float) -> int:
    """Stop every orphan (lakehouse_demo/cluster/orphans.py) of every cluster folder, or of those
    inside ``under``: SIGTERM (a postmaster: SIGINT), SIGKILL after ``grace_s``; one line each."""
    with signals_raise(), signals_deferred():
        found = orphans(under)
        for dir, records in found.items():
            for r in records:
                print(f"  orphan of {dir}: pid {r['pid']}  {describe(int(str(r['pid'])))}")
            stop_marked(records, gentle=_gentle(dir), timeout_s=grace_s)
        n = sum(len(r) for r in found.values())
        print(
            f"  {'orphans':<18} {n} process(es) of {len(found)} folder(s) stopped"
            if n
            else "no orphaned cluster processes",
            flush=True,
        )
    return 0


def save_state_after_stop(dir: Path) -> None:
    # the ports stay (a restart reuses them, and cluster.env stays right); the processes go
    ports, _ = load_state(dir)
    if ports is not None:
        s = ClusterSettings(dir=dir, ports=ports, config=INFRA / "slatedb.yaml")
        save_state(s, {})


def status(s: ClusterSettings) -> int:
    _, state = load_state(s.dir)
    env = {**os.environ, **client_env(s, load_secrets(s))}
    down = 0
    for svc in services(s):
        why = svc.unavailable()
        if why is not None:
            print(_line(svc.name, "skip", f"not started: {why}", None))
            continue
        record = state.get(svc.name)
        up = record is not None and alive(record) and svc.ready(s, env)
        down += not up
        print(_line(svc.name, "up" if up else "DOWN", svc.describe(s), record if up else None))
    return 1 if down else 0


def orders_with_payload(orders: pa.Table) -> pa.Table:
    """``order_id`` and ``payload``: the order's other columns as one JSON object, built with
    Arrow's string kernels (no Python loop over the rows)."""
    ts = pc.cast(pc.cast(orders["ts"], pa.int64()), pa.string())
    parts = [
        '{"customer_id":"',
        orders["customer_id"],
        '","amount":',
        pc.cast(orders["amount"], pa.string()),
        ',"currency":"',
        orders["currency"],
        '","status":"',
        orders["status"],
        '","ts_ms":',
        ts,
        "}",
    ]
    payload = pc.binary_join_element_wise(*parts, "")
    return pa.table({"order_id": orders["order_id"], "payload": pc.cast(payload, pa.binary())})


def dataset(s: ClusterSettings, rows: int, files: int, prefix: str) -> int:
    """The demo's orders (lakehouse_demo/dataset.py) as ``files`` Parquet objects under
    ``s3://lake/<prefix>/`` on the cluster's S3 server, two columns: ``order_id`` (the key) and
    ``payload`` (the rest of the order as JSON bytes), input for the ingest job."""
    env = read_env_file(s.env_file)
    if not env:
        raise InvalidArgument(f"no cluster in {s.dir}: run start first")
    store = open_store(
        f"s3://{BUCKET}/{prefix.strip('/')}",
        endpoint=env["AWS_ENDPOINT_URL"],
        region=env["AWS_REGION"],
        access_key_id=env["AWS_ACCESS_KEY_ID"],
        secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        allow_http="true",
    )
    table = orders_with_payload(generate(DatasetOptions(rows=rows, files=files)))
    per = -(-table.num_rows // files)
    for i in range(files):
        buf = io.BytesIO()
        pq.write_table(table.slice(i * per, per), buf, compression="zstd")
        store.put(f"part-{i:05d}.parquet", buf.getvalue())
    print(f"{table.num_rows:,} orders in {files} Parquet objects under s3://{BUCKET}/{prefix}/")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m lakehouse_demo.cluster",
        description="The deployment's services on 127.0.0.1.",
    )
    p.add_argument("command", choices=["start", "stop", "status", "dataset"])
    p.add_argument("--dir", default="cluster-data", help="the cluster's folder")
    p.add_argument(
        "--ports",
        choices=["default", "auto"],
        default="default",
        help="auto: free ports (for tests); kept for the folder's later commands",
    )
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--worker-cores", type=int, default=1)
    p.add_argument("--worker-memory", default="1g")
    p.add_argument(
        "--config",
        default=str(INFRA / "slatedb.yaml"),
        help="orchestration config (SLATEDB_ORCHESTRATION_CONFIG)",
    )
    p.add_argument(
        "--only",
        type=lambda v: [n for n in v.split(",") if n],
        default=None,
        help="start: these services alone, comma-separated (e.g. s3,postgres)",
    )
    p.add_argument(
        "--orphans",
        action="store_true",
        help="stop: also every process of any cluster folder whose cluster has no live supervisor",
    )
    p.add_argument("--under", default=None, help="stop --orphans: only clusters in this folder")
    p.add_argument(
        "--grace", type=float, default=20.0, help="stop --orphans: seconds before SIGKILL"
    )
    p.add_argument("--rows", type=int, default=2_000_000, help="dataset: orders to write")
    p.add_argument("--files", type=int, default=8, help="dataset: Parquet objects")
    p.add_argument("--prefix", default="input/orders", help="dataset: where in the bucket")
    args = p.parse_args(argv)
    try:
        if args.command == "stop":
            code = stop_all(Path(args.dir).resolve())
            if args.orphans:
                under = Path(args.under).resolve() if args.under else None
                code = stop_orphans(under, args.grace) or code
            return code
        settings = _settings(args, for_start=args.command == "start")
        if args.command == "dataset":
            return dataset(settings, args.rows, args.files, args.prefix)
        return start(settings, args.only) if args.command == "start" else status(settings)
    except (ClusterError, InvalidArgument) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except SlateDBError as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
