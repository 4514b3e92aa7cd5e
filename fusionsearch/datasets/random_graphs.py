"""Random realistic matmul graphs: one to three matmuls (mm, bmm, addmm, linear) with the prologues and epilogues
real models put around them, shapes from real model families (or small awkward ones for the interpreter).

Deterministic per seed (one `random.Random`, no global RNG). Every graph validates and its reference on
`random_inputs` is finite: the generator tracks a rough range of every value and only draws an op whose input
is in its domain (exp on bounded values, log/sqrt/rsqrt on values >= 0.25), and scales a matmul operand by a
power of two when the product would leave the range float16 holds safely.

This module is the entry point; the generator's parts live in `fusionsearch.datasets.graphgen` (values,
shapes, builder, chains, matmuls, families).

>>> g = random_graph(3, shape_scale="small")
>>> graph_id(g) == graph_id(random_graph(3, shape_scale="small"))
True
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch

from fusionsearch.datasets.graphgen.attention import attention, attention_sizes
from fusionsearch.datasets.graphgen.builder import GraphBuilder
from fusionsearch.datasets.graphgen.families import build_graph
from fusionsearch.datasets.graphgen.moe import MOE_FORMS, moe_sizes, routed_moe
from fusionsearch.datasets.graphgen.rope import ROPE_FORMS, norm_qkv_rope, rope_sizes
from fusionsearch.datasets.graphgen.shapes import (
    REAL_BMM_K,
    REAL_BMM_M,
    REAL_BMM_N,
    REAL_KN,
    REAL_M,
    REAL_TABLE_ROWS,
    SMALL_MAX,
)
from fusionsearch.datasets.graphgen.values import COLLAPSE, FLOATS, PEAK_LIMIT, SATURATING_RMS
from fusionsearch.datasets.workloads import workload
from fusionsearch.errors import GraphError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.reference import random_inputs, reference
from fusionsearch.graph.registry import dtype_from_name
from fusionsearch.graph.tolerance import TOLERANCE, rel_error

__all__ = [
    "COLLAPSE", "DEFAULT_DTYPES", "FAMILIES", "INPUT_BYTES_LIMIT", "MAX_MATMULS", "PEAK_LIMIT", "REAL_BMM_K",
    "REAL_BMM_M", "REAL_BMM_N", "REAL_KN", "REAL_M", "REAL_TABLE_ROWS", "SATURATING_RMS", "SMALL_MAX", "graph_id",
    "families_of", "random_graph", "random_graphs",
]

INPUT_BYTES_LIMIT = 1 << 30  # bytes of all inputs together, so that a GPU measures a graph quickly
GATHERED_BYTES_LIMIT = 8 << 30  # an experts graph's gathered weights a matmul, as a plan that builds them writes
MAX_MATMULS = 3
FAMILIES = ("mixed", "experts", "decode", "moe", "norm_rope", "attention")
DECODE_WORKLOADS = ("w8_dequant_mm", "w8_linear", "w4_dequant_mm", "mm_bias_gelu", "gather_mm")
DEFAULT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def families_of(spec: object) -> tuple[str, ...]:
    """The families a collection draws, from "moe", "moe,attention" or "all" (every family); a GraphError names
    what to fix."""
    names = list(FAMILIES) if spec == "all" else str(spec).split(",") if isinstance(spec, str) else []
    names = [n.strip() for n in names]
    bad = [n for n in names if n not in FAMILIES]
    if not names or bad:
        raise GraphError(f"family must be 'all' or a comma-separated list of {', '.join(FAMILIES)}; "
                         f"got {spec!r}")
    return tuple(dict.fromkeys(names))


def graph_id(g: OpGraph) -> str:
    """A stable id of a graph's content (its signature hash)."""
    return g.signature_hash()


def random_graphs(n: int, seed: int = 0, **options: object) -> list[OpGraph]:
    """`n` random graphs, the i-th from seed `seed * 1_000_003 + i`; options as for `random_graph`."""
    return [random_graph(seed * 1_000_003 + i, **options) for i in range(n)]  # type: ignore[arg-type]


