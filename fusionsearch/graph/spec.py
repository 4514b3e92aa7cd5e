"""The JSON graph spec: load_graph / save_graph, exact round trip, errors that name the field and node."""

from __future__ import annotations

import copy
import json
from typing import Any

from fusionsearch.errors import GraphError, SpecError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.registry import dtype_name

SPEC_VERSION = 1


def graph_to_dict(g: OpGraph) -> dict[str, Any]:
    """The spec of `g`: inputs (name, shape, dtype, strides), nodes in topological order, outputs."""
    inputs, nodes = [], []
    for node in [g.node(n) for n in g.inputs] + [n for n in g if n.op != "input"]:
        if node.op == "input":
            inputs.append({"name": node.name, "shape": list(node.shape), "dtype": dtype_name(node.dtype),
                           "strides": list(node.strides)})
        else:
            entry: dict[str, Any] = {"name": node.name, "op": node.op, "inputs": list(node.inputs)}
            if node.attrs:
                entry["attrs"] = copy.deepcopy(node.attrs)  # a spec is edited freely (shrink does) without touching g
            nodes.append(entry)
    return {"version": SPEC_VERSION, "inputs": inputs, "nodes": nodes, "outputs": list(g.outputs)}


def save_graph(g: OpGraph, path: str) -> None:
    with open(path, "w") as f:
        json.dump(graph_to_dict(g), f, indent=1)
        f.write("\n")


def _field(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in obj:
        raise SpecError(f"{where}: missing field {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise SpecError(f"{where}: field {key!r} must be a {names}, got {value!r}")
    return value


def graph_from_dict(spec: object, source: str = "spec") -> OpGraph:
    """Build and validate an OpGraph from a spec dict; a SpecError or GraphError names what to fix."""
    if not isinstance(spec, dict):
        raise SpecError(f"{source}: the top level must be an object with 'inputs', 'nodes' and 'outputs'")
    version = spec.get("version", SPEC_VERSION)
    if version != SPEC_VERSION:
        raise SpecError(f"{source}: spec version {version!r} is not supported (expected {SPEC_VERSION})")
    unknown = set(spec) - {"version", "inputs", "nodes", "outputs"}
    if unknown:
        raise SpecError(f"{source}: unknown top-level field(s) {sorted(unknown)}")
    g = OpGraph()
    for i, entry in enumerate(_field(spec, "inputs", list, source)):
        where = f"{source}: inputs[{i}]"
        if not isinstance(entry, dict):
            raise SpecError(f"{where}: must be an object")
        name = _field(entry, "name", str, where)
        where = f"{source}: input {name!r}"
        shape = _field(entry, "shape", list, where)
        dtype = _field(entry, "dtype", str, where)
        strides = entry.get("strides")
        if strides is not None and not isinstance(strides, list):
            raise SpecError(f"{where}: field 'strides' must be a list")
        g.input(name, shape, dtype, strides)
    nodes = _field(spec, "nodes", list, source)
    for i, entry in enumerate(_in_dependency_order(nodes, set(g.nx.nodes), source)):
        where = f"{source}: nodes[{i}]"
        if not isinstance(entry, dict):
            raise SpecError(f"{where}: must be an object")
        name = _field(entry, "name", str, where)
        where = f"{source}: node {name!r}"
        unknown = set(entry) - {"name", "op", "inputs", "attrs"}
        if unknown:
            raise SpecError(f"{where}: unknown field(s) {sorted(unknown)}")
        op = _field(entry, "op", str, where)
        inputs = _field(entry, "inputs", list, where)
        attrs = entry.get("attrs", {})
        if not isinstance(attrs, dict):
            raise SpecError(f"{where}: field 'attrs' must be an object")
        try:
            g.add(op, inputs, name=name, **attrs)
        except GraphError as e:
            raise GraphError(f"{source}: {e}") from None
    outputs = _field(spec, "outputs", list, source)
    try:
        g.set_outputs(outputs)
    except GraphError as e:
        raise SpecError(f"{source}: {e}") from None
    return g.validate()


def _in_dependency_order(nodes: list[Any], defined: set[str], source: str) -> list[Any]:
    """The nodes sorted so each follows its inputs; cycles and dangling inputs refused with a sentence."""
    # Only well-formed entries take part in the sort; the others fail with a SpecError when they are built.
    named = [e for e in nodes if isinstance(e, dict) and isinstance(e.get("name"), str)]
    names: set[str] = set()
    for e in named:
        if e["name"] in names or e["name"] in defined:
            raise GraphError(f"{source}: duplicate node name {e['name']!r}; every node needs its own name")
        names.add(e["name"])
    deps = {e["name"]: [i for i in e.get("inputs", []) if isinstance(i, str)]
            for e in named if isinstance(e.get("inputs", []), list)}
    for name, ins in deps.items():
        for src in ins:
            if src not in names and src not in defined:
                raise GraphError(f"{source}: node {name!r} reads {src!r}, which is neither an input nor a node "
                                 "(dangling input)")
    # Depth-first search for a cycle among the nodes.
    state: dict[str, int] = {}

    def visit(n: str, path: list[str]) -> None:
        state[n] = 1
        for src in deps.get(n, []):
            if state.get(src) == 1:
                cycle = path[path.index(src):] + [src] if src in path else [src, n]
                raise GraphError(f"{source}: the graph has a cycle {' -> '.join(reversed(cycle))}; "
                                 "a node cannot depend on itself")
            if state.get(src) is None and src in deps:
                visit(src, path + [src])
        state[n] = 2

    for n in deps:
        if state.get(n) is None:
            visit(n, [n])
    # Nodes may be listed in any order: sort them so each is added after its inputs.
    done: set[str] = set(defined)
    sorted_nodes: list[Any] = []
    pending = list(nodes)
    while pending:
        rest = []
        for e in pending:
            name = e.get("name") if isinstance(e, dict) else None
            if not isinstance(name, str) or all(s in done for s in deps.get(name, [])):
                sorted_nodes.append(e)
                if isinstance(name, str):
                    done.add(name)
            else:
                rest.append(e)
        if len(rest) == len(pending):
            break
        pending = rest
    return sorted_nodes + pending


def load_graph(path: str) -> OpGraph:
    """Read a JSON graph spec from `path`."""
    try:
        with open(path) as f:
            spec = json.load(f)
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file") from None
    except json.JSONDecodeError as e:
        raise SpecError(f"{path}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    return graph_from_dict(spec, path)
