"""The layers of README's "Architecture" hold: the import contracts (pyproject.toml,
[tool.importlinter], loadtests/ among them), no import cycle between modules (TYPE_CHECKING
imports included), and no clock read in gateway/core."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
CLOCK_READS = {"time", "perf_counter", "monotonic", "time_ns", "now", "utcnow", "today"}


def test_the_import_contracts_are_kept() -> None:
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint, "import-linter is in the test extra: pip install -e '.[test]'"
    result = subprocess.run(
        [lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_load_tests_sit_above_the_offline_simulator_never_below_it() -> None:
    """loadtests/ may import gateway.offline (the live twin of `simulate`), never the reverse:
    the contract names it, so lint-imports holds it (the test above)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert "loadtests" in config["root_packages"]
    layers = next(c["layers"] for c in config["contracts"] if c["name"] == "gateway layers")
    offline = next(i for i, layer in enumerate(layers) if "gateway.offline" in layer)
    assert layers.index("loadtests") < offline


def test_no_module_imports_itself_through_others() -> None:
    graph = grimp.build_graph("gateway", "policies", "loadtests")
    cycles = [c for c in _strongly_connected(graph) if len(c) > 1]
    assert cycles == []


def test_core_reads_no_clock() -> None:
    reads = []
    for path in sorted((ROOT / "gateway" / "core").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names]
                module = getattr(node, "module", None) or ""
                if "time" in names or module == "time":
                    reads.append(f"{path.name}:{node.lineno} imports time")
            if (
                isinstance(node, ast.Attribute)
                and node.attr in CLOCK_READS
                and isinstance(node.value, ast.Name)
                and node.value.id in {"time", "datetime"}
            ):
                reads.append(f"{path.name}:{node.lineno} {node.value.id}.{node.attr}")
    assert reads == []


def _strongly_connected(graph: grimp.ImportGraph) -> list[set[str]]:
    """Tarjan's algorithm over the module graph."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == module:
                    break
            found.append(component)

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found