def random_graph(seed: int, *, max_matmuls: int = MAX_MATMULS, dtypes: Sequence[torch.dtype | str] = DEFAULT_DTYPES,
                 shape_scale: str = "real", family: str = "mixed") -> OpGraph:
    """A random realistic graph of 1..max_matmuls matmuls in one dtype drawn from `dtypes`.

    shape_scale "real": M, K, N from real model families, inputs under 1 GiB; "small": every dim in 1..80
    (1 and non-multiples of 16 included) for Triton's interpreter. family "mixed": the dense and batched
    families; "experts": a Mixtral-like mixture-of-experts FFN (the grouped matmul kind's graphs); "decode":
    1-16-row quantised matmuls; "moe": a routed MoE block (softmax/top-k router, gathered experts) in gpt-fast's
    or transformers' form; "norm_rope": RMSNorm -> q/k/v projections -> RoPE; "attention": q @ k^T * scale
    (+ mask) -> softmax -> @ v. A family draws only its own graphs from the seed: the older families' seeds give
    the graphs they gave before these were added (tests/datasets/test_random_graph_golden.py)."""
    if shape_scale not in ("real", "small"):
        raise GraphError(f"shape_scale must be 'real' or 'small', got {shape_scale!r}")
    if family not in FAMILIES:
        raise GraphError(f"family must be one of {', '.join(FAMILIES)}, got {family!r}")
    if isinstance(max_matmuls, bool) or not isinstance(max_matmuls, int) or max_matmuls < 1:
        raise GraphError(f"max_matmuls must be a positive integer, got {max_matmuls!r}")
    dts = tuple(dtype_from_name(d, "random_graph dtypes") for d in dtypes)
    if not dts or any(d not in FLOATS for d in dts):
        raise GraphError(f"dtypes must be some of bfloat16, float16, float32, got {list(dtypes)}")
    rng = random.Random(seed)
    if family == "experts":
        return _experts_graph(rng, dts, shape_scale == "small")
    if family == "decode":
        return _decode_graph(rng, dts, shape_scale == "small")
    if family in ("moe", "norm_rope", "attention"):
        return _model_block(family, rng, dts, shape_scale == "small")
    while True:  # redraw (from the same stream, so still deterministic) until the graph is fit for its use
        g = build_graph(GraphBuilder(rng, dts, shape_scale == "small"), min(max_matmuls, MAX_MATMULS))
        if shape_scale == "small" and _well_conditioned(g):
            return g.validate()
        if shape_scale == "real" and sum(g.node(n).nbytes for n in g.inputs) <= INPUT_BYTES_LIMIT:
            return g.validate()


def _experts_graph(rng: random.Random, dts: tuple[torch.dtype, ...], small: bool) -> OpGraph:
    """moe_ffn (gpt-fast's mixtral FFN: gathered expert weights, SiLU*up, routing-weighted sum of two experts)
    at decode (1-16) and prefill (64-512) token counts, on real widths whose inputs stay under INPUT_BYTES_LIMIT
    and whose gathered weights, which a plan running the gather on its own writes, under GATHERED_BYTES_LIMIT a
    matmul (the float64 reference runs each expert bmm per expert, graph.reference's replacement). Real widths
    are never float16: on N(0,1) inputs the output grows as D*sqrt(H) (SiLU(gate)*up ~ D, summed over H), past
    float16's 65504 at every width drawn, so each plan of such a graph is invalid (the collector measured 7 such
    graphs for nothing)."""
    usable = dts if small else tuple(d for d in dts if d != torch.float16)
    if not usable:
        raise GraphError("the experts family's real widths overflow float16; give bfloat16 or float32 among dtypes")
    dt = rng.choice(usable)
    while True:
        if small:
            shape = {"T": rng.randint(1, 20), "D": rng.randint(8, 64), "H": rng.randint(8, 64), "E": rng.randint(1, 6)}
        else:
            shape = {"T": rng.choice((1, 2, 4, 8, 16, 64, 128, 256, 512)), "D": rng.choice((1024, 2048, 4096)),
                     "H": rng.choice((1408, 2816, 5632)), "E": rng.choice((4, 8, 16))}
        weights = 3 * shape["E"] * shape["H"] * shape["D"] * dt.itemsize
        gathered = 2 * shape["T"] * shape["H"] * shape["D"] * dt.itemsize
        if small or (weights <= INPUT_BYTES_LIMIT and gathered <= GATHERED_BYTES_LIMIT):
            return workload("moe_ffn", dtype=dt, **shape).validate()


