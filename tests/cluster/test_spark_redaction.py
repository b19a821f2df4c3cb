"""What Spark's UIs may show of the deployment's client configuration (issue 39, item 1; review:
Spark 4's default ``spark.redaction.regex`` misses ``AWS_ACCESS_KEY_ID`` and the endpoint, so the
executors' store settings showed in the driver UI's Environment tab, which any local user can
open). Spark redacts a setting whose key or value the pattern finds (``Matcher.find``, which
Python's ``re.search`` matches for this pattern's syntax)."""

from __future__ import annotations

import re
from pathlib import Path

from lakehouse_demo.cluster.settings import EXECUTOR_ENV, spark_auth_conf

INFRA = Path(__file__).resolve().parents[2] / "infra"


def _settings(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.strip().partition(" ")
            out[key] = value.strip()
    return out


def test_every_credential_the_clients_send_is_redacted_in_spark_uis() -> None:
    conf = _settings(INFRA / "spark-defaults.conf")
    assert "spark.redaction.regex" in conf, "Spark's default pattern shows AWS_ACCESS_KEY_ID"
    pattern = re.compile(conf["spark.redaction.regex"])
    sensitive = [n for n in EXECUTOR_ENV if n not in ("AWS_REGION", "AWS_ALLOW_HTTP")]
    assert sensitive, EXECUTOR_ENV
    for name in sensitive:
        assert pattern.search(f"spark.executorEnv.{name}"), name
    assert pattern.search("spark.executorEnv.AWS_SESSION_TOKEN")
    for key in spark_auth_conf("x"):
        if "secret" in key:
            assert pattern.search(key), key
    # what is not a credential stays readable
    assert not pattern.search("spark.executorEnv.AWS_REGION")
    assert not pattern.search("spark.sql.shuffle.partitions")
