"""The versioned feature schema of the learned cost model: one fixed, ordered vector of numbers per plan kernel.

Every feature is read from the plan, the registry or the analytic model, so a kernel's features are a pure
function of (graph, plan, kernel index, hardware). Changing a name, its order or its meaning bumps
FEATURE_SCHEMA_VERSION: datasets and models carry the version and are refused when it differs."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from fusionsearch.costmodel.analytic import Estimate, KernelEstimate
from fusionsearch.costmodel.analytic import estimate as analytic_estimate
from fusionsearch.costmodel.hardware import Hardware
from fusionsearch.errors import CostModelError, FusionSearchError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.registry import get_op
from fusionsearch.graph.spec import graph_from_dict
from fusionsearch.kinds import all_kinds, kind_of
from fusionsearch.kinds.counting import bits, loaded
from fusionsearch.kinds.triton_source.dtypes import LOW_PRECISION, compute_dtype
from fusionsearch.plan import CodegenOptions, Plan
from fusionsearch.plan.resources import KernelResources

__all__ = ["ANALYTIC_FEATURE", "COMPILED_FEATURES", "FEATURE_NAMES", "FEATURE_SCHEMA_VERSION", "HARDWARE_FEATURES",
           "compiled_features", "hardware_features", "kernel_features", "library_rows", "plan_features",
           "recompute_features", "to_matrix"]

FEATURE_SCHEMA_VERSION = 8

# The analytic model's kernel time (µs): the baseline the learned model corrects and is compared against.
ANALYTIC_FEATURE = "roofline_us"

_REGIONS = ("pro_a", "pro_b", "epi", "body")  # prologue A, prologue B, epilogue (templates); body (pointwise)
_OP_CLASSES = ("pointwise", "layout", "indexing", "fp32")  # fp32: pointwise ops that call libdevice

COMPILED_FEATURES = ("registers", "stack_bytes", "shared_kib_compiled",
                     # v4: from the machine code (SASS)
                     "sass_instructions", "loop_instructions", "loops", "loop_local_ops", "other_local_ops")

# v8: the GPU, so that one model prices every GPU it was trained on (fusionsearch.hardware.Hardware's figures):
# copy bandwidth (TB/s), the 16-bit tensor-core and fp32 peaks (TFLOP/s), multiprocessors, shared memory per
# block and per multiprocessor (KiB), L2 (MiB), boost clocks (MHz), launch cost (µs); and two of the kernel's
# figures against the machine: the bytes it moves over L2, its flop per byte over the machine's (the ridge).
# A figure the profile does not know (0) is NaN, which the trees read as missing.
HARDWARE_FEATURES = ("hw_bandwidth_tbs", "hw_peak16_tflops", "hw_fp32_tflops", "hw_sms", "hw_smem_block_kib",
                     "hw_smem_sm_kib", "hw_l2_mib", "hw_sm_clock_mhz", "hw_mem_clock_mhz", "hw_launch_us",
                     "bytes_over_l2", "intensity_over_ridge")

FEATURE_NAMES: tuple[str, ...] = (
    # the analytic model's figures for the kernel (bytes, flop, µs, counts)
    "bytes_read", "bytes_written", "reread_a", "reread_b", "flops", "arith_intensity",
    ANALYTIC_FEATURE, "memory_us", "compute_us", "waves", "tiles", "tiles_per_sm",
    # the tile config (zeros for pointwise and extern kernels)
    "block_m", "block_n", "block_k", "group_m", "split_k", "num_warps", "num_stages",
    # kind one-hot (v5: the decode matmul, and its product's form: fp32 FMAs, or the dot with the weight on the left;
    # v6: the grouped mixture-of-experts matmul; v7: the decode forms of a packed weight -- the FMAs' 3-D
    # accumulator, nibble pairs read once, read as int32 words, group scales read as whole rows)
    "kind_template", "kind_pointwise", "kind_extern", "kind_decode", "decode_fma", "decode_dot_t", "kind_grouped",
    "decode_fma_acc", "decode_pairs", "decode_words", "decode_rows",
    # fused op counts by region and class
    *(f"{region}_{cls}" for region in _REGIONS for cls in _OP_CLASSES),
    "upcasts",
    # dtypes (bits): the matmul's A and B operands (templates), the narrowest and widest value loaded, the output
    "a_bits", "b_bits", "load_bits_min", "load_bits_max", "out_bits",
    # problem shape (log2; numel for pointwise and extern kernels) and the share of tensor-core work not padding
    "log2_m", "log2_n", "log2_k", "log2_batch", "log2_numel", "pad_efficiency",
    # how the template's tiles occupy the machine (v2): K steps per CTA, pipeline shared memory (KiB), resident
    # CTAs per SM, the last wave's fill, CTAs launched (log2), fp32 accumulator and operand elements per thread,
    # the share of each block the problem fills, the split-K actually run
    "k_steps", "smem_kib", "ctas_per_sm", "wave_efficiency", "log2_ctas", "acc_per_thread", "operand_per_thread",
    "m_fill", "n_fill", "split_k_run",
    # what the prologues and epilogue cost inside the template (v2): their recomputed work (log2 flop), prologue
    # ops per thread per K step, the narrowest value a prologue loads (bits), operand layouts (1 = contiguous)
    "pro_a_work", "pro_b_work", "epi_work", "pro_a_per_thread", "pro_b_per_thread",
    "pro_a_source_bits", "pro_b_source_bits", "a_k_contiguous", "b_k_contiguous", "b_n_contiguous",
    # the template compiled for its GPU (v3; codegen/resources.py): registers and stack (spill) bytes per thread,
    # shared memory (KiB); v4: its SASS instructions, those inside loops, its loops, and its local-memory
    # (spill) ops inside and outside loops. NaN where the kernel was not compiled for this (a search pricing a
    # whole space, a record from before v4); zero for pointwise and extern kernels
    *COMPILED_FEATURES,
    *HARDWARE_FEATURES,
)


def _upcast_by_region(o: CodegenOptions) -> dict[str, bool]:
    """Which regions compute low-precision arithmetic in fp32 under the plan's codegen options, so that the
    feature follows the generated code (every measured row was generated with the defaults)."""
    return {"pro_a": o.upcast_prologue, "pro_b": o.upcast_prologue, "epi": o.upcast_epilogue,
            "body": o.upcast_pointwise}


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


def kernel_features(plan: Plan, index: int, hw: Hardware, estimate: Estimate | None = None,
                    resources: KernelResources | None = None) -> dict[str, float]:
    """The FEATURE_NAMES of kernel `index` of `plan` on `hw` (bytes, flop, µs, counts, bits, log2 sizes).

    Pass the plan's `estimate` (from `costmodel.estimate(plan, hw)`) to avoid pricing the plan again, and the
    template's `resources` (codegen.resources.plan_resources) when it has been compiled for the GPU.

    >>> import fusionsearch as fs
    >>> from fusionsearch import plan as P
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
    stored = plan.stored_by(index)
    f: dict[str, float] = dict.fromkeys(FEATURE_NAMES, 0.0)
    f.update(_analytic(ke, hw))
    f.update(hardware_features(hw, ke.bytes_read + ke.bytes_written, ke.flops))
    kind = kind_of(k)
    if kind.onehot is not None:  # the library and kinds the model was not trained on have none: see library_rows
        if kind.onehot not in f:
            raise CostModelError(f"kernel kind {k.kind!r} names {kind.onehot!r} as its one-hot feature, which is "
                                 f"not a feature of schema v{FEATURE_SCHEMA_VERSION}; name one of FEATURE_NAMES")
        f[kind.onehot] = 1.0

    upcasts, upcast = 0, _upcast_by_region(plan.options)
    for region, nodes in kind.regions(k).items():
        for cls, c in _op_class_counts(g, nodes).items():
            f[f"{region}_{cls}"] = float(c)
        upcasts += _upcasts(g, nodes, upcast[region])
    f["upcasts"] = float(upcasts)

    found = loaded(g, k.nodes)
    if found:
        widths = [bits(g.node(n).dtype) for n in found]
        f["load_bits_min"], f["load_bits_max"] = float(min(widths)), float(max(widths))
    outs = stored or set(k.nodes[-1:])
    f["out_bits"] = float(max(bits(g.node(n).dtype) for n in outs))
    f.update(kind.features(g, k, stored, hw, resources))
    if getattr(kind, "compiled_features", False):
        f.update(compiled_features(resources))
    return f


