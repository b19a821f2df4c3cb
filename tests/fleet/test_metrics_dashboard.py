"""infra/grafana/slatedb-fleet.json, the Grafana dashboard to import (issue 40, item 11): every
metric it queries is one ``slatedb fleet serve-metrics`` exports, every exported figure has a
panel, and every panel reads the datasource chosen in its ``datasource`` variable."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from slatedb_core.fleet.metrics import ENGINE_METRICS, FLEET_METRICS

DASHBOARD = Path(__file__).resolve().parents[2] / "infra" / "grafana" / "slatedb-fleet.json"
EXPORTED = set(FLEET_METRICS) | set(ENGINE_METRICS)


def _load() -> dict[str, Any]:
    data = json.loads(DASHBOARD.read_text())
    assert isinstance(data, dict)
    return data


def _exprs(dash: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            exprs.append(var["definition"])
    return exprs


def test_every_queried_metric_is_exported() -> None:
    queried = {m for e in _exprs(_load()) for m in re.findall(r"\bslatedb_[a-z0-9_]+", e)}
    assert queried, "no slatedb_ metric queried"
    assert queried <= EXPORTED, sorted(queried - EXPORTED)


def test_every_exported_figure_has_a_panel() -> None:
    queried = {m for e in _exprs(_load()) for m in re.findall(r"\bslatedb_[a-z0-9_]+", e)}
    assert EXPORTED <= queried, sorted(EXPORTED - queried)


def test_every_panel_reads_the_datasource_variable() -> None:
    dash = _load()
    names = [v["name"] for v in dash["templating"]["list"] if v["type"] == "datasource"]
    assert names == ["datasource"]
    for panel in dash["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
