"""The three reference plans every search starts from: unfused, fully fused, and PyTorch's rule (epilogues
always, prologues where the bytes allow)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import networkx as nx

from fusionsearch.errors import PlanError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.plan.build import Decision, build_plan
from fusionsearch.plan.legality import FUSABLE, MAX_FUSED_DEPTH, template_operands
from fusionsearch.plan.plan import Plan


def unfused(g: OpGraph) -> Plan:
    """Every node its own kernel."""
    return build_plan(g, {})


def _fusable_ancestors(g: OpGraph, root: str, owner: str, taken: set[str]) -> list[str]:
    """The operand's producers that can move into the template's load: fusable, not taken, not outputs,
    and consumed only inside the prologue (so nothing else needs them written)."""
    chosen: set[str] = set()
    order = g.topo_order()
    candidates = nx.ancestors(g.nx, root) | {root}
    for n in reversed(order):  # consumers before producers
        if n not in candidates or n in taken or n in g.outputs or g.node(n).kind not in FUSABLE:
            continue
        if all(c in chosen or c == owner for c in g.consumers(n)):
            chosen.add(n)
    return [n for n in order if n in chosen] if root in chosen else []


def _epilogue_candidates(g: OpGraph, mm: str, taken: set[str]) -> list[str]:
    """Pointwise nodes downstream of the matmul on its output tile, grown greedily."""
    out_shape = g.node(mm).shape
    chosen: dict[str, None] = {}  # ordered, with set lookups: linear in the graph
    for n in g.topo_order():
        node = g.node(n)
        if n in taken or node.kind != "pointwise" or node.shape != out_shape:
            continue
        if any(src == mm or src in chosen for src in node.inputs):
            chosen[n] = None
    return list(chosen)


def fused_decisions(g: OpGraph, prologue_ok: Any = None) -> dict[str, Decision]:
    """Greedy decisions: every epilogue fused, then prologues (filtered by `prologue_ok(g, mm, side, nodes)`)."""
    decisions: dict[str, Decision] = {}
    taken: set[str] = set()
    for mm in g.nodes_of_kind("template"):
        candidates = _epilogue_candidates(g, mm, taken)
        left_out = set(candidates)
        depth = {mm: 1}  # chain lengths inside this kernel: past MAX_FUSED_DEPTH a trial plan is not even built
        for n in candidates:
            d = 1 + max((depth[src] for src in g.node(n).inputs if src in depth), default=0)
            # Reading a candidate left out makes a cycle (it reads the matmul, the matmul's kernel reads it).
            if d > MAX_FUSED_DEPTH or any(src in left_out for src in g.node(n).inputs):
                continue
            trial = {**decisions, n: ("epilogue", mm)}
            try:
                build_plan(g, trial)
            except PlanError:
                continue
            decisions, _ = trial, taken.add(n)
            depth[n] = d
            left_out.discard(n)
    for mm in g.nodes_of_kind("template"):
        for side, root in template_operands(g, mm).items():
            if side == "bias":
                continue
            nodes = _fusable_ancestors(g, root, mm, taken)
            if not nodes or (prologue_ok is not None and not prologue_ok(g, mm, side, nodes)):
                continue
            trial = {**decisions, **{n: ("prologue", mm, side) for n in nodes}}
            try:
                build_plan(g, trial)
            except PlanError:
                continue
            decisions = trial
            taken |= set(nodes)
    return decisions


def fully_fused(g: OpGraph) -> Plan:
    """Every legal epilogue and prologue fused."""
    return build_plan(g, fused_decisions(g))


def prologue_bytes_ok(g: OpGraph, mm: str, side: str, nodes: Sequence[str], factor: float = 1.1) -> bool:
    """The prologue-fusion rule: fuse only where the template reads at most `factor` times the bytes of the
    unfused operand; gathers excepted (they read only the rows they need)."""
    if any(g.node(n).kind == "indexing" for n in nodes):
        return True
    inside = set(nodes)
    leaves = {src for n in nodes for src in g.node(n).inputs if src not in inside}
    read = sum(g.node(src).nbytes for src in leaves)
    operand = template_operands(g, mm)[side]
    return read <= factor * g.node(operand).nbytes


def heuristic(g: OpGraph) -> Plan:
    """Every epilogue fused; prologues where the bytes rule allows."""
    return build_plan(g, fused_decisions(g, prologue_bytes_ok))
