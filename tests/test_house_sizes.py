"""House sizes: every module of ``src/attnspec`` has at most 400 lines and every function or method (nested
ones included) at most 80, counted from its ``def`` line to its last line, docstring included."""
import ast
from pathlib import Path

ROOT = Path(__file__).parents[1] / "src" / "attnspec"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80


def _long_functions(source: str, where: str) -> list[str]:
    """``where:name (line N): L lines`` for each function of ``source`` longer than the limit."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            if n > MAX_FUNCTION_LINES:
                out.append(f"{where}:{node.name} (line {node.lineno}): {n} lines")
    return out


def _modules() -> list[Path]:
    paths = sorted(ROOT.rglob("*.py"))
    assert len(paths) > 50, f"expected the package's modules under {ROOT}, found {len(paths)}"
    return paths


def test_no_module_over_400_lines():
    long = [f"{p.relative_to(ROOT.parent)}: {n} lines" for p in _modules()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not long, f"modules over {MAX_MODULE_LINES} lines: " + "; ".join(long)


def test_no_function_over_80_lines():
    long = [f for p in _modules() for f in _long_functions(p.read_text(), str(p.relative_to(ROOT.parent)))]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (docstring included): " + "; ".join(long)


def _function(body_lines: int, indent: str = "") -> str:
    return f"{indent}def f():\n" + "".join(f"{indent}    x{i} = {i}\n" for i in range(body_lines))


def test_the_function_check_can_fail():
    n = MAX_FUNCTION_LINES
    assert _long_functions(_function(n), "m.py") == [f"m.py:f (line 1): {n + 1} lines"]
    assert _long_functions("class A:\n" + _function(n, "    "), "m.py") == [f"m.py:f (line 2): {n + 1} lines"]
    assert _long_functions(_function(n - 1), "m.py") == []
