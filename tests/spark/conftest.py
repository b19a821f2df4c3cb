"""One local Spark session for every test of this package (starting Spark costs seconds).

``local[2,4]``: two worker threads, and a failed task is retried up to 4 times, as on a cluster
(plain ``local[2]`` never retries). Everything binds to 127.0.0.1 (see spark_jobs.session).
Executors are separate Python processes: tests use the local filesystem store (``file://``), never
``memory://``, which would be a different store in each process.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import SparkSession

from spark_jobs.session import SessionOptions, get_session

MASTER = "local[2,4]"


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    # catalog tests create tables: their warehouse is a temporary folder, not ./spark-warehouse
    warehouse = tmp_path_factory.mktemp("spark-warehouse").as_uri()
    session = get_session(
        SessionOptions(
            master=MASTER,
            app_name="slatedb-tests",
            shuffle_partitions=4,
            conf={"spark.sql.warehouse.dir": warehouse},
        )
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return (tmp_path / "store").as_uri()
