"""The demo's data directory: taken only when new or empty, marked, reset only when marked.

``python -m lakehouse_demo`` resets ``--dir`` before each run (unless ``--reuse``). It used to
delete the whole directory, with whatever a user kept in it (issue 40, item 5). Now the demo
writes :data:`MARKER` into a directory it creates (or finds empty); a later run resets only a
directory holding that marker, and refuses any other non-empty directory with one line saying how
to proceed. A reset keeps the generated dataset (``input/``): the CLI regenerates it only when its
row count differs (:func:`lakehouse_demo.dataset.describe` reads it back).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from slatedb_core.errors import InvalidArgument

MARKER = ".lakehouse-demo"
"""The file that says "the demo created this directory; it may reset it"."""
KEPT_ON_RESET = frozenset({MARKER, "input"})
"""What a reset keeps: the marker and the generated dataset (a cache: regenerated if stale)."""


class DemoDirRefused(InvalidArgument):
    """``--dir`` is not a directory the demo may use; the message says how to proceed."""


def refusal(data_dir: Path) -> str:
    """The one line that refuses a directory the demo did not create."""
    return (
        f"{data_dir} exists, is not empty and was not created by the demo (no {MARKER} file "
        f"in it): choose another --dir (make demo DEMO_DIR=...) or remove it yourself"
    )


def prepare(data_dir: Path, reset: bool) -> str:
    """Make ``data_dir`` ready for a run; return what was done ('fresh: ...', 'reset: ...' or
    'reuse: ...'). Raises :class:`DemoDirRefused` (before touching anything) when ``data_dir``
    is not a directory, or is a non-empty directory without :data:`MARKER`."""
    if data_dir.exists() or data_dir.is_symlink():
        if not data_dir.is_dir():
            raise DemoDirRefused(f"{data_dir} is not a directory: choose another --dir")
        if not (data_dir / MARKER).is_file():
            if any(data_dir.iterdir()):
                raise DemoDirRefused(refusal(data_dir))
            _mark(data_dir)
            return f"fresh: {data_dir} was empty"
        if not reset:
            return (
                f"reuse: kept the data in {data_dir} (ingest upserts again; --reset to start fresh)"
            )
        for entry in data_dir.iterdir():
            if entry.name in KEPT_ON_RESET:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        kept = " (kept the generated dataset)" if (data_dir / "input").exists() else ""
        return f"reset: wiped {data_dir} and started fresh{kept}"
    data_dir.mkdir(parents=True)
    _mark(data_dir)
    return f"fresh: {data_dir} did not exist"


def claim(data_dir: Path) -> bool:
    """Take ``data_dir`` for the demo before something else writes into it (``make ui`` keeps its
    Dagster home and sample store under ``DEMO_DIR``): create and mark it when it is missing or
    empty, so that a later ``make demo`` may reset it. Returns whether it holds the marker;
    anything else is left as it is (the demo refuses it with one line)."""
    if not data_dir.exists() and not data_dir.is_symlink():
        data_dir.mkdir(parents=True)
    if data_dir.is_dir() and not (data_dir / MARKER).is_file() and not any(data_dir.iterdir()):
        _mark(data_dir)
    return (data_dir / MARKER).is_file()


def _mark(data_dir: Path) -> None:
    (data_dir / MARKER).write_text(
        "Created by `python -m lakehouse_demo` (make demo): a later run resets this directory.\n"
    )


if __name__ == "__main__":  # make ui: python -m lakehouse_demo.workdir DEMO_DIR
    import sys

    claim(Path(sys.argv[1]))