def compiled_features(resources: KernelResources | None) -> dict[str, float]:
    """The COMPILED_FEATURES of a template: its resources, or NaN for each when it was not compiled."""
    if resources is None:
        return dict.fromkeys(COMPILED_FEATURES, math.nan)

    def number(value: int | None) -> float:
        return math.nan if value is None else float(value)

    return {"registers": float(resources.registers), "stack_bytes": float(resources.stack_bytes),
            "shared_kib_compiled": resources.shared_bytes / 1024,
            "sass_instructions": number(resources.instructions),
            "loop_instructions": number(resources.loop_instructions), "loops": number(resources.loops),
            "loop_local_ops": number(resources.loop_local_ops), "other_local_ops": number(resources.other_local_ops)}


def hardware_features(hw: Hardware, moved_bytes: float, flops: float) -> dict[str, float]:
    """The HARDWARE_FEATURES of a kernel moving `moved_bytes` and computing `flops` on `hw` (unknown figures NaN)."""
    def known(value: float, scale: float) -> float:
        return value / scale if value > 0 else math.nan

    peak16 = hw.peak("bfloat16")
    return {"hw_bandwidth_tbs": hw.bandwidth_bytes_per_s / 1e12, "hw_peak16_tflops": peak16 / 1e12,
            "hw_fp32_tflops": hw.elementwise_flops / 1e12, "hw_sms": float(hw.multiprocessors),
            "hw_smem_block_kib": hw.shared_memory_bytes / 1024,
            "hw_smem_sm_kib": known(hw.shared_memory_per_sm_bytes, 1024), "hw_l2_mib": hw.l2_bytes / 2**20,
            "hw_sm_clock_mhz": known(hw.sm_clock_mhz, 1.0), "hw_mem_clock_mhz": known(hw.memory_clock_mhz, 1.0),
            "hw_launch_us": float(hw.launch_us), "bytes_over_l2": moved_bytes / hw.l2_bytes,
            "intensity_over_ridge": flops / max(1.0, moved_bytes) / (peak16 / hw.bandwidth_bytes_per_s)}


