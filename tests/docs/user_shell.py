"""Helpers for running the README's commands and the examples as a new user would: the venv's
interpreter by path, with ``.venv/bin`` nowhere on PATH and no venv variables (issue 40, item 3)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
"""The interpreter pytest runs under is the venv's (``.venv/bin/pytest``): its folder."""


def user_env(**extra: str) -> dict[str, str]:
    """The environment of a shell that never activated the venv: PATH without the venv's bin
    folder, no VIRTUAL_ENV, no PYSPARK_PYTHON (Spark must find the interpreter itself)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
    }
    env.pop("SLATEDB_URL", None)
    env.pop("SLATEDB_PATH", None)
    parts = os.environ.get("PATH", "").split(os.pathsep)
    keep = [p for p in parts if p and Path(p).resolve() != VENV_BIN.resolve()]
    env["PATH"] = os.pathsep.join(keep or ["/usr/bin", "/bin"])
    env.update(extra)
    return env
