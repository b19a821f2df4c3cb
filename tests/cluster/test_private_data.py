"""Issue 39, item 6: ``make cluster`` kept its data world-readable (the cluster folder 0755,
SeaweedFS's volume files 0644 with the objects' bytes in the clear). Now the folder and every
service's data (SeaweedFS, PostgreSQL, Spark's work and scratch folders, Dagster's home) are
private to the user: folders 0700, files 0600 (services run with umask 077).

As root, PostgreSQL runs as the ``postgres`` user and must pass through the cluster folder and
``logs/`` to its own: those two are 0710 with the ``postgres`` group (no listing, nothing for
other users)."""

from __future__ import annotations

import grp
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

import lakehouse_demo.cluster.__main__ as cluster_cli
from lakehouse_demo.cluster.processes import stop
from lakehouse_demo.cluster.services import pg_bin, services
from lakehouse_demo.cluster.settings import ClusterSettings, Ports, load_state, read_env_file
from slatedb_core.errors import SlateDBError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

JOB = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    spark = SparkSession.builder.master(sys.argv[1]).getOrCreate()
    print("ROWS", spark.range(1000).repartition(4).count(), flush=True)
    spark.stop()
    """
)


def _traverse_only_for_postgres(path: Path) -> bool:
    st = path.stat()
    return (
        os.geteuid() == 0
        and stat.S_IMODE(st.st_mode) == 0o710
        and st.st_gid == grp.getgrnam("postgres").gr_gid
    )


def test_every_folder_and_file_of_the_cluster_is_private(tmp_path: Path) -> None:
    try:
        pg_bin()
    except SlateDBError:
        pytest.skip("no PostgreSQL server binaries")
    # PostgreSQL runs as its own user when we are root: a parent it can pass (not pytest's 0700)
    base = Path(tempfile.mkdtemp(prefix="private-cluster-"))
    base.chmod(0o755)
    # a folder created world-readable beforehand (as an older make cluster left it)
    s = ClusterSettings(dir=base / "c", ports=Ports.free(1), workers=1)
    s.dir.mkdir(mode=0o755)
    s.dir.chmod(0o755)
    wanted = {"s3", "postgres", "spark-master", "spark-worker-1", "dagster-webserver"}
    mp = pytest.MonkeyPatch()
    mp.setattr(cluster_cli, "services", lambda s: [v for v in services(s) if v.name in wanted])
    try:
        assert cluster_cli.start(s) == 0
        job = tmp_path / "job.py"
        job.write_text(JOB)
        env = {**os.environ, **read_env_file(s.env_file)}
        spark_submit = str(Path(sys.executable).parent / "spark-submit")
        res = subprocess.run(
            [spark_submit, "--master", s.spark_master_url, str(job), s.spark_master_url],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert "ROWS 1000" in res.stdout, res.stderr[-3000:]
        assert any((s.dir / "s3" / "data").rglob("*.dat")), "no SeaweedFS volume to check"
        assert any(s.logs.glob("spark-worker-1/app-*/*/stderr")), "no executor folder to check"
        assert (s.dir / "postgres" / "data" / "PG_VERSION").exists()
        assert (s.dagster_home / "dagster.yaml").exists()

        exposed = []
        for path in [s.dir, *s.dir.rglob("*")]:
            st = path.lstat()
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode) or stat.S_ISSOCK(st.st_mode):
                continue  # reached only through the folders checked here
            if stat.S_ISDIR(st.st_mode):
                if mode != 0o700 and not (
                    path in (s.dir, s.logs) and _traverse_only_for_postgres(path)
                ):
                    exposed.append(f"{oct(mode)} {path.relative_to(base)}/")
            elif path.suffix == ".vif" and path.parent == s.dir / "s3" / "data":
                # weed writes a volume's info file (version, replication: no object bytes) with
                # an explicit 0644, whatever the umask; its 0700 folder keeps others out
                assert mode & 0o022 == 0, path
            elif mode & 0o077:
                exposed.append(f"{oct(mode)} {path.relative_to(base)}")
        assert not exposed, "readable by others:\n" + "\n".join(exposed[:40])
    finally:
        _, state = load_state(s.dir)
        for record in reversed(list(state.values())):
            stop(record)
        mp.undo()
        shutil.rmtree(base, ignore_errors=True)
