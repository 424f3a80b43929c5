"""Layering of the figures: theory imports nothing above it, and only ``attnspec.figures`` draws.

The static check walks every import statement (module level and inside functions) of ``attnspec.theory`` and of
what it reaches; the runtime checks import the packages in a fresh interpreter and list what got loaded."""
import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1] / "src" / "attnspec"
#: what the theory may build on (besides itself): the configuration and empirical spectra
THEORY_MAY_USE = ("attnspec.config", "attnspec.spectra")


def _modules() -> dict[str, Path]:
    out = {}
    for p in ROOT.rglob("*.py"):
        parts = p.relative_to(ROOT.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """attnspec modules imported by ``name`` anywhere in its source (relative imports resolved)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            cands = [mod] + [f"{mod}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            cands = [a.name for a in node.names]
        else:
            continue
        found |= {c for c in cands if c in modules and c != name}
    return found


def _reach(start: str) -> dict[str, str]:
    """Every attnspec module reachable from ``start``'s package, with the module that imports it first."""
    modules = _modules()
    todo = [m for m in modules if m == start or m.startswith(start + ".")]
    via = {m: m for m in todo}
    while todo:
        m = todo.pop()
        for t in _imports(m, modules[m], modules):
            if t not in via:
                via[t] = m
                todo.append(t)
    return via


def test_theory_reaches_only_config_and_spectra():
    via = _reach("attnspec.theory")
    above = {m: v for m, v in via.items() if m != "attnspec" and not m.startswith("attnspec.theory")
             and not any(m == ok or m.startswith(ok + ".") for ok in THEORY_MAY_USE)}
    assert not above, "attnspec.theory reaches above itself: " + ", ".join(f"{m} (from {v})" for m, v in above.items())
    assert "attnspec.spectra" in via and "attnspec.config" in via          # the walk sees real edges


def test_the_walk_finds_imports_inside_functions():
    # figures.claims imports the simulator inside its functions only: the walk must still see it
    assert "attnspec.simulation" in _reach("attnspec.figures.claims")


def test_no_module_outside_figures_draws():
    offenders = []
    for name, path in _modules().items():
        # the report colours its HTML heat maps with matplotlib colour maps (its figures come from attnspec.figures)
        if name.startswith("attnspec.figures") or name == "attnspec.report":
            continue
        text = path.read_text()
        if "matplotlib" in text or ".plot(" in text or "subplots(" in text:
            offenders.append(name)
    assert not offenders, f"drawing outside attnspec.figures: {offenders}"


def _loaded_after(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport json, sys; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_theory_or_figures_loads_no_plotting_and_no_simulator():
    loaded = _loaded_after("import attnspec.theory, attnspec.figures\nfrom attnspec import solve_law")
    assert not [m for m in loaded if m.startswith("matplotlib")]
    assert not [m for m in loaded if m.startswith(("attnspec.simulation", "attnspec.sweeps", "attnspec.cli", "torch"))]
    assert "attnspec.figures.law" in loaded
