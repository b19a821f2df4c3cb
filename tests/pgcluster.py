"""A throwaway PostgreSQL cluster on 127.0.0.1 for tests and benchmarks.

``initdb`` into a fresh temporary directory, ``pg_ctl start`` on a free port with the unix socket
inside that directory, trust authentication for the ``postgres`` role, and everything removed on
:meth:`PgCluster.stop`. PostgreSQL refuses to run as root; as root the cluster runs as the
``postgres`` system user that Debian's package creates (``runuser``).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

from lakehouse_demo.cluster.services import PG_MISSING, find_pg_bin
from slatedb_core.testing.ports import free_port

__all__ = ["PG_MISSING", "PgCluster", "find_pg_bin"]


class PgCluster:
    def __init__(self, *, fsync: bool = False) -> None:
        bin_dir = find_pg_bin()
        if bin_dir is None:
            raise RuntimeError(PG_MISSING)
        self.bin = bin_dir
        self.dir = Path(tempfile.mkdtemp(prefix="slatedb-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self._as: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        self._run(
            [
                str(self.bin / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
            ]
        )
        opts = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 "
            f"-c fsync={'on' if fsync else 'off'} -c max_connections=200"
        )
        self._run(
            [
                str(self.bin / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.dir / "log"),
                "-o",
                opts,
                "-w",
                "-t",
                "60",
                "start",
            ]
        )
        self.started = True

    def _run(self, cmd: list[str]) -> None:
        res = subprocess.run([*self._as, *cmd], capture_output=True, text=True, timeout=120)
        if res.returncode != 0:
            log = ""
            if (self.dir / "log").exists():
                log = (self.dir / "log").read_text(errors="replace")[-2000:]
            raise RuntimeError(
                f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr.strip()}\n{log}"
            )

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def new_database(self) -> str:
        """A fresh, empty database; returns its URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        if getattr(self, "started", False):
            self.started = False
            subprocess.run(
                [
                    *self._as,
                    str(self.bin / "pg_ctl"),
                    "-D",
                    str(self.data),
                    "-m",
                    "immediate",
                    "-w",
                    "stop",
                ],
                capture_output=True,
                timeout=60,
            )
        shutil.rmtree(self.dir, ignore_errors=True)
