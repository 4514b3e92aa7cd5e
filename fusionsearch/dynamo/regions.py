"""Cutting a captured graph into regions the search tunes one at a time.

A whole model is one Dynamo graph; searched whole, its space is the product of every layer's choices. Cut
into regions, each matmul with the pointwise work it may fuse (what it produces up to the next matmul, the
epilogue side; what only it consumes, the prologue side), the search stays small, and the repeated layers of a
model become identical regions: the same graph up to names, renamed canonically (inputs i0.., nodes r0.. in
program order), so one search and one cached plan serve them all. What no matmul claims (extern ops, pointwise
work between inputs and several consumers, reductions) becomes glue: connected glue is merged into as few
regions as keep the regions' order acyclic, so that a norm or a residual chain runs as one fused kernel and
one call, not one per op."""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from fusionsearch.graph.opgraph import OpGraph

__all__ = ["Region", "partition"]

FUSIBLE = ("pointwise", "layout", "indexing")


@dataclass(frozen=True)
class Region:
    """A sub-graph with canonical names; `inputs` and `outputs` name the parent graph's values that feed its
    inputs and that its outputs become, in order."""

    graph: OpGraph
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @property
    def tuned(self) -> bool:
        """Holds a matmul (searched); otherwise glue (run as it stands)."""
        return bool(self.graph.nodes_of_kind("template"))


def partition(g: OpGraph) -> list[Region]:
    """The regions of `g` in an order that runs each after the regions it reads from."""
    order = [n for n in g.topo_order() if g.node(n).op != "input"]
    owner = _assign(g, order)
    while True:  # a region that both feeds and reads another: what closes the loop becomes glue until none does
        graph = _region_graph(g, order, owner)
        cyclic = [c for c in nx.strongly_connected_components(graph) if len(c) > 1]
        if not cyclic:
            break
        for component in cyclic:
            for key in component:
                _unfuse_loop(g, order, owner, key, component)
    _merge_glue(g, order, owner)
    graph = _region_graph(g, order, owner)
    members: dict[str, list[str]] = {}
    for n in order:
        members.setdefault(owner[n], []).append(n)
    return [_region(g, members[key]) for key in nx.lexicographical_topological_sort(
        graph, key=lambda k: order.index(members[k][0]))]


def _assign(g: OpGraph, order: list[str]) -> dict[str, str]:
    """Region key of every node: its template's name for fused members, its own name for glue."""
    templates = set(g.nodes_of_kind("template"))
    owner = {t: t for t in templates}
    position = {n: i for i, n in enumerate(order)}
    for n in order:  # epilogue side: the latest matmul region it reads from
        if n not in owner and g.node(n).kind in FUSIBLE:
            ups = {owner[s] for s in g.node(n).inputs if owner.get(s) in templates}
            if ups:
                owner[n] = max(ups, key=position.__getitem__)
    for n in reversed(order):  # prologue side: every consumer in one matmul region
        if n not in owner and g.node(n).kind in FUSIBLE:
            regions = {owner.get(c) for c in g.consumers(n)}
            if len(regions) == 1 and (only := regions.pop()) in templates:
                owner[n] = only
    for n in order:
        owner.setdefault(n, n)
    return owner


def _unfuse_loop(g: OpGraph, order: list[str], owner: dict[str, str], key: str, component: set[str]) -> None:
    """Turn into glue the members of region `key` that read (directly or through other members) a value of a
    region in the same cycle: an RMSNorm whose mean is an extern, say, whose pointwise tail the matmul's
    epilogue took while the mean, glue, reads the epilogue's square. The matmul keeps its prologue (the int8
    weight's cast) and the epilogue that comes before the loop. Where the matmul itself reads the loop, every
    fused member becomes glue."""
    if g.node(key).kind != "template":
        return
    members = [n for n in order if owner[n] == key]
    tainted: set[str] = set()
    for n in members:
        if any(s in owner and (owner[s] in component and owner[s] != key or s in tainted) for s in g.node(n).inputs):
            tainted.add(n)
    if key in tainted:
        tainted = {n for n in members if n != key}
    for n in tainted:
        owner[n] = n


def _merge_glue(g: OpGraph, order: list[str], owner: dict[str, str]) -> None:
    """Join each glue node to the glue region of one of its producers, the latest first, wherever the
    regions still run in one order (no region both feeds and reads another)."""
    templates = set(g.nodes_of_kind("template"))
    position = {n: i for i, n in enumerate(order)}
    for n in order:
        if owner[n] in templates:
            continue
        producers = sorted({owner[s] for s in g.node(n).inputs if s in owner and owner[s] not in templates
                            and owner[s] != owner[n]}, key=position.__getitem__, reverse=True)
        for key in producers:
            moved = [m for m in order if owner[m] == owner[n]]
            before = owner[n]
            for m in moved:
                owner[m] = key
            if nx.is_directed_acyclic_graph(_region_graph(g, order, owner)):
                break
            for m in moved:
                owner[m] = before


def _region_graph(g: OpGraph, order: list[str], owner: dict[str, str]) -> nx.DiGraph:
    graph = nx.DiGraph()
    graph.add_nodes_from(set(owner.values()))
    for n in order:
        for s in g.node(n).inputs:
            if s in owner and owner[s] != owner[n]:
                graph.add_edge(owner[s], owner[n])
    return graph


def _region(g: OpGraph, members: list[str]) -> Region:
    inside = set(members)
    sub, names, inputs = OpGraph(), {}, []
    for n in members:
        node = g.node(n)
        for s in node.inputs:
            if s not in inside and s not in names:
                src = g.node(s)
                strides = src.strides if src.op == "input" else None  # computed values arrive dense
                names[s] = sub.input(f"i{len(inputs)}", src.shape, src.dtype, strides)
                inputs.append(s)
        names[n] = sub.add(node.op, [names[s] for s in node.inputs], name=f"r{len(names) - len(inputs)}",
                           **node.attrs)
    graph_outputs = set(g.outputs)
    outputs = [n for n in members if n in graph_outputs or any(c not in inside for c in g.consumers(n))]
    sub.set_outputs([names[o] for o in outputs])
    return Region(sub, tuple(inputs), tuple(outputs))
