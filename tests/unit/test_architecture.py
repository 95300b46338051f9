"""The layers of README's "Architecture" hold: the import contracts (pyproject.toml,
[tool.importlinter], loadtests/ among them), no import cycle between modules (TYPE_CHECKING
imports included), no clock read in gateway/core, and no two modules or classes sharing a name
(design.md: a name found once says which module it means)."""

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
NAMED_TREES = ("gateway", "policies", "loadtests", "benchmarks")
# Class names more than one module defines on purpose: each is a convention read by name.
SHARED_CLASS_NAMES = {
    # every policies/<name>.py defines its parameters as `Params` (policies/registry.py pairs
    # each module's Params with its policy; a policy is a module, read as `<name>.Params`)
    "Params",
}
# Public function names more than one module defines on purpose: each is a convention.
SHARED_FUNCTION_NAMES = {
    "main",  # a runnable module's entry point (`python -m ...`, the console script)
    "register",  # a command module adds its commands to the CLI (gateway/cli.py)
}
ROUTER_COLLABORATORS = 6  # issue 33: a Router that runs the lifecycle, nothing else
# The steps only gateway/core/decision_pipeline.py calls.
PIPELINE_STEPS = {"candidate_snapshots", "only_candidates", "with_cached", "estimator_of"}
# File names more than one module has by Python's own conventions.
SHARED_FILE_NAMES = {
    "__init__.py",  # a package
    "__main__.py",  # what `python -m <package>` runs
}


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


def test_the_router_has_at_most_six_collaborators_and_nothing_reaches_through_it() -> None:
    """`Router` runs the lifecycle only: what it works with comes in through its constructor
    (at most ROUTER_COLLABORATORS), and nothing else reads another object through it (the
    runtime owns the leases, owners, decisions and policy), so `router.x.y` never appears."""
    tree = ast.parse((ROOT / "gateway" / "server" / "router.py").read_text())
    router = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Router")
    init = next(n for n in router.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    collaborators = [a.arg for a in (*init.args.args, *init.args.kwonlyargs) if a.arg != "self"]
    assert len(collaborators) <= ROUTER_COLLABORATORS, collaborators
    reached = []
    for path in _modules("gateway", "loadtests"):  # benchmarks/ read starlette's own routers
        for node in ast.walk(ast.parse(path.read_text())):
            inner = node.value if isinstance(node, ast.Attribute) else None
            if (
                isinstance(inner, ast.Attribute)
                and inner.attr == "router"
                and node.attr != "handle"
            ):
                reached.append(f"{path.relative_to(ROOT)}:{node.lineno} router.{node.attr}")
    assert reached == []


def test_the_decision_order_is_written_once() -> None:
    """The steps of a decision (candidates, admission by the prediction, the ranking kept to
    real candidates, the prefix index's lookup) are called only from the decision pipeline, so
    the live router and the offline simulator cannot drift apart (design.md, "one decision
    pipeline, three drivers")."""
    pipeline = ROOT / "gateway" / "core" / "decision_pipeline.py"
    callers = []
    for path in _modules("gateway", "loadtests"):  # benchmarks/decision.py times each step
        if path == pipeline:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            called = node.func if isinstance(node, ast.Call) else None
            name = getattr(called, "id", None) or getattr(called, "attr", None)
            if name in PIPELINE_STEPS and not _defines(path, name):
                callers.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    assert callers == [], "\n".join(callers)


def test_no_two_modules_define_one_class_name() -> None:
    """Private classes count too: one private base defined in several modules is one idea
    written several times."""
    defined: dict[str, list[str]] = {}
    for path in _modules():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and node.name not in SHARED_CLASS_NAMES:
                defined.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    shared = _shared(defined)
    assert shared == [], "\n".join(shared)


def test_no_function_imported_by_its_name_is_defined_twice() -> None:
    """A public function called by its bare name (`from m import f`, here or in tests/) has one
    definition, so a reader of `f(...)` finds one `def f`. A name only ever read through its
    module (`audit.configure`, `openai_routes.handle`) says at each call which one it is, and
    may repeat: a per-module protocol."""
    defined: dict[str, list[str]] = {}
    modules: dict[str, list[str]] = {}
    for path in _modules():
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if not node.name.startswith("_"):
                defined.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
                modules.setdefault(node.name, []).append(_dotted(path))
    imported = _imported_by_name()
    clashes = {
        name: paths
        for name, paths in defined.items()
        if name not in SHARED_FUNCTION_NAMES
        and any((module, name) in imported for module in modules[name])
    }
    shared = _shared(clashes)
    assert shared == [], "\n".join(shared)


def test_no_two_modules_share_a_file_name() -> None:
    named: dict[str, list[str]] = {}
    for path in _modules():
        if path.name not in SHARED_FILE_NAMES:
            named.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    shared = _shared(named)
    assert shared == [], "\n".join(shared)


def _defines(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text())
    return any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body)


def _modules(*trees: str) -> list[Path]:
    """The modules of `trees` (default: NAMED_TREES)."""
    return sorted(path for tree in trees or NAMED_TREES for path in (ROOT / tree).rglob("*.py"))


def _dotted(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _imported_by_name() -> set[tuple[str, str]]:
    """(module, name) for every `from module import name` in the named trees and tests/."""
    found: set[tuple[str, str]] = set()
    for tree in (*NAMED_TREES, "tests"):
        for path in (ROOT / tree).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    found.update((node.module, alias.name) for alias in node.names)
    return found


def _shared(places: dict[str, list[str]]) -> list[str]:
    """One line per name found in more than one place: the name and every path that has it."""
    return [f"{name}: {', '.join(paths)}" for name, paths in places.items() if len(paths) > 1]


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
