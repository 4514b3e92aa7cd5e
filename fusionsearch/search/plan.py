"""The fusion plan: an ordered list of kernels covering the graph, its legality, JSON form and reference plans.

A plan is decisions, not artefacts: generated source is a pure function of (graph, plan)."""

from __future__ import annotations

import json
import math
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

import networkx as nx

from fusionsearch.errors import PlanError, SpecError
from fusionsearch.graph.opgraph import Node, OpGraph
from fusionsearch.graph.registry import json_problem, show

PLAN_VERSION = 1
FUSABLE = ("pointwise", "layout", "indexing")

# Tile config bounds: the blocks the search and the code generator use (tl.dot needs at least 16), the warps of
# one CTA (16 warps: 512 threads), pipeline stages that fit shared memory at the smallest blocks, and split-K
# beyond which codegen clamps to one K block a split anyway.
MIN_BLOCK, MAX_BLOCK = 16, 256
MAX_WARPS, MAX_STAGES, MAX_GROUP_M, MAX_SPLIT_K = 16, 8, 64, 64
# Shared memory per CTA (bytes) of the largest GPU plans are made for (H100/H200: 227 KiB opt-in); a caller with a
# device in hand (costmodel.Hardware.shared_memory_bytes) passes its own figure.
MAX_SHARED_MEMORY_BYTES = 232448
# The longest chain of dependent nodes fused into one kernel: the code generator walks a fused chain recursively
# (codegen/tile.py, three Python frames a node), so a chain of thousands would end in a RecursionError.
MAX_FUSED_DEPTH = 128


@dataclass(frozen=True)
class TileConfig:
    """One matmul tile configuration (a hashable value, like triton.Config)."""

    block_m: int = 64
    block_n: int = 64
    block_k: int = 32
    group_m: int = 8
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PlanError(f"tile config {f.name} must be a positive integer, got {show(value)}")
        for key in ("block_m", "block_n", "block_k", "num_warps"):
            v = getattr(self, key)
            if v & (v - 1):
                raise PlanError(f"tile config {key} must be a power of two, got {show(v)}")
        if min(self.block_m, self.block_n, self.block_k) < MIN_BLOCK:
            raise PlanError("tile config block_m, block_n and block_k must be at least 16 (tl.dot's minimum)")
        bounds = {"block_m": MAX_BLOCK, "block_n": MAX_BLOCK, "block_k": MAX_BLOCK, "num_warps": MAX_WARPS,
                  "num_stages": MAX_STAGES, "group_m": MAX_GROUP_M, "split_k": MAX_SPLIT_K}
        for key, most in bounds.items():
            if getattr(self, key) > most:
                raise PlanError(f"tile config {key} must be at most {most}, got {show(getattr(self, key))}")

    def shared_memory_bytes(self, itemsize: int) -> int:
        """Shared memory of the software pipeline (bytes): `num_stages` buffers of one A and one B tile of
        `itemsize`-byte elements (what costmodel.analytic.smem_bytes counts, and Triton allocates)."""
        return self.num_stages * (self.block_m * self.block_k + self.block_k * self.block_n) * itemsize

    def short(self) -> str:
        return (f"{self.block_m}x{self.block_n}x{self.block_k} g{self.group_m} sk{self.split_k} "
                f"w{self.num_warps} s{self.num_stages}")


@dataclass(frozen=True)
class TemplateKernel:
    """One matmul with the nodes fused into its A and B loads (prologues) and evaluated on its output tile
    (epilogue: downstream pointwise work, and whatever computes an addmm/linear bias)."""

    matmul: str
    prologue_a: tuple[str, ...] = ()
    prologue_b: tuple[str, ...] = ()
    epilogue: tuple[str, ...] = ()
    config: TileConfig = field(default_factory=TileConfig)
    kind: Literal["template"] = "template"

    @property
    def nodes(self) -> tuple[str, ...]:
        return (*self.prologue_a, *self.prologue_b, self.matmul, *self.epilogue)


@dataclass(frozen=True)
class PointwiseKernel:
    """A fused group of pointwise, layout and indexing nodes, run over the shape of the values it stores."""

    nodes: tuple[str, ...]
    kind: Literal["pointwise"] = "pointwise"


@dataclass(frozen=True)
class ExternKernel:
    """One extern node, run by PyTorch."""

    node: str
    kind: Literal["extern"] = "extern"

    @property
    def nodes(self) -> tuple[str, ...]:
        return (self.node,)


