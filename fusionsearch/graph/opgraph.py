"""OpGraph: a networkx DiGraph of ops; every node knows its op, attrs, shape, dtype and strides."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import torch

from fusionsearch.errors import GraphError, SpecError
from fusionsearch.graph.capacity import check_fits
from fusionsearch.graph.registry import (
    INT64_MAX,
    Attrs,
    InputInfo,
    OpDef,
    Shape,
    dtype_from_name,
    dtype_name,
    get_op,
    is_utf8,
    json_problem,
    printable,
    show,
)

MAX_RANK = 16  # more dims than any model uses; torch's TensorIterator stops at 25


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides (elements) for `shape`."""
    strides, acc = [], 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= max(size, 1)
    return tuple(reversed(strides))


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_shape(shape: object, dtype: torch.dtype, what: str) -> tuple[int, ...]:
    """`shape` as a tuple of sizes, or a GraphError: every size a non-negative integer, at most MAX_RANK dims, and
    its bytes within int64 (torch's limit), all checked before anything is allocated. Size-0 dims are refused
    where they would matter: at a matmul (`add`) and in a finished graph (`set_outputs`)."""
    if not isinstance(shape, list | tuple) or not all(_is_int(s) and s >= 0 for s in shape):
        raise GraphError(f"{what}: shape must be a list of positive integers, got {show(shape)}")
    if len(shape) > MAX_RANK:
        raise GraphError(f"{what}: shape has {len(shape)} dims; at most {MAX_RANK} are supported")
    if math.prod(shape) * dtype.itemsize > INT64_MAX:
        raise GraphError(f"{what}: shape {show(list(shape))} of {dtype_name(dtype)} holds more bytes than int64 "
                         "counts (torch's limit)")
    return tuple(shape)


def empty_reason(node: Node) -> str | None:
    """A sentence when `node` holds no elements: nothing to tune, and a division by zero in every per-element cost."""
    if 0 not in node.shape:
        return None
    return f"{node.name!r} has shape {list(node.shape)} with a size-0 dim; fusionsearch tunes non-empty tensors only"


def _check_name(name: object, what: str) -> str:
    if not isinstance(name, str) or not name:
        raise GraphError(f"{what} must be a non-empty string, got {show(name)}")
    if not is_utf8(name):
        raise GraphError(f"{what} {show(name)} is not valid Unicode (it holds a lone surrogate); rename it")
    return name


def _frozen_attrs(attrs: Attrs) -> Attrs:
    # Round-trip through JSON: attrs are plain data, tuples become lists, nothing shared with the caller.
    return json.loads(json.dumps(attrs, allow_nan=True))


@dataclass(frozen=True)
class Node:
    """One op of the graph. `inputs` are node names in slot order; strides are in elements."""

    name: str
    op: str
    inputs: tuple[str, ...]
    attrs: Attrs = field(default_factory=dict, compare=True, hash=False)
    shape: Shape = ()
    dtype: torch.dtype = torch.float32
    strides: tuple[int, ...] = ()

    @property
    def kind(self) -> str:
        """The op's kind: input, template, pointwise, layout, indexing or extern."""
        return "input" if self.op == "input" else get_op(self.op).kind

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the node's value when materialised densely."""
        return self.numel * (torch.finfo(self.dtype).bits if self.dtype.is_floating_point
                             else 8 if self.dtype == torch.bool else torch.iinfo(self.dtype).bits) // 8


