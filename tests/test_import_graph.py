"""The package's import graph has no cycle (every import, module level or inside functions), and no module
below the CLI imports the zoo except the CLI's model registry."""
import ast
from pathlib import Path

ROOT = Path(__file__).parents[1] / "src" / "attnspec"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")
                base = base[:len(base) - node.level + 1] if node.level else []
                mod = ".".join(base + ([node.module] if node.module else []))
                targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for t in targets:
                if t in modules and t != name and not name.startswith(t + "."):   # a package's own __init__
                    graph[name].add(t)
    return graph


def _cycles(graph):
    seen, stack, on_stack, found = set(), [], set(), []

    def visit(u):
        seen.add(u)
        stack.append(u)
        on_stack.add(u)
        for v in sorted(graph[u]):
            if v in on_stack:
                found.append(stack[stack.index(v):] + [v])
            elif v not in seen:
                visit(v)
        stack.pop()
        on_stack.discard(u)
    for u in sorted(graph):
        if u not in seen:
            visit(u)
    return found


def _without_package_inits(graph):
    """Edges into a package's ``__init__`` re-exports stand for the submodule they re-export; drop the
    package node's own outgoing edges to its children (re-exports are not a dependency of the children)."""
    return {u: {v for v in vs if not v.startswith(u + ".")} for u, vs in graph.items()}


def test_no_import_cycle():
    cycles = _cycles(_without_package_inits(_graph()))
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles[:5])


def test_the_graph_sees_real_edges():
    g = _graph()
    assert "attnspec.theory.pencil" in g["attnspec.theory.dyson"]
    assert "attnspec.models.ablation" in g["attnspec.diagnostics.pipeline.head_removal"]


def _reach(graph, start):
    seen, todo = set(), [start]
    while todo:
        for v in graph[todo.pop()]:
            if v not in seen:
                seen.add(v)
                todo.append(v)
    return seen


def test_layers_depend_downward():
    """Configurations import nothing of the package; the random-matrix layers (spectra, theory, simulation,
    identification) reach nothing above them (sweeps, figures, diagnostics, models, CLI, zoo)."""
    g = _without_package_inits(_graph())
    assert not {v for v in g["attnspec.config"] if v.startswith("attnspec.")}
    above = ("attnspec.sweeps", "attnspec.figures", "attnspec.diagnostics", "attnspec.models", "attnspec.cli",
             "attnspec.zoo", "attnspec.report", "attnspec.validation", "attnspec.plots")
    for layer in ("attnspec.spectra", "attnspec.simulation", "attnspec.identify"):
        for mod in [m for m in g if m == layer or m.startswith(layer + ".")]:
            bad = sorted(v for v in _reach(g, mod) if v.startswith(above))
            assert not bad, f"{mod} reaches {bad}"


def _modules_under(graph, package):
    return [m for m in graph if m == package or m.startswith(package + ".")]


def test_diagnostics_depends_downward():
    """Nothing of the diagnosis reaches the report, the figures, the CLI or the zoo, and the models reach nothing
    of the diagnosis; inside it, statistics < options < pipeline < result < the entry points."""
    g = _without_package_inits(_graph())
    d = "attnspec.diagnostics"
    for mod in _modules_under(g, d):
        bad = sorted(v for v in _reach(g, mod) if v.startswith(("attnspec.report", "attnspec.figures", "attnspec.cli",
                                                                "attnspec.zoo", "attnspec.sweeps", "attnspec.validation")))
        assert not bad, f"{mod} reaches {bad}"
    for mod in _modules_under(g, "attnspec.models"):
        bad = sorted(v for v in _reach(g, mod) if v.startswith(d))
        assert not bad, f"{mod} reaches {bad}"
    above = {f"{d}.statistics": (f"{d}.options", f"{d}.pipeline", f"{d}.result", f"{d}.entry", f"{d}.distributed"),
             f"{d}.options": (f"{d}.pipeline", f"{d}.result", f"{d}.entry", f"{d}.distributed"),
             f"{d}.pipeline": (f"{d}.result", f"{d}.entry", f"{d}.distributed"),
             f"{d}.result": (f"{d}.entry", f"{d}.distributed")}
    for part, higher in above.items():
        for mod in _modules_under(g, part):
            bad = sorted(v for v in _reach(g, mod) if v.startswith(higher))
            assert not bad, f"{mod} reaches {bad}"


def test_no_module_name_twice_in_diagnostics():
    names = [p.stem for p in (ROOT / "diagnostics").rglob("*.py") if p.name != "__init__.py"]
    names += [p.name for p in (ROOT / "diagnostics").rglob("*") if p.is_dir() and p.name != "__pycache__"]
    assert len(names) > 20 and len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
