"""The versioned feature schema of the learned cost model: one fixed, ordered vector of numbers per plan kernel.

Every feature is read from the plan, the registry or the analytic model, so a kernel's features are a pure
function of (graph, plan, kernel index, hardware). Changing a name, its order or its meaning bumps
FEATURE_SCHEMA_VERSION: datasets and models carry the version and are refused when it differs."""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import torch

from fusionsearch.codegen.dtypes import LOW_PRECISION, compute_dtype
from fusionsearch.codegen.module import generate_module
from fusionsearch.codegen.templates import problem
from fusionsearch.costmodel.analytic import Estimate, KernelEstimate
from fusionsearch.costmodel.analytic import estimate as analytic_estimate
from fusionsearch.costmodel.hardware import Hardware
from fusionsearch.errors import CostModelError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.registry import get_op
from fusionsearch.search.plan import ExternKernel, Plan, PointwiseKernel, TemplateKernel, template_operands

__all__ = ["ANALYTIC_FEATURE", "FEATURE_NAMES", "FEATURE_SCHEMA_VERSION", "kernel_features", "plan_features",
           "to_matrix"]

FEATURE_SCHEMA_VERSION = 1

# The analytic model's kernel time (µs): the baseline the learned model corrects and is compared against.
ANALYTIC_FEATURE = "roofline_us"

_REGIONS = ("pro_a", "pro_b", "epi", "body")  # prologue A, prologue B, epilogue (templates); body (pointwise)
_OP_CLASSES = ("pointwise", "layout", "indexing", "fp32")  # fp32: pointwise ops that call libdevice

FEATURE_NAMES: tuple[str, ...] = (
    # the analytic model's figures for the kernel (bytes, flop, µs, counts)
    "bytes_read", "bytes_written", "reread_a", "reread_b", "flops", "arith_intensity",
    ANALYTIC_FEATURE, "memory_us", "compute_us", "waves", "tiles", "tiles_per_sm",
    # the tile config (zeros for pointwise and extern kernels)
    "block_m", "block_n", "block_k", "group_m", "split_k", "num_warps", "num_stages",
    # kind one-hot
    "kind_template", "kind_pointwise", "kind_extern",
    # fused op counts by region and class
    *(f"{region}_{cls}" for region in _REGIONS for cls in _OP_CLASSES),
    "upcasts",
    # dtypes (bits): the matmul's A and B operands (templates), the narrowest and widest value loaded, the output
    "a_bits", "b_bits", "load_bits_min", "load_bits_max", "out_bits",
    # problem shape (log2; numel for pointwise and extern kernels) and the share of tensor-core work not padding
    "log2_m", "log2_n", "log2_k", "log2_batch", "log2_numel", "pad_efficiency",
)

# Which regions compute low-precision arithmetic in fp32: the code generator's defaults, read from it so
# that the feature follows the generated code.
_CODEGEN_DEFAULTS = {name: p.default for name, p in inspect.signature(generate_module).parameters.items()
                     if name.startswith("upcast_")}
_UPCAST = {"pro_a": _CODEGEN_DEFAULTS["upcast_prologue"], "pro_b": _CODEGEN_DEFAULTS["upcast_prologue"],
           "epi": _CODEGEN_DEFAULTS["upcast_epilogue"], "body": _CODEGEN_DEFAULTS["upcast_pointwise"]}


def _bits(dtype: torch.dtype) -> int:
    return dtype.itemsize * 8 if dtype != torch.bool else 8


def _log2(x: float) -> float:
    return math.log2(max(1.0, float(x)))


def _op_class_counts(g: OpGraph, nodes: Iterable[str]) -> dict[str, int]:
    counts = dict.fromkeys(_OP_CLASSES, 0)
    for n in nodes:
        node = g.node(n)
        if node.kind in ("pointwise", "layout", "indexing"):
            counts[node.kind] += 1
        if node.kind == "pointwise" and get_op(node.op).needs_fp32:
            counts["fp32"] += 1
    return counts


def _upcasts(g: OpGraph, nodes: Iterable[str], upcast: bool) -> int:
    """Low-precision pointwise ops that the generated code computes in fp32 (libdevice calls always do)."""
    count = 0
    for n in nodes:
        node = g.node(n)
        if node.kind != "pointwise":
            continue
        if node.dtype == torch.bool:  # a comparison computes in its operands' dtype
            logical = next((g.node(s).dtype for s in node.inputs if g.node(s).dtype.is_floating_point), torch.bool)
            needs = False
        else:
            logical, needs = node.dtype, get_op(node.op).needs_fp32
        if logical in LOW_PRECISION and compute_dtype(logical, needs, upcast) == torch.float32:
            count += 1
    return count


def _loaded(g: OpGraph, nodes: Sequence[str]) -> set[str]:
    """Values a kernel reads from memory: inputs of its nodes that it does not compute."""
    inside = set(nodes)
    return {src for n in nodes for src in g.node(n).inputs if src not in inside}


def _regions(k: TemplateKernel | PointwiseKernel | ExternKernel) -> dict[str, tuple[str, ...]]:
    if isinstance(k, TemplateKernel):
        return {"pro_a": k.prologue_a, "pro_b": k.prologue_b, "epi": k.epilogue, "body": ()}
    if isinstance(k, PointwiseKernel):
        return {"pro_a": (), "pro_b": (), "epi": (), "body": k.nodes}
    return {"pro_a": (), "pro_b": (), "epi": (), "body": ()}


