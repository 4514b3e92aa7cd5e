"""The plan: an ordered list of kernels covering a graph, the code generator's options, and its JSON form
(which replays exactly: generated source is a pure function of graph and plan)."""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from fusionsearch.errors import PlanError, SpecError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.registry import json_problem, show
from fusionsearch.graph.spec import parse_json
from fusionsearch.plan.kernels import Kernel, kernel_from_dict, produced
from fusionsearch.plan.legality import check_plan
from fusionsearch.plan.options import CodegenOptions
from fusionsearch.plan.tile import MAX_SHARED_MEMORY_BYTES, TileConfig

PLAN_VERSION = 1


@dataclass(frozen=True)
class Plan:
    """An ordered list of kernels covering every node of `graph`; `recompute` names nodes that the plan
    deliberately computes in more than one kernel; `options` says how the code generator writes the kernels."""

    graph: OpGraph = field(compare=False, repr=False)
    kernels: tuple[Kernel, ...]
    recompute: frozenset[str] = frozenset()
    options: CodegenOptions = CodegenOptions()

    # ---- derived facts the code generator and cost model share ---------------------------------
    def stored(self) -> list[set[str]]:
        """Per kernel, the nodes it writes to memory: graph outputs and values read by another kernel."""
        return [set(s) for s in self._stored]

    def stored_by(self, index: int) -> set[str]:
        """stored()[index] without copying every kernel's set: the cost model asks once per kernel, and a copy
        of the whole list each time made pricing a plan quadratic in its kernels (a 1,000-op chain: minutes)."""
        return set(self._stored[index])

    @functools.cached_property
    def _stored(self) -> tuple[frozenset[str], ...]:
        """stored(), computed once per plan (a Plan is frozen, its graph fixed while it exists)."""
        g = self.graph
        computed_in = [set(k.nodes) for k in self.kernels]
        first_producer: dict[str, int] = {}
        for i, k in enumerate(self.kernels):
            for n in produced(k):
                first_producer.setdefault(n, i)
        computing: dict[str, list[int]] = {}  # node -> the kernels that compute it (recomputed nodes: several)
        for j, nodes in enumerate(computed_in):
            for n in nodes:
                computing.setdefault(n, []).append(j)
        outputs = set(g.outputs)
        out: list[set[str]] = [set() for _ in self.kernels]
        for n, i in first_producer.items():
            if n in outputs or any(j != i and n not in computed_in[j]
                                   for c in g.consumers(n) for j in computing.get(c, ())):
                out[i].add(n)
        return tuple(frozenset(o) for o in out)

    def with_config(self, cfg: TileConfig) -> Plan:
        """The same plan with every matmul template on tile config `cfg` (benchmarks sweeping configs)."""
        kernels = tuple(replace(k, config=cfg) if getattr(k, "has_tile_config", False) else k for k in self.kernels)
        return replace(self, kernels=kernels)

    def with_options(self, **overrides: Any) -> Plan:
        """The same plan generated with some codegen options replaced (CodegenOptions' names)."""
        return replace(self, options=self.options.with_overrides(**overrides)) if overrides else self

    def check(self, shared_memory_bytes: int | None = None) -> Plan:
        """Raise PlanError unless the plan is legal for its graph, and, given `shared_memory_bytes` (per CTA),
        every tile's pipeline fits it; returns self. Plans built in process are not held to a GPU here (the
        search filters tiles by its GPU's figure; a plan file read by from_json/from_dict is checked against
        MAX_SHARED_MEMORY_BYTES unless told otherwise)."""
        check_plan(self, shared_memory_bytes)
        return self

    # ---- JSON ----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        kernels = []
        for k in self.kernels:
            d = asdict(k)
            for key, v in d.items():
                if isinstance(v, tuple):
                    d[key] = list(v)
            kernels.append(d)
        out = {"version": PLAN_VERSION, "graph": self.graph.signature_hash(), "kernels": kernels,
               "recompute": sorted(self.recompute)}
        if self.options != CodegenOptions():  # default plans keep the JSON (and the ids hashed from it) they had
            out["options"] = self.options.to_dict()
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @staticmethod
    def from_json(text: str | bytes, graph: OpGraph, shared_memory_bytes: int | None = MAX_SHARED_MEMORY_BYTES
                  ) -> Plan:
        """Read a plan saved by `to_json` for `graph` (text, or UTF-8 bytes); a SpecError or PlanError says what
        does not fit, JSON nested too deeply or not UTF-8 included."""
        return Plan.from_dict(parse_json(text, "plan"), graph, shared_memory_bytes)

    @staticmethod
    def from_dict(data: Any, graph: OpGraph, shared_memory_bytes: int | None = MAX_SHARED_MEMORY_BYTES) -> Plan:
        """The plan `to_dict` wrote, checked against `graph` and a GPU of `shared_memory_bytes` per CTA."""
        if not isinstance(data, dict) or not isinstance(data.get("kernels"), list):
            raise SpecError("plan: expected an object with a 'kernels' list")
        problem = json_problem(data)  # before anything walks it: depth, int64, UTF-8
        if problem:
            raise SpecError(f"plan: {problem}")
        version = data.get("version", PLAN_VERSION)
        if type(version) is not int or version != PLAN_VERSION:  # true == 1 in Python, not in a plan
            raise SpecError(f"plan: version {show(version)} is not supported (expected {PLAN_VERSION})")
        unknown = set(data) - {"version", "graph", "kernels", "recompute", "options"}
        if unknown:
            raise SpecError(f"plan: unknown field(s) {show(sorted(unknown))}")
        if "graph" in data and data["graph"] != graph.signature_hash():
            raise PlanError("plan: it was made for a different graph (signature differs); search this graph again")
        kernels: list[Kernel] = []
        for i, d in enumerate(data["kernels"]):
            kernels.append(kernel_from_dict(d, f"plan kernel {i}"))
        recompute = data.get("recompute", [])
        if not isinstance(recompute, list) or not all(isinstance(r, str) for r in recompute):
            raise SpecError(f"plan: 'recompute' must be a list of node names, got {show(recompute)}")
        options = CodegenOptions.from_dict(data.get("options", {}))  # plans written before options: defaults
        return Plan(graph, tuple(kernels), frozenset(recompute), options).check(shared_memory_bytes)

    def describe(self) -> str:
        """One line per kernel."""
        lines = []
        for i, k in enumerate(self.kernels):
            lines.append(f"{i}: {k.describe(self.graph)}")
        return "\n".join(lines)

