"""The JSON graph spec: load_graph / save_graph, exact round trip, errors that name the field and node."""

from __future__ import annotations

import json
from typing import Any

from fusionsearch.errors import GraphError, SpecError
from fusionsearch.graph.opgraph import SPEC_VERSION, OpGraph, empty_reason
from fusionsearch.graph.registry import MAX_JSON_DEPTH, json_problem, printable, show


def parse_json(data: str | bytes, source: str) -> Any:
    """JSON text (or UTF-8 bytes) as Python values; a SpecError for text that is not UTF-8, not JSON, nested deeper
    than MAX_JSON_DEPTH or holding a number Python will not convert (over 4,300 digits). Shared with plan files."""
    if isinstance(data, bytes | bytearray):
        try:
            data = bytes(data).decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise SpecError(f"{source}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})") from None
    if not isinstance(data, str):
        raise SpecError(f"{source}: expected JSON text, got {type(data).__name__}")
    try:
        value = json.loads(data)
    except json.JSONDecodeError as e:
        raise SpecError(f"{source}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise SpecError(f"{source}: JSON nested too deeply (at most {MAX_JSON_DEPTH} levels)") from None
    except ValueError as e:  # an integer literal past Python's int/str conversion limit
        raise SpecError(f"{source}: not valid JSON ({printable(str(e).split(':')[0])})") from None
    problem = json_problem(value)
    if problem:
        raise SpecError(f"{source}: {problem}")
    return value


def _field(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in obj:
        raise SpecError(f"{where}: missing field {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise SpecError(f"{where}: field {key!r} must be a {names}, got {show(value)}")
    return value


def graph_from_dict(spec: object, source: str = "spec") -> OpGraph:
    """Build and validate an OpGraph from a spec dict; a SpecError or GraphError names what to fix."""
    source = printable(source)
    if not isinstance(spec, dict):
        raise SpecError(f"{source}: the top level must be an object with 'inputs', 'nodes' and 'outputs'")
    problem = json_problem(spec)  # before anything walks it: depth, int64, UTF-8
    if problem:
        raise SpecError(f"{source}: {problem}")
    version = spec.get("version", SPEC_VERSION)
    if type(version) is not int or version != SPEC_VERSION:  # true == 1 in Python, not in a spec
        raise SpecError(f"{source}: spec version {show(version)} is not supported (expected {SPEC_VERSION})")
    unknown = set(spec) - {"version", "inputs", "nodes", "outputs"}
    if unknown:
        raise SpecError(f"{source}: unknown top-level field(s) {show(sorted(unknown))}")
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
        unknown = set(entry) - {"name", "shape", "dtype", "strides"}
        if unknown:
            raise SpecError(f"{where}: unknown field(s) {show(sorted(unknown))}")
        try:
            g.input(name, shape, dtype, strides)
        except GraphError as e:
            raise GraphError(f"{source}: {e}") from None
        if empty_reason(g.node(name)):  # here rather than at the end: the message names the first one
            raise GraphError(f"{source}: input {empty_reason(g.node(name))}")
    nodes = _field(spec, "nodes", list, source)
    for i, entry in enumerate(_in_dependency_order(nodes, set(g.nx.nodes), source)):
        where = f"{source}: nodes[{i}]"
        if not isinstance(entry, dict):
            raise SpecError(f"{where}: must be an object")
        name = _field(entry, "name", str, where)
        where = f"{source}: node {name!r}"
        unknown = set(entry) - {"name", "op", "inputs", "attrs"}
        if unknown:
            raise SpecError(f"{where}: unknown field(s) {show(sorted(unknown))}")
        op = _field(entry, "op", str, where)
        inputs = _field(entry, "inputs", list, where)
        attrs = entry.get("attrs", {})
        if not isinstance(attrs, dict):
            raise SpecError(f"{where}: field 'attrs' must be an object")
        try:
            g.add_op(op, inputs, attrs, name=name)
        except GraphError as e:
            raise GraphError(f"{source}: {e}") from None
        if empty_reason(g.node(name)):
            raise GraphError(f"{source}: node {empty_reason(g.node(name))}")
    outputs = _field(spec, "outputs", list, source)
    try:
        g.set_outputs(outputs)
    except GraphError as e:
        raise SpecError(f"{source}: {e}") from None
    return g.validate()


def _in_dependency_order(nodes: list[Any], defined: set[str], source: str) -> list[Any]:
    """The nodes sorted so each follows its inputs; cycles and dangling inputs refused with a sentence. Iterative
    and linear: a chain of thousands of nodes, listed in any order, loads like a short one."""
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
    _refuse_cycles(deps, source)
    # Nodes may be listed in any order. They are added in passes over the list, each pass taking, in list order,
    # every node whose inputs are already added: a node's pass is its latest input's, one more where that input
    # comes later in the list. Computed in dependency order, then sorted by (pass, position).
    position = {e["name"]: i for i, e in enumerate(nodes) if isinstance(e, dict) and isinstance(e.get("name"), str)}
    passes = {n: 1 for n in names if n not in deps}  # entries whose 'inputs' is malformed: refused when built
    for n in _dependency_order(deps):
        passes[n] = max([1] + [passes[s] + (position[s] > position[n]) for s in deps[n] if s in passes])
    keyed = [(passes.get(e["name"], 1) if isinstance(e, dict) and isinstance(e.get("name"), str) else 1, i)
             for i, e in enumerate(nodes)]
    return [nodes[i] for _, i in sorted(keyed)]


def _refuse_cycles(deps: dict[str, list[str]], source: str) -> None:
    """A GraphError naming the first cycle a depth-first walk meets (an explicit stack: no recursion limit)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in deps:
        if root in state:
            continue
        path, stack = [root], [iter(deps[root])]
        state[root] = 1
        while stack:
            src = next(stack[-1], None)
            if src is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(src) == 1:
                cycle = [printable(n) for n in reversed(path[path.index(src):] + [src])]
                if len(cycle) > 8:  # one readable line, however long the cycle
                    cycle = [*cycle[:4], f"... ({len(cycle) - 7} more)", *cycle[-3:]]
                raise GraphError(f"{source}: the graph has a cycle {' -> '.join(cycle)}; "
                                 "a node cannot depend on itself")
            elif src not in state and src in deps:
                state[src] = 1
                path.append(src)
                stack.append(iter(deps[src]))


def _dependency_order(deps: dict[str, list[str]]) -> list[str]:
    """The keys of an acyclic `deps` with every node after the nodes it reads (Kahn's algorithm)."""
    waiting = {n: len({s for s in ins if s in deps}) for n, ins in deps.items()}
    readers: dict[str, list[str]] = {}
    for n, ins in deps.items():
        for s in {s for s in ins if s in deps}:
            readers.setdefault(s, []).append(n)
    ready = [n for n, count in waiting.items() if count == 0]
    order = []
    while ready:
        n = ready.pop()
        order.append(n)
        for r in readers.get(n, ()):
            waiting[r] -= 1
            if waiting[r] == 0:
                ready.append(r)
    return order


def load_graph(path: str) -> OpGraph:
    """Read a JSON graph spec (UTF-8) from `path`."""
    where = printable(str(path))
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise SpecError(f"{where}: no such file") from None
    except (OSError, ValueError, TypeError) as e:  # a directory, no permission, a NUL byte, not a path at all
        raise SpecError(f"{where}: cannot read ({getattr(e, 'strerror', None) or type(e).__name__})") from None
    return graph_from_dict(parse_json(data, where), where)
