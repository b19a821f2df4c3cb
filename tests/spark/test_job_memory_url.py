"""The Spark job commands (ingest, compact, read) refuse a ``memory://`` store before Spark
starts, as the data source does (issue 40, item 3: each Spark task opens the URL in its own
process, so an ingest into ``memory://`` reported rows that no process could read)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from slatedb_core.errors import InvalidArgument
from spark_jobs import compact, ingest, read


def test_ingest_refuses_a_memory_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.csv"
    src.write_text("k,v\na,1\n")
    code = ingest.main(
        [
            "--url",
            "memory://lake",
            "--path",
            "t",
            "--input",
            str(src),
            "--key-column",
            "k",
            "--create",
            "",
        ]
    )
    assert code == 1
    assert "memory:// store is private to one process" in capsys.readouterr().err


@pytest.mark.parametrize("job", [compact.main, read.main], ids=["compact", "read"])
def test_compact_and_read_refuse_a_memory_store(job: Callable[[Sequence[str]], int]) -> None:
    with pytest.raises(InvalidArgument, match="memory:// store is private to one process"):
        job(["--url", "memory://lake", "--path", "t", "--master", "local[1]"])
