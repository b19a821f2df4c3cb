"""Print the package's structure figures: import cycles, private names imported across modules, the number of
modules at ``slatedb_core/``'s top level, and module sizes (see docs/architecture.md).

Sizes are a figure, not a rule: a module is split when it holds two concepts, never to meet a
number (docs/contributing.md). The largest modules are listed so a reviewer sees where they grow.

    python tools/structure.py          # prints the figures; exits 1 when a rule is broken

Every import counts, including those inside functions and under ``TYPE_CHECKING``: an import
placed late to dodge a cycle is still a cycle. Imports of third-party packages are ignored.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("slatedb_core", "spark_jobs", "orchestration", "lakehouse_demo", "devtools")
LARGEST_SHOWN = 10
MAX_TOP_LEVEL = 12


def _module_files() -> dict[str, Path]:
    files: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            files[".".join(parts)] = path
    return files


def _imports(module: str, path: Path, modules: dict[str, Path]) -> Iterator[tuple[str, str, int]]:
    """(imported module, imported name or '', line) for each internal import of ``module``."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES:
                    yield _known(alias.name, modules), "", node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                if submodule in modules:
                    yield submodule, "", node.lineno
                else:
                    yield _known(base, modules), alias.name, node.lineno


def _known(name: str, modules: dict[str, Path]) -> str:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each a cycle of imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _is_ancestor_package(importer: str, imported: str) -> bool:
    """A package's ``__init__`` importing its own submodules (or a module its package) is no cycle."""
    return importer.startswith(imported + ".") or imported.startswith(importer + ".")


def main() -> int:
    modules = _module_files()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    private: list[str] = []
    for module, path in modules.items():
        for target, name, line in _imports(module, path, modules):
            if not target or target == module:
                continue
            if not _is_ancestor_package(module, target):
                graph[module].add(target)
            where = f"{path.relative_to(ROOT)}:{line}"
            if name.startswith("_") and not name.startswith("__"):
                private.append(f"{where} imports {target}.{name}")
            parts = target.split(".")[1:]
            private_module = next((p for p in parts if p.startswith("_")), None)
            if private_module is not None:
                owner = target[: target.index("." + private_module)]
                if not module.startswith(owner + ".") and module != owner:
                    private.append(f"{where} imports {target} from outside {owner}")
    cycles = _cycles(graph)
    top_level = sorted(p.name for p in (ROOT / "slatedb_core").glob("*.py"))
    sizes = sorted(
        (
            (len(p.read_text().splitlines()), str(p.relative_to(ROOT)))
            for p in modules.values()
            if "generated" not in p.parts
        ),
        reverse=True,
    )
    for cycle in cycles:
        print("cycle:", " <-> ".join(cycle))
    for line in private:
        print("private import:", line)
    for lines, path in sizes[:LARGEST_SHOWN]:
        print(f"size: {path} {lines} lines")
    print(f"cycles {len(cycles)}")
    print(f"private cross-module imports {len(private)}")
    print(f"top-level modules {len(top_level)} (at most {MAX_TOP_LEVEL})")
    total = sum(n for n, _ in sizes)
    median = sizes[len(sizes) // 2][0] if sizes else 0
    print(
        f"modules {len(sizes)}, {total} lines, median {median}, largest {sizes[0][0] if sizes else 0}"
    )
    broken = cycles or private or len(top_level) > MAX_TOP_LEVEL
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
