"""The main job, for now: create a database's metadata on the local filesystem store, move it
through a few fenced updates, and show what is stored. ``make demo`` runs this and then prints the
manifests with the ``slatedb`` CLI.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import time
import uuid
from pathlib import Path

from rich.console import Console

from slatedb_core.errors import Fenced
from slatedb_core.manifest.model import Checkpoint, Manifest
from slatedb_core.manifest.store import FencedManifest, ManifestStore
from slatedb_core.store.url import open_store


def run(data_dir: Path, db_path: str, reset: bool) -> None:
    console = Console()
    if reset and data_dir.exists():
        shutil.rmtree(data_dir)
        console.print(f"[yellow]reset[/]: removed {data_dir}")
    store = open_store(str(data_dir))
    ms = ManifestStore(store, db_path)
    existing = ms.try_read_latest()
    if existing is None:
        ms.create_initial(Manifest())
        console.print(f"created database [bold]{db_path}[/] in {store.url}")
    else:
        console.print(f"reusing database [bold]{db_path}[/] (latest manifest {existing.id})")

    first = FencedManifest.init_writer(ms)
    console.print(f"writer A opened with epoch {first.epoch} (manifest {first.stored.id})")
    first.update(lambda m: dataclasses.replace(m, wal_id_last_seen=m.wal_id_last_seen + 3))
    second = FencedManifest.init_writer(ms)
    console.print(f"writer B opened with epoch {second.epoch}: writer A is now a zombie")
    try:
        first.update(lambda m: dataclasses.replace(m, last_l0_seq=m.last_l0_seq + 1))
        console.print("[red]BUG: the zombie writer committed[/]")
    except Fenced as e:
        console.print(f"writer A's next update was refused: [green]{e}[/]")
    now = int(time.time())
    cp = Checkpoint(
        id=uuid.uuid4(),
        manifest_id=second.stored.id + 1,
        create_time_s=now,
        expire_time_s=now + 3600,
        name="demo",
    )
    second.update(lambda m: dataclasses.replace(m, checkpoints=(*m.checkpoints, cp)))
    compactor = FencedManifest.init_compactor(ms)
    console.print(f"compactor opened with epoch {compactor.epoch}")
    latest = ms.read_latest()
    console.print(
        f"latest manifest is {latest.id}; {store.counters.total()} object-store requests "
        f"in all: {store.counters.snapshot()}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dir", default="demo-data", type=Path, help="local store directory")
    p.add_argument("--db", default="orders", help="database path inside the store")
    p.add_argument("--reset", action="store_true", help="delete the directory first")
    a = p.parse_args()
    run(a.dir, a.db, a.reset)


if __name__ == "__main__":
    main()
