"""The package's layering, written down once: which layer each part of ``mploader`` is in.

A module may import from its own part (e.g. ``mploader.engine.pool`` from ``mploader.engine.base``) or
from a part in a lower layer, never from a part of its own layer or above.  ``engine`` (where Phase 1
runs) and ``recovery`` (Phase 2) share a layer: they meet only through ``scan``.  Imports are read from
the source with ``ast``; those under ``if TYPE_CHECKING:`` do not run and are not counted.  No cycle
among modules either.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mploader"

LAYERS: list[set[str]] = [
    # no mploader imports but errors
    {"errors", "config", "costs", "progress", "metrics", "prometheus", "host", "_version"},
    {"format", "broker_config"},  # bytes on disk, no policy; a broker's server.properties and topic configs
    {"scan"},  # Phase 1: pure, read-only
    {"disk", "result"},  # the only writer; what a load reports
    {"engine", "recovery"},  # where Phase 1 runs; Phase 2
    {"runners"},  # where partitions load: loading threads, worker processes (Phase 1 and Phase 2 of each)
    {"load_plan"},  # one plan a load: the engine, the workers, the runner
    {"manager", "generate"},  # all data dirs (LogManager); the data generator
    {"verify"},  # the read-only audit (uses the manager's dry run)
    {"spark"},  # load and verify on a Spark cluster (the Spark engine; uses the manager and verify)
    {"experiments"},  # sweeps, device sampling, throttled devices, plots (load through the manager)
    {"api"},  # the public load_logs (the manager's, and the background verification)
    {"cli", ""},  # the command; the public API (mploader/__init__)
    {"__main__"},  # python -m mploader
]
LAYER = {part: i for i, parts in enumerate(LAYERS) for part in parts}


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def part_of(module: str) -> str:
    """``mploader.engine.pool`` -> ``engine``; ``mploader`` -> ``""``."""
    return module.split(".")[1] if "." in module else ""


def imports_of(source: str, module: str, is_package: bool) -> set[str]:
    tree = ast.parse(source)
    skipped = {id(n) for node in ast.walk(tree)
               if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
               for n in ast.walk(node)}
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "mploader")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target.split(".")[0] == "mploader":
                out.add(target)
    return out


def graph() -> dict[str, set[str]]:
    files = sorted(PACKAGE.rglob("*.py"))
    return {module_name(f): imports_of(f.read_text(), module_name(f), f.name == "__init__.py") for f in files}


def upward_imports(g: dict[str, set[str]]) -> list[str]:
    bad = []
    for module, targets in g.items():
        for target in targets:
            a, b = part_of(module), part_of(target)
            if a != b and LAYER[b] >= LAYER[a]:
                bad.append(f"{module} imports {target} (layer {LAYER[b]} '{b}' is not below layer {LAYER[a]} '{a}')")
    return sorted(bad)


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), over imports of modules that exist."""
    edges = {m: {t for t in ts if t in g and t != m and not m.startswith(t + ".")} for m, ts in g.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def test_every_part_has_a_layer() -> None:
    assert {part_of(m) for m in graph()} <= set(LAYER), "a new part of mploader: give it a layer in LAYERS"


def test_no_module_imports_from_its_layer_or_above() -> None:
    assert upward_imports(graph()) == []


def test_no_import_cycles() -> None:
    assert cycles(graph()) == []


def test_the_checks_see_what_they_forbid() -> None:
    g = graph()
    g["mploader.scan.walk"] = g["mploader.scan.walk"] | {"mploader.recovery.loader"}  # Phase 1 using Phase 2
    g["mploader.recovery.loader"] = g["mploader.recovery.loader"] | {"mploader.engine.pool"}  # side by side
    assert upward_imports(g) == [
        "mploader.recovery.loader imports mploader.engine.pool (layer 4 'engine' is not below layer 4 'recovery')",
        "mploader.scan.walk imports mploader.recovery.loader (layer 4 'recovery' is not below layer 2 'scan')",
    ]
    assert any({"mploader.scan.walk", "mploader.recovery.loader"} <= set(c) for c in cycles(g))
    assert imports_of("from ..format import names\nif TYPE_CHECKING:\n    from mploader.manager import x\n",
                      "mploader.scan.walk", False) == {"mploader.format"}
