"""What a study records of its search when created (Optuna study user attrs), and the check that refuses to
resume it for another: its trials' values would not compare with the new search's (another graph, backend,
cost model or GPU), or its parameters would not fit (another candidate space)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from fusionsearch.errors import SpecError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.plan import template_operands
from fusionsearch.search.space import Space
from fusionsearch.version import __version__

# The study user attrs that say what a study searches: a study created by one search refuses another whose
# trials would not be comparable with its own (another graph, backend, cost model or GPU) or whose parameters
# would not fit its trials' (another candidate space: --no-library, another tile grid).
IDENTITY = ("graph", "backend", "cost_model", "hardware", "space")


def study_identity(graph: OpGraph, graph_name: str, space: Space, backend: str, cost_model: str,
                   hw: Any) -> dict[str, str]:
    """What a study records of its search when created (user attrs): the keys of IDENTITY, which must match to
    resume it, and the graph's name and this package's version, which are only read by people."""
    choices = json.dumps(space.parameter_choices(), sort_keys=True)
    return {"graph": graph.signature_hash(), "graph_name": graph_name or graph_summary(graph), "backend": backend,
            "cost_model": cost_model, "hardware": str(getattr(hw, "name", hw)),
            "space": hashlib.sha256(choices.encode()).hexdigest()[:16], "fusionsearch_version": __version__}


def graph_summary(graph: OpGraph, limit: int = 60) -> str:
    """A graph named by its ops in order and its first matmul's shape (e.g. 'mm add gelu 16x64x96 float32')."""
    ops = [graph.node(n).op for n in graph.topo_order() if graph.node(n).op != "input"]
    text = " ".join(dict.fromkeys(ops))
    mms = graph.nodes_of_kind("template")
    if mms:
        node = graph.node(mms[0])
        k = graph.node(template_operands(graph, mms[0])["A"]).shape[-1]
        text += f" {node.shape[-2]}x{k}x{node.shape[-1]}"
    text += f" {str(graph.node(graph.outputs[0]).dtype).removeprefix('torch.')}" if graph.outputs else ""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def check_identity(name: str, where: str, recorded: dict[str, Any], identity: dict[str, str]) -> None:
    """Refuse to resume a study recorded for another search (SpecError naming both); a study that recorded
    nothing (made before studies recorded what they search) is resumed as it is. The cost model matters where
    it gives the trials' values (model and interpret backends); on the gpu backend it only orders and prunes."""
    on = f" on {where}" if where else ""
    if "graph" in recorded and recorded["graph"] != identity["graph"]:
        raise SpecError(f"study {name!r}{on} searched another graph, {recorded.get('graph_name', '?')} "
                        f"(hash {recorded['graph']}); this search's is {identity['graph_name']} (hash "
                        f"{identity['graph']}): pick another study name (--study), or leave it out to get one per "
                        "graph")
    differ = [k for k in IDENTITY[1:] if k in recorded and recorded[k] != identity[k]
              and not (k == "cost_model" and identity["backend"] == "gpu")]
    if differ:
        key = differ[0]
        what = {"backend": f"backend {recorded[key]}, this search's is {identity[key]}",
                "cost_model": f"the {recorded[key]} cost model, this search has the {identity[key]} one (--cost-model)",
                "hardware": f"hardware {recorded[key]}, this search's is {identity[key]}",
                "space": "another candidate space: other tile configs or PyTorch's matmul offered or not "
                         "(--no-library)"}[key]
        raise SpecError(f"study {name!r}{on} was searched with {what}: their trials do not compare; pick another "
                        "study name (--study)")