def kernel_features(plan: Plan, index: int, hw: Hardware, estimate: Estimate | None = None) -> dict[str, float]:
    """The FEATURE_NAMES of kernel `index` of `plan` on `hw` (bytes, flop, µs, counts, bits, log2 sizes).

    Pass the plan's `estimate` (from `costmodel.estimate(plan, hw)`) to avoid pricing the plan again.

    >>> import fusionsearch as fs
    >>> from fusionsearch.search import plan as P
    >>> from fusionsearch.costmodel import H200
    >>> f = kernel_features(P.fully_fused(fs.workload("w8_dequant_mm")), 0, H200)
    >>> f["kind_template"], f["pro_b_pointwise"] > 0, f["b_bits"]
    (1.0, True, 16.0)
    """
    if not 0 <= index < len(plan.kernels):
        raise CostModelError(f"kernel index {index} is out of range: the plan has {len(plan.kernels)} kernels")
    est = estimate if estimate is not None else analytic_estimate(plan, hw)
    if len(est.per_kernel) != len(plan.kernels):
        raise CostModelError("the estimate passed to kernel_features was made for another plan; pass that plan's")
    g, k, ke = plan.graph, plan.kernels[index], est.per_kernel[index]
    stored = plan.stored()[index]
    f: dict[str, float] = dict.fromkeys(FEATURE_NAMES, 0.0)
    f.update(_analytic(ke, hw))
    f["kind_" + k.kind] = 1.0

    upcasts = 0
    for region, nodes in _regions(k).items():
        for cls, c in _op_class_counts(g, nodes).items():
            f[f"{region}_{cls}"] = float(c)
        upcasts += _upcasts(g, nodes, _UPCAST[region])
    f["upcasts"] = float(upcasts)

    loaded = _loaded(g, k.nodes)
    if loaded:
        bits = [_bits(g.node(n).dtype) for n in loaded]
        f["load_bits_min"], f["load_bits_max"] = float(min(bits)), float(max(bits))
    outs = stored or set(k.nodes[-1:])
    f["out_bits"] = float(max(_bits(g.node(n).dtype) for n in outs))

    if isinstance(k, TemplateKernel):
        cfg = k.config
        for key in ("block_m", "block_n", "block_k", "group_m", "split_k", "num_warps", "num_stages"):
            f[key] = float(getattr(cfg, key))
        ops = template_operands(g, k.matmul)
        f["a_bits"], f["b_bits"] = float(_bits(g.node(ops["A"]).dtype)), float(_bits(g.node(ops["B"]).dtype))
        p = problem(g, k.matmul)
        f["log2_m"], f["log2_n"], f["log2_k"], f["log2_batch"] = _log2(p.m), _log2(p.n), _log2(p.k), _log2(p.batch)
        f["log2_numel"] = _log2(p.batch * p.m * p.n)
        padded = (math.ceil(p.m / cfg.block_m) * cfg.block_m * math.ceil(p.n / cfg.block_n) * cfg.block_n
                  * math.ceil(p.k / cfg.block_k) * cfg.block_k)
        f["pad_efficiency"] = p.m * p.n * p.k / padded
    else:
        f["log2_numel"] = _log2(max(g.node(n).numel for n in outs))
    return f


def _analytic(ke: KernelEstimate, hw: Hardware) -> dict[str, float]:
    moved = ke.bytes_read + ke.bytes_written
    return {"bytes_read": float(ke.bytes_read), "bytes_written": float(ke.bytes_written),
            "reread_a": float(ke.reread_a), "reread_b": float(ke.reread_b), "flops": float(ke.flops),
            "arith_intensity": ke.flops / max(1, moved), ANALYTIC_FEATURE: float(ke.time_us),
            "memory_us": float(ke.memory_us), "compute_us": float(ke.compute_us), "waves": float(ke.waves),
            "tiles": float(ke.tiles), "tiles_per_sm": ke.tiles / hw.multiprocessors}


def plan_features(plan: Plan, hw: Hardware) -> list[dict[str, float]]:
    """kernel_features of every kernel of `plan`, in plan order (the plan is priced once)."""
    est = analytic_estimate(plan, hw)
    return [kernel_features(plan, i, hw, est) for i in range(len(plan.kernels))]


def to_matrix(rows: Sequence[Mapping[str, float]]) -> np.ndarray:
    """A float64 array of shape (len(rows), len(FEATURE_NAMES)), columns in FEATURE_NAMES order; a
    CostModelError names the first missing feature."""
    out = np.empty((len(rows), len(FEATURE_NAMES)), dtype=np.float64)
    for i, row in enumerate(rows):
        try:
            out[i] = [row[name] for name in FEATURE_NAMES]
        except KeyError as e:
            raise CostModelError(f"feature row {i} lacks {e.args[0]!r}: it was computed with another feature "
                                 f"schema (this is v{FEATURE_SCHEMA_VERSION}); recompute the features") from None
        except (TypeError, ValueError):
            raise CostModelError(f"feature row {i} holds a value that is not a number") from None
    return out