def _analytic(ke: KernelEstimate, hw: Hardware) -> dict[str, float]:
    moved = ke.bytes_read + ke.bytes_written
    return {"bytes_read": float(ke.bytes_read), "bytes_written": float(ke.bytes_written),
            "reread_a": float(ke.reread_a), "reread_b": float(ke.reread_b), "flops": float(ke.flops),
            "arith_intensity": ke.flops / max(1, moved), ANALYTIC_FEATURE: float(ke.time_us),
            "memory_us": float(ke.memory_us), "compute_us": float(ke.compute_us), "waves": float(ke.waves),
            "tiles": float(ke.tiles), "tiles_per_sm": ke.tiles / hw.multiprocessors}


def plan_features(plan: Plan, hw: Hardware, resources: Sequence[KernelResources | None] | None = None
                  ) -> list[dict[str, float]]:
    """kernel_features of every kernel of `plan`, in plan order (the plan is priced once); `resources` per
    kernel when the plan was compiled for the GPU (codegen.resources.plan_resources)."""
    est = analytic_estimate(plan, hw)
    per_kernel = list(resources) if resources is not None else [None] * len(plan.kernels)
    return [kernel_features(plan, i, hw, est, per_kernel[i]) for i in range(len(plan.kernels))]


def recompute_features(rows: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Measured rows in this feature schema: rows of it as they are, older rows re-featured from the graph spec,
    plan and hardware profile they carry (so a schema change never discards measurements), with the compiled
    resources their plan's rows carry (`resources`, else NaN). Returns the rows and how many could not be
    re-featured (no graph, plan or profile, or ones this fusionsearch cannot read)."""
    out: list[dict[str, Any]] = []
    graphs: dict[str, OpGraph | None] = {}
    plans: dict[tuple[str, str], list[dict[str, float]] | None] = {}
    compiled: dict[tuple[str, str], dict[int, KernelResources]] = {}
    for r in rows:
        if isinstance(r.get("resources"), dict) and isinstance(r.get("kernel_index"), int):
            try:
                found = KernelResources(**r["resources"])
            except TypeError:
                continue
            compiled.setdefault((str(r.get("graph_id")), str(r.get("plan_id"))), {})[r["kernel_index"]] = found
    dropped = 0
    for r in rows:
        if r.get("schema_version") == FEATURE_SCHEMA_VERSION:
            out.append(dict(r))
            continue
        key = (str(r.get("graph_id")), str(r.get("plan_id")))
        if key not in plans:
            plans[key] = _features_of_row(r, graphs, compiled.get(key, {}))
        per_kernel, i = plans[key], r.get("kernel_index")
        if per_kernel is None or not isinstance(i, int) or not 0 <= i < len(per_kernel):
            dropped += 1
            continue
        out.append({**r, "schema_version": FEATURE_SCHEMA_VERSION, "features": per_kernel[i]})
    return out, dropped


def _features_of_row(row: Mapping[str, Any], graphs: dict[str, OpGraph | None],
                     compiled: Mapping[int, KernelResources]) -> list[dict[str, float]] | None:
    """plan_features of the plan a row carries, on the profile it was measured with, with the resources of
    its compiled kernels (by kernel index); None when unreadable."""
    hardware = row.get("hardware")
    if not (isinstance(row.get("graph"), dict) and isinstance(row.get("plan"), dict) and isinstance(hardware, dict)):
        return None
    gid = str(row.get("graph_id"))
    try:
        hw = Hardware.from_dict(hardware.get("profile"))
        if gid not in graphs:
            graphs[gid] = graph_from_dict(row["graph"], f"graph {gid}")
        g = graphs[gid]
        if g is None:
            return None
        plan = Plan.from_dict(row["plan"], g, None)  # measured rows: whatever tile they ran
        return plan_features(plan, hw, [compiled.get(i) for i in range(len(plan.kernels))])
    except (FusionSearchError, ValueError):
        graphs.setdefault(gid, None)
        return None


def library_rows(X: np.ndarray) -> np.ndarray:
    """Which rows are of kinds without a one-hot bit (KernelKind.onehot None): library matmuls (LibraryKernel),
    since no measured dataset holds one, and any kind registered without a bit. All their kind bits are zero,
    and the learned model, which never saw them, prices them by their kind's own analytic estimate
    (ANALYTIC_FEATURE) instead of by its own. (Decode kernels have a bit, and share the template's features on
    their own blocks: until measured rows of them exist, the trees, which never split on that bit, price them
    as the template of the same blocks.)"""
    onehots = {k.onehot for k in all_kinds() if k.onehot in FEATURE_NAMES}
    bits = [FEATURE_NAMES.index(name) for name in sorted(onehots, key=FEATURE_NAMES.index)]
    return ~X[:, bits].any(axis=1)


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
