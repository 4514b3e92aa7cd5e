"""The package's layers (docs/design.md): every import, at the top of a module or inside a function, goes to the
same package or one below; two sibling packages of a layer never import each other; and no import placed inside
a function hides a circle (its target importing, at module level, back the module it sits in)."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "fusionsearch"

# Lowest first. Packages of one layer are siblings: neither imports the other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "settings", "hardware", "version"),
    ("graph",),
    ("datasets",),
    ("plan",),
    ("kinds",),
    ("codegen", "costmodel"),
    ("measure",),
    ("search",),
    ("dynamo",),
    ("__init__",),
    ("cli",),
    ("__main__",),
)
LEVEL = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _unit(module: str) -> str:
    """The layer unit of a module: its subpackage or top-level module under fusionsearch."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _target(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports() -> list[tuple[str, str, str, int]]:
    """(importing module, imported fusionsearch module, where: 'top' | 'function' | 'typing', line)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        tree = ast.parse(path.read_text())
        where: dict[int, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Import | ast.ImportFrom):
                        where[id(inner)] = "function"
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Import | ast.ImportFrom):
                        where.setdefault(id(inner), "typing")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = _target(node, module, path.name == "__init__.py")
                # `from fusionsearch.x import y` may name a submodule y: count the deeper module where it is one
                targets = [f"{base}.{a.name}" if (PACKAGE.parent / f"{base}.{a.name}".replace(".", "/")).exists()
                           or (PACKAGE.parent / (f"{base}.{a.name}".replace(".", "/") + ".py")).exists() else base
                           for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for t in dict.fromkeys(targets):
                if t == "fusionsearch" or t.startswith("fusionsearch."):
                    found.append((module, t, where.get(id(node), "top"), node.lineno))
    return found


def test_every_package_module_has_a_layer() -> None:
    units = {_unit(_module_name(p)) for p in PACKAGE.rglob("*.py")}
    assert units - set(LEVEL) == set(), "add the new package to LAYERS (and to docs/design.md's picture)"


Import = tuple[str, str, str, int]


def layer_violations(imports: list[Import]) -> list[str]:
    wrong = []
    for module, target, where, line in imports:
        src, dst = _unit(module), _unit(target)
        if src == dst or dst not in LEVEL or src not in LEVEL:
            continue
        if LEVEL[dst] >= LEVEL[src]:
            wrong.append(f"{module}:{line} imports {target} ({where}): {src} may not import {dst}")
    return wrong


def hidden_circles(imports: list[Import]) -> list[str]:
    top = nx.DiGraph()
    top.add_edges_from((m, t) for m, t, where, _ in imports if where == "top")
    return [f"{m}:{line} imports {t} inside a function, and {t} imports {m} back"
            for m, t, where, line in imports
            if where == "function" and t in top and m in top and nx.has_path(top, t, m)]


def test_imports_only_go_down_and_siblings_never_import_each_other() -> None:
    wrong = layer_violations(_imports())
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_no_import_inside_a_function_hides_a_circle() -> None:
    hidden = hidden_circles(_imports())
    assert not hidden, "\n".join(hidden)


def test_the_checks_see_an_upward_import_a_sibling_import_and_a_hidden_circle() -> None:
    """The checks themselves can fail, on made-up imports."""
    assert layer_violations([("fusionsearch.plan.plan", "fusionsearch.search.study", "function", 1)])
    assert layer_violations([("fusionsearch.codegen.module", "fusionsearch.costmodel.features", "top", 1)])
    assert not layer_violations([("fusionsearch.search.study", "fusionsearch.plan.plan", "top", 1)])
    a, b = "fusionsearch.search.x", "fusionsearch.search.y"
    assert hidden_circles([(a, b, "top", 1), (b, a, "function", 2)])
    assert not hidden_circles([(a, b, "top", 1), (a, b, "function", 2)])