@dataclass(frozen=True)
class LibraryKernel:
    """One matmul with nothing fused, run by PyTorch's own matmul (cuBLAS on NVIDIA GPUs): where no prologue
    or epilogue pays for a Triton template, the vendor library's main loop is the one to beat."""

    matmul: str
    kind: Literal["library"] = "library"

    @property
    def nodes(self) -> tuple[str, ...]:
        return (self.matmul,)


Kernel = TemplateKernel | PointwiseKernel | ExternKernel | LibraryKernel


def produced(k: Kernel) -> tuple[str, ...]:
    """Nodes a kernel can write to memory: prologue values live only in registers."""
    if isinstance(k, TemplateKernel):
        return (k.matmul, *k.epilogue)
    return k.nodes


@dataclass(frozen=True)
class Plan:
    """An ordered list of kernels covering every node of `graph`; `recompute` names nodes that the plan
    deliberately computes in more than one kernel."""

    graph: OpGraph = field(compare=False, repr=False)
    kernels: tuple[Kernel, ...]
    recompute: frozenset[str] = frozenset()

    # ---- derived facts the code generator and cost model share ---------------------------------
    def stored(self) -> list[set[str]]:
        """Per kernel, the nodes it writes to memory: graph outputs and values read by another kernel."""
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
        return out

    def with_config(self, cfg: TileConfig) -> Plan:
        """The same plan with every matmul template on tile config `cfg` (benchmarks sweeping configs)."""
        kernels = tuple(replace(k, config=cfg) if isinstance(k, TemplateKernel) else k for k in self.kernels)
        return Plan(self.graph, kernels, self.recompute)

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
        return {"version": PLAN_VERSION, "graph": self.graph.signature_hash(), "kernels": kernels,
                "recompute": sorted(self.recompute)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @staticmethod
    def from_json(text: str | bytes, graph: OpGraph, shared_memory_bytes: int | None = MAX_SHARED_MEMORY_BYTES
                  ) -> Plan:
        """Read a plan saved by `to_json` for `graph` (text, or UTF-8 bytes); a SpecError or PlanError says what
        does not fit, JSON nested too deeply or not UTF-8 included."""
        from fusionsearch.graph.spec import parse_json

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
        unknown = set(data) - {"version", "graph", "kernels", "recompute"}
        if unknown:
            raise SpecError(f"plan: unknown field(s) {show(sorted(unknown))}")
        if "graph" in data and data["graph"] != graph.signature_hash():
            raise PlanError("plan: it was made for a different graph (signature differs); search this graph again")
        kernels: list[Kernel] = []
        for i, d in enumerate(data["kernels"]):
            kernels.append(_kernel_from_dict(d, f"plan kernel {i}"))
        recompute = data.get("recompute", [])
        if not isinstance(recompute, list) or not all(isinstance(r, str) for r in recompute):
            raise SpecError(f"plan: 'recompute' must be a list of node names, got {show(recompute)}")
        return Plan(graph, tuple(kernels), frozenset(recompute)).check(shared_memory_bytes)

    def describe(self) -> str:
        """One line per kernel."""
        lines = []
        for i, k in enumerate(self.kernels):
            if isinstance(k, TemplateKernel):
                parts = [f"{i}: {self.graph.node(k.matmul).op} {k.matmul}"]
                if k.prologue_a:
                    parts.append(f"prologue A [{', '.join(k.prologue_a)}]")
                if k.prologue_b:
                    parts.append(f"prologue B [{', '.join(k.prologue_b)}]")
                if k.epilogue:
                    parts.append(f"epilogue [{', '.join(k.epilogue)}]")
                parts.append(f"config {k.config.short()}")
                lines.append("; ".join(parts))
            elif isinstance(k, LibraryKernel):
                lines.append(f"{i}: {self.graph.node(k.matmul).op} {k.matmul}; library (PyTorch's matmul: cuBLAS)")
            else:
                lines.append(f"{i}: {k.kind} [{', '.join(k.nodes)}]")
        return "\n".join(lines)

    # ---- execution (thin wrappers over codegen) -------------------------------------------------
    def compile(self, **options: Any) -> Any:
        """A callable `(*inputs) -> list of outputs` running the generated kernels."""
        from fusionsearch.codegen.runtime import compile_plan

        return compile_plan(self, **options)

    def export(self, directory: str, **options: Any) -> str:
        """Write a standalone module (torch + triton only) with the kernels and `run(*inputs)`; returns its path."""
        from fusionsearch.codegen.runtime import export_plan

        return export_plan(self, directory, **options)


_KERNEL_FIELDS = {"template": {"kind", "matmul", "prologue_a", "prologue_b", "epilogue", "config"},
                  "pointwise": {"kind", "nodes"}, "extern": {"kind", "node"}, "library": {"kind", "matmul"}}


def _kernel_from_dict(d: Any, where: str) -> Kernel:
    if not isinstance(d, dict):
        raise SpecError(f"{where}: must be an object")
    kind = d.get("kind")
    # A misspelt key would otherwise be dropped silently, and the plan replayed would not be the plan written.
    unknown = set(d) - _KERNEL_FIELDS[kind] if isinstance(kind, str) and kind in _KERNEL_FIELDS else set()
    if unknown:
        raise SpecError(f"{where}: unknown field(s) {show(sorted(unknown))} for a {kind} kernel")

    def names(key: str) -> tuple[str, ...]:
        v = d.get(key, [])
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise SpecError(f"{where}: {key!r} must be a list of node names, got {show(v)}")
        return tuple(v)

    if kind == "template":
        cfg = d.get("config", {})
        if not isinstance(cfg, dict) or set(cfg) - set(TileConfig.__dataclass_fields__):
            raise SpecError(f"{where}: 'config' must be an object with keys {sorted(TileConfig.__dataclass_fields__)}")
        if not isinstance(d.get("matmul"), str):
            raise SpecError(f"{where}: 'matmul' must be a node name")
        try:
            config = TileConfig(**cfg)
        except PlanError as e:
            raise PlanError(f"{where} ({d['matmul']!r}): {e}") from None
        return TemplateKernel(d["matmul"], names("prologue_a"), names("prologue_b"), names("epilogue"), config)
    if kind == "pointwise":
        return PointwiseKernel(names("nodes"))
    if kind == "extern":
        if not isinstance(d.get("node"), str):
            raise SpecError(f"{where}: 'node' must be a node name")
        return ExternKernel(d["node"])
    if kind == "library":
        if not isinstance(d.get("matmul"), str):
            raise SpecError(f"{where}: 'matmul' must be a node name")
        return LibraryKernel(d["matmul"])
    raise SpecError(f"{where}: 'kind' must be template, library, pointwise or extern, got {show(kind)}")


# ---- legality ----------------------------------------------------------------------------------

def check_plan(plan: Plan, shared_memory_bytes: int | None = None) -> None:
    """Every node covered once (or recomputed by choice), dependencies computed first, fused sets mapping onto
    their tiles, each tile's pipeline within `shared_memory_bytes` (per CTA; None: not checked) and no fused
    chain longer than MAX_FUSED_DEPTH. Raises PlanError naming the first problem."""
    g = plan.graph
    for r in sorted(plan.recompute, key=show):
        if not isinstance(r, str) or r not in g or g.node(r).op == "input":
            raise PlanError(f"plan lists {show(r)} under 'recompute', which is not a node of the graph it computes")
    count: dict[str, int] = {}
    for k in plan.kernels:
        for n in k.nodes:
            if n not in g:
                raise PlanError(f"plan names node {n!r}, which is not in the graph")
            count[n] = count.get(n, 0) + 1
    for node in g:
        if node.op == "input":
            if node.name in count:
                raise PlanError(f"graph input {node.name!r} cannot be computed by a kernel")
            continue
        c = count.get(node.name, 0)
        if c == 0:
            raise PlanError(f"node {node.name!r} is not computed by any kernel of the plan")
        if c > 1 and node.name not in plan.recompute:
            raise PlanError(f"node {node.name!r} is computed by {c} kernels; list it under 'recompute' to allow that")
    materialised = set(g.inputs)
    order = {n: j for j, n in enumerate(g.topo_order())}
    for i, k in enumerate(plan.kernels):
        _check_kernel(g, k, i)
        if isinstance(k, TemplateKernel):
            if shared_memory_bytes is not None:
                _check_tile(g, k, i, shared_memory_bytes)
        if len(k.nodes) > MAX_FUSED_DEPTH:
            _check_depth(g, k, i, order)
        inside = set(k.nodes)
        for n in k.nodes:
            for src in g.node(n).inputs:
                if src not in inside and src not in materialised:
                    raise PlanError(f"kernel {i} reads {src!r} (input of {n!r}) before any kernel writes it")
        materialised |= set(produced(k))
    for o in g.outputs:
        if o not in materialised:  # a prologue keeps its values in registers: nothing would write the output
            raise PlanError(f"graph output {o!r} is computed only inside a matmul prologue, which never writes it; "
                            "compute it in its own kernel")
    for i, (k, stored) in enumerate(zip(plan.kernels, plan.stored(), strict=True)):
        if isinstance(k, TemplateKernel):
            shape = g.node(k.matmul).shape
            for n in stored:
                if g.node(n).shape != shape:
                    raise PlanError(f"kernel {i}: {n!r} is needed outside the kernel but its shape "
                                    f"{list(g.node(n).shape)} "
                                    f"is not the matmul's tile {list(shape)}; compute it in its own kernel")


def _check_tile(g: OpGraph, k: TemplateKernel, i: int, shared_memory_bytes: int) -> None:
    """The tile's pipeline fits the GPU's shared memory: Triton would compile it, then refuse to launch it."""
    dtype = g.node(template_operands(g, k.matmul)["A"]).dtype
    need = k.config.shared_memory_bytes(dtype.itemsize)
    if need > shared_memory_bytes:
        raise PlanError(f"kernel {i} ({k.matmul!r}): tile config {k.config.short()} needs {need} bytes of shared "
                        f"memory for {str(dtype).removeprefix('torch.')} operands, more than the {shared_memory_bytes} "
                        "the GPU has; use fewer stages or smaller blocks")


def _check_depth(g: OpGraph, k: Kernel, i: int, order: Mapping[str, int]) -> None:
    """No chain of dependent nodes inside one kernel longer than MAX_FUSED_DEPTH (see there why)."""
    inside = set(k.nodes)
    depth: dict[str, int] = {}
    for n in sorted(inside, key=order.__getitem__):
        depth[n] = 1 + max((depth[s] for s in g.node(n).inputs if s in depth), default=0)
        if depth[n] > MAX_FUSED_DEPTH:
            raise PlanError(f"kernel {i} fuses a chain of more than {MAX_FUSED_DEPTH} dependent nodes (up to {n!r}); "
                            "split it into several kernels")


def _check_kernel(g: OpGraph, k: Kernel, i: int) -> None:
    where = f"kernel {i}"
    if isinstance(k, ExternKernel):
        if g.node(k.node).kind != "extern":
            raise PlanError(f"{where}: {k.node!r} is a {g.node(k.node).op}, not an extern op")
        return
    if isinstance(k, LibraryKernel):
        if g.node(k.matmul).kind != "template":
            raise PlanError(f"{where}: {k.matmul!r} is a {g.node(k.matmul).op}, not a matmul")
        return
    if isinstance(k, PointwiseKernel):
        if not k.nodes:
            raise PlanError(f"{where}: a pointwise kernel needs at least one node")
        shapes = set()
        for n in k.nodes:
            if g.node(n).kind not in FUSABLE:
                raise PlanError(f"{where}: {n!r} ({g.node(n).op}) cannot go in a pointwise kernel")
        inside = set(k.nodes)
        sinks = [n for n in k.nodes if not any(c in inside for c in g.consumers(n))]
        shapes = {g.node(n).shape for n in sinks}
        if len(shapes) != 1:
            raise PlanError(f"{where}: the pointwise kernel's results have different shapes {sorted(shapes)}; split it")
        return
    mm = g.node(k.matmul)
    if mm.kind != "template":
        raise PlanError(f"{where}: {k.matmul!r} is a {mm.op}, not a matmul")
    operands = template_operands(g, k.matmul)
    for side, nodes in (("A", k.prologue_a), ("B", k.prologue_b)):
        if not nodes:
            continue
        root = operands[side]
        if root not in nodes:
            raise PlanError(f"{where}: prologue {side} must include the operand {root!r} itself")
        allowed = nx.ancestors(g.nx, root) | {root}
        for n in nodes:
            if g.node(n).kind not in FUSABLE:
                raise PlanError(f"{where}: {n!r} ({g.node(n).op}) cannot be fused into a matmul prologue")
            if n not in allowed:
                raise PlanError(f"{where}: {n!r} does not feed operand {side} ({root!r}), so it cannot be its prologue")
    out_shape = mm.shape
    inside = set(k.epilogue)
    # once a kernel, and only as far as its last epilogue node: a path from the matmul to one ends before it
    after = g.descendants_until(k.matmul, max(map(g.position, k.epilogue))) if k.epilogue else set()
    for n in k.epilogue:
        node = g.node(n)
        if node.kind not in ("pointwise", "layout", "indexing"):
            raise PlanError(f"{where}: {n!r} ({node.op}) cannot be fused into a matmul epilogue")
        downstream = n in after
        if downstream and node.shape != out_shape:
            raise PlanError(f"{where}: epilogue node {n!r} has shape {list(node.shape)}, "
                            f"the matmul's tile covers {list(out_shape)}")
        if downstream and _reads_elsewhere(g, k.matmul, node):
            raise PlanError(f"{where}: epilogue node {n!r} ({node.op}) reads the matmul's result at other positions "
                            "than its own, outside the tile; compute it in its own kernel")
        if not downstream and not _feeds_bias(g, k.matmul, n, inside):
            raise PlanError(f"{where}: {n!r} neither follows the matmul nor computes its bias, "
                            "so it is not an epilogue")


def _reads_elsewhere(g: OpGraph, mm: str, node: Node) -> bool:
    """True when a node downstream of the matmul reads its downstream operand at another index than its own
    (a transpose or permute, even of a square tile, or a gather from it): an epilogue only holds its own tile."""
    rank = len(node.shape)
    if node.op == "transpose":
        return node.attrs.get("dim0", 0) % rank != node.attrs.get("dim1", 1) % rank
    if node.op == "permute":
        return [d % rank for d in node.attrs["dims"]] != list(range(rank))
    if node.kind == "indexing":  # indices computed on the tile are fine, a table computed on it is not
        table = node.inputs[0]
        return table == mm or mm in nx.ancestors(g.nx, table)
    return False


def _feeds_bias(g: OpGraph, mm: str, n: str, inside: set[str]) -> bool:
    bias = template_operands(g, mm).get("bias")
    return bias is not None and (n == bias or n in nx.ancestors(g.nx, bias))


def template_operands(g: OpGraph, mm: str) -> dict[str, str]:
    """The matmul's operand nodes by role: A, B, and bias where the op has one."""
    node = g.node(mm)
    if node.op == "addmm":
        return {"bias": node.inputs[0], "A": node.inputs[1], "B": node.inputs[2]}
    roles = {"A": node.inputs[0], "B": node.inputs[1]}
    if node.op == "linear" and len(node.inputs) == 3:
        roles["bias"] = node.inputs[2]
    return roles


# ---- building plans from decisions -------------------------------------------------------------

Decision = tuple[str, ...]  # ("standalone",) | ("epilogue", mm) | ("prologue", mm, "A"|"B") | ("group", gid)


def build_plan(g: OpGraph, decisions: Mapping[str, Decision], configs: Mapping[str, TileConfig] | None = None,
               recompute: Iterable[str] = (), library: Iterable[str] = ()) -> Plan:
    """Assemble a legal, ordered Plan from per-node decisions for the fusable nodes (default: standalone)
    and per-matmul tile configs; the matmuls in `library` run in PyTorch's matmul (nothing fused into them);
    kernels are ordered by their dependencies."""
    configs = configs or {}
    library = set(library)
    groups: dict[str, list[str]] = {}
    pro: dict[tuple[str, str], list[str]] = {}
    epi: dict[str, list[str]] = {}
    order = g.topo_order()
    for n in order:
        node = g.node(n)
        if node.kind not in FUSABLE:
            continue
        d = decisions.get(n, ("standalone",))
        if d[0] == "standalone":
            groups[f"_{n}"] = [n]
        elif d[0] == "group":
            groups.setdefault(str(d[1]), []).append(n)
        elif d[0] == "epilogue":
            epi.setdefault(d[1], []).append(n)
        elif d[0] == "prologue":
            pro.setdefault((d[1], d[2]), []).append(n)
        else:
            raise PlanError(f"unknown decision {d!r} for node {n!r}")
    kernels: list[Kernel] = []
    for n in order:
        node = g.node(n)
        if node.kind == "template" and n in library:
            if pro.get((n, "A")) or pro.get((n, "B")) or epi.get(n):
                raise PlanError(f"matmul {n!r} runs in PyTorch's matmul (the library), so nothing can be fused into it")
            kernels.append(LibraryKernel(n))
        elif node.kind == "template":
            kernels.append(TemplateKernel(n, tuple(pro.get((n, "A"), ())), tuple(pro.get((n, "B"), ())),
                                          tuple(epi.get(n, ())), configs.get(n) or _default_config(g, n)))
        elif node.kind == "extern":
            kernels.append(ExternKernel(n))
    kernels += [PointwiseKernel(tuple(nodes)) for nodes in groups.values()]
    return Plan(g, tuple(_order_kernels(g, kernels)), frozenset(recompute)).check()


def _order_kernels(g: OpGraph, kernels: Sequence[Kernel]) -> list[Kernel]:
    """Topological order of kernels by the values they read; a cycle means the fusion choice is illegal."""
    dep = nx.DiGraph()
    dep.add_nodes_from(range(len(kernels)))
    producer: dict[str, int] = {}
    for i, k in enumerate(kernels):
        for n in produced(k):
            producer.setdefault(n, i)
    for i, k in enumerate(kernels):
        inside = set(k.nodes)
        for n in k.nodes:
            for src in g.node(n).inputs:
                if src not in inside and src in producer and producer[src] != i:
                    dep.add_edge(producer[src], i)
    try:
        return [kernels[i] for i in nx.lexicographical_topological_sort(dep)]
    except nx.NetworkXUnfeasible:
        raise PlanError("these fusion choices make two kernels wait on each other (a cycle); "
                        "fuse differently") from None


_DEFAULTS: weakref.WeakKeyDictionary[OpGraph, dict[str, TileConfig]] = weakref.WeakKeyDictionary()


def _default_config(g: OpGraph, mm: str) -> TileConfig:
    """default_config, kept per graph and matmul (a node's shape never changes once added): build_plan asks for
    every matmul's, every plan it builds."""
    known = _DEFAULTS.setdefault(g, {})
    if mm not in known:
        known[mm] = default_config(g, mm)
    return known[mm]


def default_config(g: OpGraph, mm: str, multiprocessors: int = 132) -> TileConfig:
    """A reasonable tile config for the problem size: large tiles for large problems; for small M a short
    tile, a long K step, and split-K until the tiles fill the GPU's multiprocessors about twice."""
    node = g.node(mm)
    m, n = node.shape[-2], node.shape[-1]
    batch = math.prod(node.shape[:-2]) if node.op == "bmm" else 1
    k = g.node(template_operands(g, mm)["A"]).shape[-1]
    if m >= 1024 and n >= 1024:
        elem = g.node(template_operands(g, mm)["A"]).nbytes // max(1, g.node(template_operands(g, mm)["A"]).numel)
        bk = min(64 if elem <= 2 else 32, _padded(k))
        return TileConfig(block_m=128, block_n=128, block_k=bk, group_m=8, split_k=1, num_warps=8, num_stages=3)
    bm = 16 if m <= 16 else 32 if m <= 32 else 64 if m <= 64 else 128
    bn = 64 if n <= 64 else 128
    bk = 128 if m <= 64 else 64
    tiles = math.ceil(m / bm) * math.ceil(n / bn) * batch
    k_tiles = math.ceil(k / bk)
    split = 1
    while tiles * split * 2 <= 2 * multiprocessors and split * 2 <= max(1, k_tiles // 4) and split < 16:
        split *= 2
    bn, bk = min(bn, _padded(n)), min(bk, _padded(k))
    k_tiles = math.ceil(k / bk)
    split = min(split, max(1, k_tiles // 2))
    stages = 4
    elem = g.node(template_operands(g, mm)["A"]).nbytes // max(1, g.node(template_operands(g, mm)["A"]).numel)
    while stages > 2 and stages * (bm * bk + bk * bn) * elem > _SMEM_BUDGET:
        stages -= 1  # fp32 operands: fewer stages keep the pipeline inside shared memory
    while bk > 32 and stages * (bm * bk + bk * bn) * elem > _SMEM_BUDGET:
        bk //= 2
    return TileConfig(block_m=bm, block_n=bn, block_k=bk, group_m=8, split_k=split, num_warps=4, num_stages=stages)


_SMEM_BUDGET = 200 * 1024  # bytes of shared memory a default config may use (H100/H200 allow 227 KiB)


def _padded(v: int) -> int:
    """The size rounded up to a power of two, at least 16 (tl.dot's minimum block)."""
    return max(16, 1 << (max(v, 1) - 1).bit_length())


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
