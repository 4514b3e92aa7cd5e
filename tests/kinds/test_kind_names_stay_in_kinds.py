"""The built-in kernel kinds are named only inside fusionsearch/kinds/: every other module asks the registry
(a kind's attributes and methods, a kernel value's properties) instead of testing a kernel's `kind` against a
built-in name or importing a built-in kind's module. A new kind is then one folder and one registration.

What counts as naming a kind (read from each module's syntax tree, not its text):
- importing fusionsearch.kinds.<a built-in kind's module> (decode_matmul, grouped_matmul, library, ...);
- comparing an expression's `.kind` with a built-in kernel kind's name (==, !=, in, not in), or looking one up
  with kinds.get("<name>"). "template", "pointwise" and "extern" are graph op kinds too: a comparison whose
  `.kind` is a graph node's (g.node(...).kind, or a name bound to g.node(...)/get_op(...)) is about the
  graph, not a kernel, and is left alone."""

from __future__ import annotations

import ast
from pathlib import Path

from fusionsearch import kinds
from fusionsearch.graph.registry import REGISTRY

PACKAGE = Path(kinds.__file__).resolve().parent.parent
KIND_NAMES = frozenset(kinds.BUILTIN)
GRAPH_KINDS = frozenset(op.kind for op in REGISTRY.values())
KIND_MODULES = frozenset(p.stem for p in (PACKAGE / "kinds").iterdir()
                         if p.stem not in ("__init__", "base", "counting", "triton_source", "__pycache__"))

# Each entry: (path relative to fusionsearch/, line's text stripped) -> why it may stay for now.
ALLOWED: dict[tuple[str, str], str] = {
    ("costmodel/analytic.py", "from fusionsearch.kinds.library import LIBRARY_FIXED_US"):
        "re-exports the library kind's fixed cost for its users (tests/search/test_library.py reads it from "
        "costmodel.analytic); the figure itself lives in the kind",
    ("codegen/runtime.py", 'if k.kind == "extern":'):
        "the runtime builds one callable per extern kernel beside the module's extern specs (kinds/extern.py "
        "lists them); it goes once the runtime reads the module's own specs (codegen/runtime.py is not this "
        "change's file)",
}


def _graph_node_names(tree: ast.AST) -> set[str]:
    """Names bound anywhere in the module to g.node(...) or get_op(...) (graph nodes and op definitions)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and _is_graph_node(node.value, set()):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names | {"node", "opdef"}


def _is_graph_node(expr: ast.AST, names: set[str]) -> bool:
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute | ast.Name):
        called = expr.func.attr if isinstance(expr.func, ast.Attribute) else expr.func.id
        return called in ("node", "get_op")
    return isinstance(expr, ast.Name) and expr.id in names


def _strings(expr: ast.AST) -> set[str]:
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return {expr.value}
    if isinstance(expr, ast.Tuple | ast.List | ast.Set):
        return {e.value for e in expr.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return set()


def kind_names_outside_kinds(root: Path = PACKAGE) -> list[tuple[str, int, str, str]]:
    """(path, line, text, what) of each place outside kinds/ that names a built-in kernel kind."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("kinds/"):
            continue
        text = path.read_text()
        lines = text.splitlines()
        tree = ast.parse(text, rel)
        graph_nodes = _graph_node_names(tree)
        for node in ast.walk(tree):
            what = ""
            if isinstance(node, ast.ImportFrom) and node.module:
                parts = node.module.split(".")
                if parts[:2] == ["fusionsearch", "kinds"] and len(parts) > 2 and parts[2] in KIND_MODULES:
                    what = f"imports kinds.{parts[2]}"
                elif node.module == "fusionsearch.kinds" and {a.name for a in node.names} & KIND_MODULES:
                    what = "imports a built-in kind's module"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    if parts[:2] == ["fusionsearch", "kinds"] and len(parts) > 2 and parts[2] in KIND_MODULES:
                        what = f"imports kinds.{parts[2]}"
            elif isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                for attr in (s for s in sides if isinstance(s, ast.Attribute) and s.attr == "kind"):
                    named = set().union(*(_strings(s) for s in sides)) & KIND_NAMES
                    if named - GRAPH_KINDS or (named and not _is_graph_node(attr.value, graph_nodes)):
                        what = f"compares a kernel's kind with {sorted(named)}"
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name)
                  and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "get"
                  and node.args and (_strings(node.args[0]) & KIND_NAMES)
                  and "kinds" in ast.unparse(node.func)):
                what = f"looks up the kind {sorted(_strings(node.args[0]))}"
            if what:
                line = lines[node.lineno - 1].strip()
                found.append((rel, node.lineno, line, what))
    return found


def test_no_module_outside_kinds_names_a_built_in_kind() -> None:
    found = [f for f in kind_names_outside_kinds() if (f[0], f[2]) not in ALLOWED]
    assert not found, "\n".join(f"fusionsearch/{p}:{n}: {what}: {line}" for p, n, line, what in found)


def test_every_allowed_place_still_exists_and_gives_its_reason() -> None:
    places = {(p, line) for p, _, line, _ in kind_names_outside_kinds()}
    for key, reason in ALLOWED.items():
        assert key in places, f"{key} no longer names a kind: remove it from ALLOWED"
        assert len(reason) > 20, key


def test_the_check_catches_each_form(tmp_path: Path) -> None:
    (tmp_path / "kinds").mkdir()
    (tmp_path / "kinds" / "inside.py").write_text('ok = k.kind == "library"\n')  # kinds/ may name them
    (tmp_path / "m.py").write_text(
        "from fusionsearch.kinds.library import LIBRARY\n"
        "import fusionsearch.kinds.decode_matmul.configs\n"
        "from fusionsearch.kinds import grouped_matmul\n"
        'a = k.kind == "decode"\n'
        'b = kernel.kind in ("template", "pointwise")\n'
        'c = g.node(n).kind == "template"\n'  # a graph node's kind: allowed
        "node = g.node(n)\n"
        'd = node.kind != "extern"\n'  # allowed
        'e = kinds.get("grouped")\n'
        'f = step.kind == "plan"\n')  # not a kernel kind
    found = kind_names_outside_kinds(tmp_path)
    assert [(p, n) for p, n, _, _ in found] == [("m.py", 1), ("m.py", 2), ("m.py", 3), ("m.py", 4), ("m.py", 5),
                                                ("m.py", 9)], found