def _decode_graph(rng: random.Random, dts: tuple[torch.dtype, ...], small: bool) -> OpGraph:
    """One of the built-in decode workloads (DECODE_WORKLOADS) at 1-16 rows on real widths (K, N of REAL_KN,
    an int4 group of 32-128 that divides K), or at small awkward sizes for the interpreter: the weight-only
    quantised GEMVs whose bytes the decode kind is built around, so that the learned model sees int4 nibbles
    and int8 weights at decode sizes (the mixed family draws neither int4 nor many such shapes)."""
    while True:
        dt, name = rng.choice(dts), rng.choice(DECODE_WORKLOADS)
        if small:
            shape = {"M": rng.randint(1, 20), "K": 2 * rng.randint(1, SMALL_MAX // 2), "N": rng.randint(1, SMALL_MAX)}
        else:
            shape = {"M": rng.choice((1, 2, 4, 8, 16)), "K": rng.choice(REAL_KN), "N": rng.choice(REAL_KN)}
        if name == "w4_dequant_mm":
            groups = [g for g in ((2, 4, 8, 16) if small else (32, 64, 128)) if shape["K"] % g == 0]
            if not groups:
                continue
            shape["G"] = rng.choice(groups)
        elif name == "gather_mm":
            shape["T"] = rng.randint(1, SMALL_MAX) if small else rng.choice(REAL_TABLE_ROWS)
        g = workload(name, dtype=dt, **shape)
        if small and not _well_conditioned(g):
            continue
        if sum(g.node(n).nbytes for n in g.inputs) <= INPUT_BYTES_LIMIT:
            return g.validate()


def _model_block(family: str, rng: random.Random, dts: tuple[torch.dtype, ...], small: bool) -> OpGraph:
    """A block in the form real model code has (graphgen.moe, graphgen.rope, graphgen.attention), its form,
    dtype and sizes drawn until the graph fits its use: real inputs under INPUT_BYTES_LIMIT (and an MoE's gathered
    weights under GATHERED_BYTES_LIMIT a matmul, never float16 at real widths: the experts family's overflow);
    small graphs well conditioned for the interpreter."""
    usable = dts if small or family != "moe" else tuple(d for d in dts if d != torch.float16)
    if not usable:
        raise GraphError("the moe family's real widths overflow float16; give bfloat16 or float32 among dtypes")
    while True:
        dt = rng.choice(usable)
        if family == "moe":
            form, sizes = rng.choice(MOE_FORMS), moe_sizes(rng, small)
            g = routed_moe(form, dt, sizes)
            per_pair = (2 if form == "grouped" else 1) * sizes["H"] * sizes["D"] * dt.itemsize
            if not small and sizes["T"] * sizes["A"] * per_pair > GATHERED_BYTES_LIMIT:
                continue
        elif family == "norm_rope":
            g = norm_qkv_rope(rng.choice(ROPE_FORMS), dt, **rope_sizes(rng, small))
        else:
            g = attention(dt, **attention_sizes(rng, small))
        if small and not _well_conditioned(g):
            continue
        if sum(g.node(n).nbytes for n in g.inputs) <= INPUT_BYTES_LIMIT:
            return g


def _well_conditioned(g: OpGraph, margin: float = 0.8) -> bool:
    """Eager PyTorch in the graph's own dtypes is finite and within `margin` of validation's tolerance of the
    float64 reference. A few float16 graphs are not (rounding amplified where an op keeps a small part of a
    wide value: a relu of mostly negative values, a shift onto zero, a one-column product that cancels): no
    plan could validate them, so they test nothing. Small graphs only: it runs the graph."""
    inputs = random_inputs(g)
    outs, exact = reference(g, inputs), reference(g, inputs, float64=True)
    return all(rel_error(o, r) <= margin * TOLERANCE[o.dtype] for o, r in zip(outs, exact, strict=True))
