"""``python -m spark_jobs {ingest,read,compact} ...``: the jobs' command lines in one place.

Each subcommand is also its module's own entry point (``python -m spark_jobs.ingest ...``), and
any of them can be handed to ``spark-submit`` as a file.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    from spark_jobs import compact, ingest, read

    jobs: dict[str, Callable[[Sequence[str]], int]] = {
        "ingest": ingest.main,
        "read": read.main,
        "compact": compact.main,
    }
    if not args or args[0] not in jobs:
        print(f"usage: python -m spark_jobs {{{','.join(jobs)}}} [--help | options]")
        return 2
    return jobs[args[0]](args[1:])


if __name__ == "__main__":
    sys.exit(main())
