"""Registering ``format("slatedb")`` makes Spark's Python workers run an interpreter that has the
package, or fails on the driver with one line saying how to set it (issue 40, item 1).

Each test runs a README-like script in a fresh process, without the venv activated: ``PATH`` puts
the system ``/usr/bin/python3`` (which cannot import the package's dependencies) first, and
``PYSPARK_PYTHON`` is unset, so Spark's default worker interpreter, ``python3``, is the wrong one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

SYSTEM_PYTHON = "/usr/bin/python3"

SCRIPT = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    from spark_jobs.datasource import SlateDBDataSource

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("OFF")
    try:
        spark.dataSource.register(SlateDBDataSource)
    except Exception as e:
        print("REGISTER-FAILED", type(e).__name__, repr(str(e)))
        sys.exit(3)
    url = sys.argv[1]
    df = spark.createDataFrame([("a", b"1"), ("b", b"2"), ("c", b"3")], "k string, v binary")
    (
        df.write.format("slatedb").option("url", url).option("path", "t")
        .option("key", "k").option("value", "v").mode("append").save()
    )
    rows = spark.read.format("slatedb").option("url", url).option("path", "t").load().collect()
    print("ROWS", sorted((bytes(r.key), bytes(r.value)) for r in rows))
    spark.stop()
    """
)


def _system_python_lacks_package() -> bool:
    if not os.path.exists(SYSTEM_PYTHON):
        return False
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import ulid"], capture_output=True)
    return probe.returncode != 0


needs_bare_python = pytest.mark.skipif(
    not _system_python_lacks_package(), reason="needs a system python3 without the package"
)


def _run(tmp_path: Path, **env_extra: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "readme_snippet.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "VIRTUAL_ENV"))}
    env["PATH"] = "/usr/bin:/bin"
    env.update(env_extra)
    return subprocess.run(
        [sys.executable, str(script), (tmp_path / "store").as_uri()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@needs_bare_python
def test_local_session_workers_run_the_drivers_interpreter(tmp_path: Path) -> None:
    """A local session nobody chose an interpreter for: registering points its workers at the
    driver's interpreter, and the README's write and read work."""
    done = _run(tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "ROWS [(b'a', b'1'), (b'b', b'2'), (b'c', b'3')]" in done.stdout


def _venv_base_python() -> str:
    """The interpreter the venv's ``python`` links to: the same file, without the venv."""
    return os.path.realpath(sys.executable)


def _base_lacks_package() -> bool:
    base = _venv_base_python()
    if base == sys.executable:
        return False
    return subprocess.run([base, "-c", "import ulid"], capture_output=True).returncode != 0


@needs_bare_python
@pytest.mark.parametrize(
    "chosen",
    [
        pytest.param(SYSTEM_PYTHON, id="system"),
        pytest.param(
            "venv-base",
            id="venv-base",
            marks=pytest.mark.skipif(not _base_lacks_package(), reason="no venv base"),
        ),
    ],
)
def test_chosen_interpreter_without_package_fails_on_register(tmp_path: Path, chosen: str) -> None:
    """PYSPARK_PYTHON names an interpreter without the package: ``register`` fails on the driver
    with one line naming it and saying how to set it, before any read or write. The venv's base
    interpreter is the very file the venv's ``python`` links to, yet not the venv."""
    exe = _venv_base_python() if chosen == "venv-base" else chosen
    done = _run(tmp_path, PYSPARK_PYTHON=exe)
    assert done.returncode == 3, done.stdout[-2000:] + done.stderr[-4000:]
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("REGISTER-FAILED"))
    message = line.split(" ", 2)[2]
    assert "\\n" not in message, message
    assert exe in message and "PYSPARK_PYTHON" in message, message
    assert sys.executable in message, message


@needs_bare_python
def test_chosen_interpreter_with_package_passes_the_worker_probe(tmp_path: Path) -> None:
    """PYSPARK_PYTHON names another path to the venv's interpreter: registering probes a worker,
    which imports the package, and the README's write and read work."""
    other = os.path.join(os.path.dirname(sys.executable), "python3")
    assert os.path.exists(other) and other != sys.executable
    done = _run(tmp_path, PYSPARK_PYTHON=other)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "ROWS [(b'a', b'1'), (b'b', b'2'), (b'c', b'3')]" in done.stdout
