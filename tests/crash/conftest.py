"""Report the crash points per operation at the end of a run that collected them."""

from __future__ import annotations

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    import sys

    if "tests.crash.test_crash" not in sys.modules:
        return
    from tests.crash.report import counts

    table = counts()
    parts = [f"{name} {row['crash_points']}" for name, row in table.items()]
    total = sum(int(str(row["crash_points"])) for row in table.values())
    terminalreporter.write_sep("-", f"crash points per store kind: {total}")
    terminalreporter.write_line(", ".join(parts))
