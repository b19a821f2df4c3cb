"""infra/ cannot be run here (no Docker engine), so test what can be: every file parses, image tags
are pinned, published ports are bound to loopback, the settings match what the code reads, and the
Dagster instance and orchestration configs validate with the real loaders."""

from __future__ import annotations

import re
import shutil
import subprocess
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

INFRA = Path(__file__).resolve().parents[2] / "infra"


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((INFRA / "docker-compose.yml").read_text())
    return data


def _env_example() -> dict[str, str]:
    out = {}
    for line in (INFRA / "env.example").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def test_every_image_is_pinned_to_an_exact_tag() -> None:
    services = _compose()["services"]
    images = [s["image"] for s in services.values() if "image" in s]
    assert len(images) == len(services)
    for image in images:
        name, _, tag = image.rpartition(":")
        assert name and tag and tag != "latest", image
        assert re.search(r"\d", tag), f"{image}: tag is not a version"
    base = re.search(r"^FROM (\S+)$", (INFRA / "Dockerfile").read_text(), re.M)
    assert base is not None and re.fullmatch(r"python:3\.11\.\d+-slim-\w+", base.group(1))


def test_published_ports_bind_loopback_only_and_match_the_readme() -> None:
    readme = (INFRA / "README.md").read_text()
    for name, service in _compose()["services"].items():
        for port in service.get("ports", []):
            host, host_port, container_port = str(port).split(":")
            assert host == "127.0.0.1", f"{name} publishes {port} beyond loopback"
            assert f"127.0.0.1:{host_port}" in readme, f"{name}'s port {host_port} undocumented"
            assert container_port.isdigit()


def test_compose_variables_are_all_in_the_env_template_without_secrets() -> None:
    text = (INFRA / "docker-compose.yml").read_text()
    used = set(re.findall(r"(?<!\$)\$\{(\w+)\}", text))
    template = _env_example()
    assert used <= set(template), f"missing in env.example: {sorted(used - set(template))}"
    for key, value in template.items():
        if "PASSWORD" in key or "SECRET" in key:
            assert value.startswith("change-me"), f"{key} looks like a real secret"
    assert "infra/.env" in (INFRA.parent / ".gitignore").read_text().split()


def test_app_environment_uses_the_names_the_code_reads() -> None:
    from orchestration.settings import CONFIG_ENV, STORE_URL_ENV
    from slatedb_core.store import url

    env = _compose()["x-app-env"]
    assert STORE_URL_ENV in env and CONFIG_ENV in env
    aws_names = {name for names in url._S3_KEYS.values() for name in names}
    for key in env:
        if key.startswith("AWS_") and key != "AWS_CONDITIONAL_PUT":  # read by delta-rs
            assert key in aws_names, f"{key} is not read by slatedb_core.open_store"
    # the config file the containers are pointed at exists in the image (infra/ is copied)
    assert env[CONFIG_ENV] == "/opt/slatedb/infra/slatedb.yaml"
    assert (INFRA / "slatedb.yaml").exists()
    assert "COPY infra ./infra" in (INFRA / "Dockerfile").read_text()


def test_orchestration_config_loads_with_the_store_url_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from orchestration.settings import STORE_URL_ENV, load_settings

    monkeypatch.setenv(STORE_URL_ENV, _env_example()["SLATEDB_STORE_URL"])
    settings = load_settings(INFRA / "slatedb.yaml")
    assert settings.store["url"] == "s3://lake/prod"
    assert settings.schedules.running is True


def test_dagster_instance_config_validates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dagster._core.instance.config import dagster_instance_config

    for key in ("HOST", "PORT", "DB", "USER", "PASSWORD"):
        monkeypatch.setenv(f"DAGSTER_POSTGRES_{key}", "5432" if key == "PORT" else "x")
    shutil.copy(INFRA / "dagster.yaml", tmp_path / "dagster.yaml")
    config, _ = dagster_instance_config(str(tmp_path))
    assert "postgres" in config["storage"]
    assert config["run_coordinator"]["class"] == "QueuedRunCoordinator"
    assert config["telemetry"]["enabled"] is False
    assert config["run_launcher"]["module"] == "orchestration.run_launcher"
    assert config["run_monitoring"]["enabled"] is True
    # dagster-postgres (the orchestration extra, which the image installs) must be the release
    # that goes with our dagster pin
    _major, minor, patch = version("dagster").split(".")
    pyproject = (INFRA.parent / "pyproject.toml").read_text()
    pin = re.search(r'"dagster-postgres==(\S+?)"', pyproject)
    assert pin is not None and pin.group(1) == f"0.{int(minor) + 16}.{patch}"
    assert "'.[spark,orchestration]'" in (INFRA / "Dockerfile").read_text()


def test_spark_defaults_parse_and_keep_secrets_out() -> None:
    conf = {}
    for line in (INFRA / "spark-defaults.conf").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, value = line.split(None, 1)
            conf[key] = value.strip()
    assert all(k.startswith("spark.") for k in conf)
    assert "AWS_SECRET_ACCESS_KEY" not in "".join(conf)
    assert "delta-spark" in (INFRA / "spark-defaults.conf").read_text()
    # both deployments read this file (make cluster and docker compose): it names no host, the
    # master URL comes from spark-submit and the store's settings from the environment
    assert "spark.master" not in conf
    for value in conf.values():
        assert not re.search(r"minio|spark-master|127\.0\.0\.1|://", value), value


def test_spark_entrypoint_is_valid_sh() -> None:
    script = INFRA / "spark-entrypoint.sh"
    subprocess.run(["sh", "-n", str(script)], check=True)
    bad = subprocess.run(["sh", str(script)], capture_output=True, text=True)
    assert bad.returncode == 2 and "usage" in bad.stderr
