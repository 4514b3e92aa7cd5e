"""Which family of code a graph is, so that held-out figures are reported per family: a model that ranks the
mixed random graphs well can still rank decode GEMVs or expert layers badly, and the mean over all hides it.

Measured rows carry no family of their own before the collector records one (`family`), so the family is read
from the graph itself, by the first rule that holds:
- "experts": a matmul fed by a gather of whole matrices (expert weights picked by index: a table of rank >= 3);
- "attention": a batched matmul whose result reaches another batched matmul (the score chain q@k -> p@v);
- "decode": every matmul has at most DECODE_ROWS rows (M);
- "mixed": everything else."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from fusionsearch.errors import FusionSearchError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.spec import graph_from_dict

__all__ = ["DECODE_ROWS", "FAMILIES", "graph_family", "row_family"]

FAMILIES = ("experts", "attention", "decode", "mixed")
DECODE_ROWS = 16  # the most rows (M) a decode step's matmul has: one token per sequence, up to 16 sequences


def graph_family(g: OpGraph) -> str:
    """The family of `g` (one of FAMILIES), by the rules in this module's docstring.

    >>> import fusionsearch as fs
    >>> graph_family(fs.workload("moe_ffn")), graph_family(fs.workload("w8_dequant_mm", M=16))
    ('experts', 'decode')
    """
    matmuls = g.nodes_of_kind("template")
    if any(_gathers_matrices(g, mm) for mm in matmuls):
        return "experts"
    bmms = [mm for mm in matmuls if g.node(mm).op == "bmm"]
    if any(_reaches(g, a, set(bmms) - {a}) for a in bmms):
        return "attention"
    if matmuls and max(_rows(g, mm) for mm in matmuls) <= DECODE_ROWS:
        return "decode"
    return "mixed"


def row_family(row: Mapping[str, Any], cache: dict[str, str] | None = None) -> str:
    """A measured row's family: its own `family` key when the collector recorded one, else graph_family of the
    graph spec it carries ("mixed" when it carries none that reads); `cache` keeps one answer per graph id."""
    own = row.get("family")
    if isinstance(own, str) and own:
        return own
    gid = str(row.get("graph_id"))
    if cache is not None and gid in cache:
        return cache[gid]
    try:
        family = graph_family(graph_from_dict(row["graph"])) if isinstance(row.get("graph"), dict) else "mixed"
    except (FusionSearchError, ValueError):
        family = "mixed"
    if cache is not None:
        cache[gid] = family
    return family


def _rows(g: OpGraph, mm: str) -> int:
    """M of matmul `mm`: its output's rows per batch for bmm, every leading dim together for mm/addmm/linear."""
    shape = g.node(mm).shape
    return shape[-2] if g.node(mm).op == "bmm" else math.prod(shape[:-1])


def _ancestors(g: OpGraph, name: str) -> set[str]:
    seen, todo = set(), list(g.node(name).inputs)
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(g.node(n).inputs)
    return seen


def _gathers_matrices(g: OpGraph, mm: str) -> bool:
    """Whether an operand of matmul `mm` comes from a row gather of a table of matrices (rank >= 3)."""
    for n in _ancestors(g, mm):
        node = g.node(n)
        if node.kind == "indexing" and node.inputs and len(g.node(node.inputs[0]).shape) >= 3:
            return True
    return False


def _reaches(g: OpGraph, start: str, targets: set[str]) -> bool:
    """Whether a value computed from `start` is an operand of one of `targets`."""
    return any(start in _ancestors(g, t) for t in targets)