class OpGraph:
    """An op DAG held as a `networkx.DiGraph`: node attribute 'node' holds the Node, edges carry 'slots'.

    Build it with `input()` and `add()`, mark results with `set_outputs()`; every added node is checked
    (op known, inputs exist, shapes and dtypes agree) and its shape and dtype inferred from the registry.
    """

    def __init__(self) -> None:
        self.nx = nx.DiGraph()
        self.outputs: list[str] = []
        self._counter = 0
        self._topo: list[str] | None = None  # cache, cleared whenever a node is added
        self._position: dict[str, int] = {}
        self._hash: tuple[tuple[int, int, tuple[str, ...]], str] | None = None  # (stamp, signature_hash)

    # ---- building ------------------------------------------------------------------------------
    def _fresh(self, op: str) -> str:
        while True:
            self._counter += 1
            name = f"{op}_{self._counter}"
            if name not in self.nx:
                return name

    def _check_name(self, name: object) -> str:
        name = _check_name(name, "a node name")
        if name in self.nx:
            raise GraphError(f"duplicate node name {name!r}; every node needs its own name")
        return name

    def input(self, name: str, shape: Sequence[int], dtype: torch.dtype | str,
              strides: Sequence[int] | None = None) -> str:
        """Add a graph input; strides (elements) default to row-major."""
        name = self._check_name(name)
        dt = dtype_from_name(dtype, f"input {name!r}")
        shape = check_shape(shape, dt, f"input {name!r}")
        if strides is not None and not isinstance(strides, list | tuple):
            raise GraphError(f"input {name!r}: strides must be a list of integers, got {show(strides)}")
        st = tuple(strides) if strides is not None else contiguous_strides(shape)
        if len(st) != len(shape) or not all(_is_int(s) and 0 <= s <= INT64_MAX for s in st):
            raise GraphError(f"input {name!r}: strides {show(list(st))} do not match shape {list(shape)}")
        span = 1 + sum((size - 1) * stride for size, stride in zip(shape, st, strict=True))
        if span * dt.itemsize > INT64_MAX:
            raise GraphError(f"input {name!r}: strides {list(st)} reach past int64 bytes")
        # Inputs and outputs must exist for any plan to run; an intermediate need not (moe_ffn's gathered expert
        # weights, [T, 2, H, D], are never written by a plan that fuses the gather), so only they are bounded.
        check_fits(math.prod(shape) * dt.itemsize, f"input {name!r}: shape {list(shape)} of {dtype_name(dt)}")
        check_fits(span * dt.itemsize, f"input {name!r}: strides {list(st)} over shape {list(shape)}")
        self.nx.add_node(name, node=Node(name, "input", (), {}, shape, dt, st))
        self._topo, self._hash = None, None
        return name

    def add(self, op: str, inputs: Sequence[str], /, name: str | None = None, **attrs: Any) -> str:
        """Add an op node over existing nodes; returns its name. Shape and dtype follow the registry."""
        return self.add_op(op, inputs, attrs, name)

    def add_op(self, op: str, inputs: Sequence[str], attrs: Attrs, name: str | None = None) -> str:
        """`add` with the attributes as one mapping, so that any key (even 'name', 'op' or 'inputs', which are
        `add`'s own arguments) is an attribute: the spec loader builds nodes this way."""
        label = printable(op) if isinstance(op, str) else show(op)
        where = f"node {show(name)}: " if name is not None else f"{label} node: "
        opdef = get_op(op, where)
        if opdef.kind == "input":
            raise GraphError(f"{where}use OpGraph.input() for graph inputs")
        name = self._check_name(name) if name is not None else self._fresh(op)
        where = f"node {name!r} ({op}): "
        if not isinstance(inputs, list | tuple):
            raise GraphError(f"{where}inputs must be a list of node names")
        lo, hi = opdef.arity
        if not lo <= len(inputs) <= hi:
            raise GraphError(f"{where}takes {lo}{'' if lo == hi else f' to {hi}'} tensor inputs, got {len(inputs)}")
        for src in inputs:
            if not isinstance(src, str) or src not in self.nx:
                raise GraphError(f"{where}input {show(src)} is not a node of the graph (dangling input); add it first")
        if not isinstance(attrs, dict):
            raise GraphError(f"{where}attributes must be a mapping of names to JSON values, got {show(attrs)}")
        problem = json_problem(attrs)
        if problem:
            raise GraphError(f"{where}bad attribute value: {problem}")
        attrs = _frozen_attrs(attrs)
        infos = [InputInfo(s, self.node(s).shape, self.node(s).dtype) for s in inputs]
        try:
            if opdef.attrs_check:
                opdef.attrs_check(attrs)
            shape = tuple(opdef.shape_rule(infos, attrs))
            dtype = opdef.dtype_rule(infos, attrs)
            shape = check_shape(shape, dtype, "result")
            if opdef.kind == "template" and 0 in (*shape, *(d for i in infos for d in i.shape)):
                sizes = ", ".join(f"{printable(i.name)} {list(i.shape)}" for i in infos)
                raise GraphError(f"a matmul over {sizes} has a size-0 dim: nothing to multiply or tune")
        except GraphError as e:
            raise GraphError(f"{where}{e}") from None
        except (KeyError, TypeError, ValueError, IndexError, ArithmeticError, RuntimeError) as e:
            # A rule tripping over attributes it did not expect: the attributes are what to fix.
            reason = printable(str(e).strip().split("\n")[0][:200])
            raise GraphError(f"{where}bad attributes {show(attrs)}: {type(e).__name__}: {reason}") from None
        self.nx.add_node(name, node=Node(name, op, tuple(inputs), attrs, shape, dtype, contiguous_strides(shape)))
        self._topo, self._hash = None, None
        for slot, src in enumerate(inputs):
            if self.nx.has_edge(src, name):
                self.nx.edges[src, name]["slots"] += (slot,)
            else:
                self.nx.add_edge(src, name, slots=(slot,))
        return name

    def set_outputs(self, outputs: Sequence[str]) -> None:
        """Mark the graph's results, in order: the graph is finished, so it must hold no empty tensor."""
        if not isinstance(outputs, list | tuple) or not outputs:
            raise GraphError(f"a graph needs at least one output (a list of node names), got {show(outputs)}")
        for o in outputs:
            if not isinstance(o, str) or o not in self.nx:
                raise GraphError(f"output {show(o)} is not a node of the graph")
            node = self.node(o)
            check_fits(node.nbytes, f"output {o!r}: shape {list(node.shape)} of {dtype_name(node.dtype)}")
        for n in self.nx.nodes:
            problem = empty_reason(self.node(n))
            if problem:
                raise GraphError(problem)
        self.outputs = list(outputs)
        self._hash = None

    # ---- reading -------------------------------------------------------------------------------
    def node(self, name: str) -> Node:
        try:
            return self.nx.nodes[name]["node"]
        except KeyError:
            raise GraphError(f"no node named {name!r} in the graph") from None

    def __contains__(self, name: object) -> bool:
        return name in self.nx

    def __len__(self) -> int:
        return self.nx.number_of_nodes()

    def __iter__(self) -> Iterator[Node]:
        return (self.node(n) for n in self.topo_order())

    def opdef(self, name: str) -> OpDef:
        return get_op(self.node(name).op)

    @property
    def inputs(self) -> list[str]:
        """Graph input names in insertion order."""
        return [n for n in self.nx.nodes if self.node(n).op == "input"]

    def topo_order(self) -> list[str]:
        """Nodes in a deterministic topological order (ties broken by insertion order); computed again when the
        node count changed around the builders (capture removes a node through `nx`)."""
        if self._topo is None or len(self._topo) != self.nx.number_of_nodes():
            order = {n: i for i, n in enumerate(self.nx.nodes)}
            self._topo = list(nx.lexicographical_topological_sort(self.nx, key=lambda n: order[n]))
            self._position = {n: i for i, n in enumerate(self._topo)}
        return list(self._topo)

    def position(self, name: str) -> int:
        """`name`'s index in topo_order(): a node can only reach nodes at larger positions, which bounds the
        walks that legality checks make."""
        if self._topo is None or len(self._topo) != self.nx.number_of_nodes():
            self.topo_order()
        return self._position[name]

    def descendants_until(self, name: str, last: int) -> set[str]:
        """The descendants of `name` at positions up to `last` (all that can lie on a path to a node there)."""
        seen: set[str] = set()
        frontier = [name]
        while frontier:
            for m in self.nx.successors(frontier.pop()):
                if m not in seen and self.position(m) <= last:
                    seen.add(m)
                    frontier.append(m)
        return seen

    def consumers(self, name: str) -> list[str]:
        return list(self.nx.successors(name))

    def nodes_of_kind(self, kind: str) -> list[str]:
        return [n for n in self.topo_order() if self.node(n).kind == kind]

    def validate(self) -> OpGraph:
        """Check the whole graph: acyclic, outputs set, every node's shape/dtype still what its rule says."""
        if not nx.is_directed_acyclic_graph(self.nx):
            cycle = nx.find_cycle(self.nx)
            raise GraphError(f"the graph has a cycle through {' -> '.join(printable(u) for u, _ in cycle)}; "
                             "remove one edge")
        if not self.outputs:
            raise GraphError("the graph has no outputs; list them under 'outputs'")
        return self

    # ---- comparing and saving ------------------------------------------------------------------
    def signature(self) -> str:
        """A name-independent description (ops, attrs, shapes, dtypes, edges), equal for isomorphic builds."""
        # Inputs first, then the ops in topological order: the order of the JSON spec, so a graph and its
        # round trip through a spec have one signature whatever order the inputs were added in.
        order = self.inputs + [n for n in self.topo_order() if self.node(n).op != "input"]
        index = {n: i for i, n in enumerate(order)}
        rows = []
        for n in order:
            node = self.node(n)
            rows.append([node.op, [index[i] for i in node.inputs], node.attrs, list(node.shape), dtype_name(node.dtype),
                         list(node.strides) if node.op == "input" else None])
        return json.dumps({"nodes": rows, "outputs": [index[o] for o in self.outputs]}, sort_keys=True)

    def signature_hash(self) -> str:
        """A short content hash of `signature()`: plans and caches are keyed by it. Computed once per graph
        (every Plan.to_json and from_json asks for it; the signature walks the whole graph): the builders clear
        it, and a stamp of node and edge counts and outputs catches a change made around them (capture removes
        a node through `nx`; `outputs` is a plain list). Nodes are frozen and their attrs copied in."""
        import hashlib

        stamp = (self.nx.number_of_nodes(), self.nx.number_of_edges(), tuple(self.outputs))
        cached = getattr(self, "_hash", None)  # a graph unpickled from before the cache has none
        if cached is None or cached[0] != stamp:
            cached = self._hash = (stamp, hashlib.sha256(self.signature().encode()).hexdigest()[:16])
        return cached[1]

    def same_structure(self, other: OpGraph) -> bool:
        """True when the graphs are isomorphic: same ops, attrs, shapes, dtypes and input slots (names aside)."""
        if len(self) != len(other) or len(self.outputs) != len(other.outputs):
            return False
        if self.signature() == other.signature():  # the common case, linear; isomorphism search is not
            return True

        def key(g: OpGraph, n: str) -> tuple[Any, ...]:
            node = g.node(n)
            out = g.outputs.index(n) if n in g.outputs else -1
            return (node.op, json.dumps(node.attrs, sort_keys=True), node.shape, node.dtype, out)

        a, b = self.nx.copy(), other.nx.copy()
        for g, h in ((self, a), (other, b)):
            for n in h.nodes:
                h.nodes[n]["key"] = key(g, n)
        return nx.is_isomorphic(a, b, node_match=lambda x, y: x["key"] == y["key"],
                                edge_match=lambda x, y: x["slots"] == y["slots"])

    def to_dict(self) -> dict[str, Any]:
        """The JSON spec form (see README 'Graph spec')."""
        return graph_to_dict(self)

    def save(self, path: str) -> None:
        """Write the graph as a JSON spec; `load_graph(path)` reads it back exactly."""
        save_graph(self, path)

    def __repr__(self) -> str:
        return f"OpGraph({len(self)} nodes, outputs={self.outputs})"

    def describe(self) -> str:
        """One line per node: name = op(inputs) shape dtype."""
        lines = []
        for node in self:
            args = ", ".join(node.inputs)
            lines.append(f"{node.name} = {node.op}({args}) {list(node.shape)} {dtype_name(node.dtype)}")
        return "\n".join(lines)


# The JSON spec's version: written here, read by graph/spec.py.
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
    """Write the spec of `g` to `path` (UTF-8 JSON); a SpecError says why it cannot be written."""
    text = json.dumps(graph_to_dict(g), indent=1) + "\n"
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except (OSError, ValueError, TypeError) as e:
        reason = getattr(e, "strerror", None) or type(e).__name__
        raise SpecError(f"{printable(str(path))}: cannot write the graph spec ({reason})") from None
