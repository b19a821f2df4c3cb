"""docs/architecture.md is the map of the code, and it must not drift (issue 41, item 5).

Its tree names every package and top-level module of each package import-linter checks
(``root_packages`` in pyproject.toml), each with a one-line purpose, and names nothing that is
gone; every file or package path it names exists (a glob matches something); its layer list is
pyproject's import-linter layers, the same names in the same order; and its tree of
``slatedb_core/`` runs top to bottom in that layer order, so each entry sits in its layer.
"""

from __future__ import annotations

import itertools
import re
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"

_ENTRY = re.compile(r"^  ([A-Za-z_]\w*(?:\.py|/))(?:\s+(\S.*))?$")
_ROOT_LINE = re.compile(r"^([A-Za-z_]\w*)/(?:\s|$)")
_BACKTICKED_PATH = re.compile(r"`([A-Za-z_][\w./*-]*(?:\.py|/))`")
_SLASHED_PY = re.compile(r"(?<![\w./{}<-])((?:[A-Za-z_][\w-]*/)+[A-Za-z_]\w*\.py)\b")


def _pyproject() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["tool"]["importlinter"]  # type: ignore[no-any-return]


def _section(title: str) -> str:
    text = DOC.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _code_block(section: str) -> list[str]:
    start = section.index("```\n") + 4
    return section[start : section.index("```", start)].splitlines()


def _tree() -> dict[str, dict[str, str]]:
    """root package -> {entry ("name.py" or "name/"): its purpose}, in the doc's order."""
    tree: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in _code_block(_section("The tree")):
        root = _ROOT_LINE.match(line)
        if root:
            current = tree.setdefault(root.group(1), {})
            continue
        entry = _ENTRY.match(line)
        if entry and current is not None:
            current[entry.group(1)] = entry.group(2) or ""
    return tree


def _children(package: str) -> set[str]:
    """The packages ("name/") and modules ("name.py") directly inside ``package``."""
    found: set[str] = set()
    for path in (ROOT / package).iterdir():
        if path.is_dir() and (path / "__init__.py").exists():
            found.add(path.name + "/")
        elif path.suffix == ".py" and path.name != "__init__.py":
            found.add(path.name)
    return found


def _doc_layers() -> tuple[list[str], dict[str, list[str]]]:
    """The layer list: the line of root packages, and each container's layers top to bottom."""
    lines = [line.rstrip() for line in _code_block(_section("Layers"))]
    top = next(line for line in lines if " > " in line)
    containers: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lines:
        heading = re.match(r"^([A-Za-z_]\w*), top to bottom", line)
        if heading:
            current = containers.setdefault(heading.group(1), [])
        elif current is not None and line.startswith("  ") and line.strip():
            current.append(line.strip())
        elif not line.strip():
            current = None
    return [_norm(layer) for layer in top.split(" > ")], {
        name: [_norm(layer) for layer in layers] for name, layers in containers.items()
    }


def _norm(layer: str) -> str:
    return " | ".join(sorted(part.strip() for part in layer.split("|")))


def _contracts() -> tuple[list[str], dict[str, list[str]]]:
    top: list[str] = []
    containers: dict[str, list[str]] = {}
    for contract in _pyproject()["contracts"]:
        if contract["type"] != "layers":
            continue
        layers = [_norm(layer) for layer in contract["layers"]]
        if "containers" in contract:
            for container in contract["containers"]:
                containers[container] = layers
        else:
            top = layers
    return top, containers


def test_the_tree_names_every_package_and_module_and_nothing_gone() -> None:
    tree = _tree()
    problems: list[str] = []
    for package in _pyproject()["root_packages"]:
        if package not in tree:
            problems.append(f"{package}/ has no place in the tree")
            continue
        on_disk = _children(package)
        named = set(tree[package]) - {"__init__.py"}
        problems += [f"{package}/{name} is missing from the tree" for name in on_disk - named]
        problems += [f"{package}/{name} is in the tree but gone" for name in named - on_disk]
        problems += [
            f"{package}/{name} has no one-line purpose"
            for name, why in tree[package].items()
            if not why
        ]
    assert not problems, "\n".join(sorted(problems))


def test_every_path_the_doc_names_exists() -> None:
    text = DOC.read_text()
    paths = set(_BACKTICKED_PATH.findall(text)) | set(_SLASHED_PY.findall(text))
    assert len(paths) > 20, "the map names the modules of its tables"
    gone = sorted(
        path
        for path in paths
        if not any(any(base.glob(path)) for base in (ROOT, ROOT / "slatedb_core"))
    )
    assert not gone, f"docs/architecture.md names paths that do not exist: {gone}"


def test_the_layer_list_is_pyprojects_import_linter_layers() -> None:
    doc_top, doc_containers = _doc_layers()
    top, containers = _contracts()
    assert doc_top == top
    assert doc_containers == containers


def test_every_package_and_top_level_module_sits_in_a_layer() -> None:
    doc_top, doc_containers = _doc_layers()
    in_top = {name for layer in doc_top for name in layer.split(" | ")}
    assert in_top == set(_pyproject()["root_packages"])
    for container, layers in doc_containers.items():
        names = {name for layer in layers for name in layer.split(" | ")}
        modules = {child.removesuffix("/").removesuffix(".py") for child in _children(container)}
        assert modules - names == set(), f"{container}: not in any layer"
        assert names - modules == set(), f"{container}: layers name what is gone"


def test_the_core_tree_runs_in_layer_order() -> None:
    _, containers = _contracts()
    for container, layers in containers.items():
        rank = {name: i for i, layer in enumerate(layers) for name in layer.split(" | ")}
        entries = [e.removesuffix("/").removesuffix(".py") for e in _tree()[container]]
        ranks = [(rank[e], e) for e in entries if e in rank]
        out_of_order = [
            f"{b} (layer {rb}) after {a} (layer {ra})"
            for (ra, a), (rb, b) in itertools.pairwise(ranks)
            if rb < ra
        ]
        assert not out_of_order, f"{container}'s tree leaves layer order: {out_of_order}"


def test_a_checkpoints_result_lives_with_checkpoints() -> None:
    """``CheckpointCreateResult`` is the checkpoint concept's, not an option (issue 41, item 5)."""
    import slatedb_core
    from slatedb_core import checkpoints, options

    assert slatedb_core.CheckpointCreateResult is checkpoints.CheckpointCreateResult
    assert checkpoints.CheckpointCreateResult.__module__ == "slatedb_core.checkpoints"
    assert not hasattr(options, "CheckpointCreateResult")
