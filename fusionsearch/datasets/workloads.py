"""The built-in workload library: the reference cases of shared/anchors, shapes and dtype as parameters.

Each workload has a graph builder and its plain PyTorch form (used by `capture` tests and benchmarks)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from fusionsearch.errors import GraphError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.registry import dtype_from_name, dtype_name, show


def _w8_dequant_mm(dt: torch.dtype, M: int, K: int, N: int) -> OpGraph:
    g = OpGraph()
    x, w, s = g.input("x", (M, K), dt), g.input("w", (K, N), torch.int8), g.input("s", (N,), dt)
    wb = g.add("cast", [w], name="w_dequant", dtype=dtype_name(dt))
    ws = g.add("mul", [wb, s], name="w_scaled")
    g.set_outputs([g.add("mm", [x, ws], name="y")])
    return g


def _w8_dequant_mm_torch(x: torch.Tensor, w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return x @ (w.to(x.dtype) * s)


def _w8_linear(dt: torch.dtype, M: int, K: int, N: int) -> OpGraph:
    """gpt-fast's WeightOnlyInt8Linear and torchao's int8 weight-only form: the weight [N, K] cast, transposed
    by F.linear, and the per-column scale applied after the matmul, as fs.capture records it."""
    g = OpGraph()
    x, w, s = g.input("x", (M, K), dt), g.input("w", (N, K), torch.int8), g.input("s", (N,), dt)
    wt = g.add("transpose", [g.add("cast", [w], name="w_cast", dtype=dtype_name(dt))], name="w_t", dim0=0, dim1=1)
    g.set_outputs([g.add("mul", [g.add("mm", [x, wt], name="mm"), s], name="y")])
    return g


def _w8_linear_torch(x: torch.Tensor, w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return F.linear(x, w.to(x.dtype)) * s


def _gather_mm(dt: torch.dtype, M: int, K: int, N: int, T: int) -> OpGraph:
    g = OpGraph()
    x, idx, w = g.input("x", (T, K), dt), g.input("idx", (M,), torch.int64), g.input("w", (K, N), dt)
    rows = g.add("index", [x, idx], name="x_rows")
    g.set_outputs([g.add("mm", [rows, w], name="y")])
    return g


def _gather_mm_torch(x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x[idx] @ w


def _mm_bias_gelu(dt: torch.dtype, M: int, K: int, N: int) -> OpGraph:
    g = OpGraph()
    x, w, b = g.input("x", (M, K), dt), g.input("w", (K, N), dt), g.input("b", (N,), dt)
    y = g.add("mm", [x, w], name="y")
    z = g.add("add", [y, b], name="y_bias")
    g.set_outputs([g.add("gelu", [z], name="out", approximate="none")])
    return g


def _mm_bias_gelu_torch(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.gelu(x @ w + b)


def _cast_mm(dt: torch.dtype, M: int, K: int, N: int) -> OpGraph:
    g = OpGraph()
    x, w = g.input("x", (M, K), torch.float32), g.input("w", (K, N), dt)
    # x.to(float32) of a float32 tensor records no op in PyTorch: no cast node either.
    xc = x if dt == torch.float32 else g.add("cast", [x], name="x_cast", dtype=dtype_name(dt))
    g.set_outputs([g.add("mm", [xc, w], name="y")])
    return g


def _cast_mm_torch(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x.to(w.dtype) @ w


def _scale_mm(dt: torch.dtype, M: int, K: int, N: int) -> OpGraph:
    g = OpGraph()
    x, gain, w = g.input("x", (M, K), dt), g.input("g", (K,), dt), g.input("w", (K, N), dt)
    xs = g.add("mul", [x, gain], name="x_scaled")
    g.set_outputs([g.add("mm", [xs, w], name="y")])
    return g


def _scale_mm_torch(x: torch.Tensor, g: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x * g) @ w


def _swiglu(dt: torch.dtype, M: int, D: int, H: int) -> OpGraph:
    g = OpGraph()
    x = g.input("x", (M, D), dt)
    w1, w3, w2 = g.input("w1", (D, H), dt), g.input("w3", (D, H), dt), g.input("w2", (H, D), dt)
    gate = g.add("mm", [x, w1], name="gate")
    up = g.add("mm", [x, w3], name="up")
    act = g.add("silu", [gate], name="gate_silu")
    h = g.add("mul", [act, up], name="hidden")
    g.set_outputs([g.add("mm", [h, w2], name="y")])
    return g


def _swiglu_torch(x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return (F.silu(x @ w1) * (x @ w3)) @ w2


def _per_group(g: OpGraph, p: str, K: int, N: int, G: int) -> str:
    """A per-group parameter [K/G, N] repeated over its group's G rows: [K, N] (an index map, no copy)."""
    rows = g.add("unsqueeze", [p], name=f"{p}_rows", dim=1)
    groups = g.add("expand", [rows], name=f"{p}_groups", shape=[K // G, G, N])
    return g.add("view", [groups], name=f"{p}_k", shape=[K, N])


def _w4_dequant_mm(dt: torch.dtype, M: int, K: int, N: int, G: int) -> OpGraph:
    """The int4 unpack as real code writes it: each byte's two nibbles by constant shifts, stacked into K's pairs
    (a runtime tensor of shift amounts would cost the decode kernel 7.4 us at 16 rows on the H100: Triton then
    sends every dequantised B tile through shared memory, benchmarks/results/h100-2026-12-06m-groups-form)."""
    if K % G or G % 2:
        raise GraphError(f"workload 'w4_dequant_mm': the group G={G} must be even and divide K={K}")
    g = OpGraph()
    x, w = g.input("x", (M, K), dt), g.input("w", (K // 2, N), torch.uint8)
    scales, zeros = g.input("scales", (K // G, N), dt), g.input("zeros", (K // G, N), dt)
    high = g.add("bitwise_and", [g.add("bitwise_right_shift", [w], name="w_shifted", scalar=4)], name="w_high",
                 scalar=15)
    low = g.add("bitwise_and", [w], name="w_low", scalar=15)
    pairs = g.add("stack", [high, low], name="w_pairs", dim=1)  # k = 2 * row + (0: high nibble, 1: low)
    q = g.add("view", [pairs], name="w_int4", shape=[K, N])
    qf = g.add("cast", [q], name="w_float", dtype=dtype_name(dt))
    centered = g.add("sub", [qf], name="w_centered", scalar=8)
    scaled = g.add("mul", [centered, _per_group(g, scales, K, N, G)], name="w_scaled")
    wd = g.add("add", [scaled, _per_group(g, zeros, K, N, G)], name="w_dequant")
    g.set_outputs([g.add("mm", [x, wd], name="y")])
    return g


def _w4_dequant_mm_torch(x: torch.Tensor, w: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor) -> torch.Tensor:
    (K2, N), G = w.shape, x.shape[1] // scales.shape[0]
    q = torch.stack([(w >> 4) & 15, w & 15], dim=1).reshape(2 * K2, N)
    s = scales.unsqueeze(1).expand(-1, G, -1).reshape(2 * K2, N)
    z = zeros.unsqueeze(1).expand(-1, G, -1).reshape(2 * K2, N)
    return x @ ((q.to(x.dtype) - 8) * s + z)


def _moe_ffn(dt: torch.dtype, T: int, D: int, H: int, E: int) -> OpGraph:
    g = OpGraph()
    x, idx, rw = g.input("x", (T, D), dt), g.input("idx", (T, 2), torch.int64), g.input("rw", (T, 2), dt)
    w1, w3, w2 = g.input("w1", (E, H, D), dt), g.input("w3", (E, H, D), dt), g.input("w2", (E, D, H), dt)
    # einsum('ti,taoi->tao'): per token, its row against both chosen experts' [H, D] weights at once.
    acts = []
    for w, what in ((w1, "gate"), (w3, "up")):
        picked = g.add("index", [w, idx], name=f"{w}_picked")
        flat = g.add("view", [picked], name=f"{w}_flat", shape=[T, 2 * H, D])
        wt = g.add("transpose", [flat], name=f"{w}_t", dim0=1, dim1=2)
        rows = g.add("view", [x], name=f"x_{what}", shape=[T, 1, D])
        acts.append(g.add("bmm", [rows, wt], name=what))
    h = g.add("mul", [g.add("silu", [acts[0]], name="gate_silu"), acts[1]], name="hidden")
    # einsum('tao,taio->tai'): per (token, expert) pair.
    pair_rows = g.add("view", [h], name="hidden_pairs", shape=[2 * T, 1, H])
    picked = g.add("index", [w2, idx], name="w2_picked")
    w2t = g.add("transpose", [g.add("view", [picked], name="w2_flat", shape=[2 * T, D, H])], name="w2_t",
                dim0=1, dim1=2)
    e = g.add("view", [g.add("bmm", [pair_rows, w2t], name="down")], name="expert_out", shape=[T, 2, D])
    # einsum('tai,ta->ti'): routing-weighted sum over the pair, as the sum of its two slices.
    weighted = g.add("mul", [e, g.add("unsqueeze", [rw], name="rw_col", dim=2)], name="weighted")
    halves = [g.add("slice", [weighted], name=f"expert{a}", dim=1, start=a, end=a + 1, step=1) for a in (0, 1)]
    y = g.add("add", halves, name="combined")
    g.set_outputs([g.add("view", [y], name="y", shape=[T, D])])
    return g


def _moe_ffn_torch(x: torch.Tensor, idx: torch.Tensor, rw: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor,
                   w2: torch.Tensor) -> torch.Tensor:
    """gpt-fast mixtral's ConditionalFeedForward and MOEFeedForward's weighting, its einsums spelled as the bmms
    they lower to: silu(einsum('ti,taoi->tao', x, w1[idx])) * einsum(.., w3[idx]), then 'tao,taio->tai' with
    w2[idx], then 'tai,ta->ti' with the routing weights."""
    (T, D), H = x.shape, w1.shape[1]
    gate = torch.bmm(x.view(T, 1, D), w1[idx].view(T, 2 * H, D).transpose(1, 2))
    up = torch.bmm(x.view(T, 1, D), w3[idx].view(T, 2 * H, D).transpose(1, 2))
    hidden = (F.silu(gate) * up).view(2 * T, 1, H)
    expert_out = torch.bmm(hidden, w2[idx].view(2 * T, D, H).transpose(1, 2)).view(T, 2, D)
    weighted = expert_out * rw.unsqueeze(2)
    return (weighted[:, 0:1] + weighted[:, 1:2]).view(T, D)


@dataclass(frozen=True)
class Workload:
    """A named graph family: builder, PyTorch form, default shape (from the reference figures)."""

    name: str
    summary: str
    build: Callable[..., OpGraph]
    torch_fn: Callable[..., torch.Tensor]
    defaults: dict[str, int]


WORKLOADS: dict[str, Workload] = {w.name: w for w in [
    Workload("w8_dequant_mm", "x @ (w_int8.to(dtype) * s[N])", _w8_dequant_mm, _w8_dequant_mm_torch,
             {"M": 16, "K": 8192, "N": 8192}),
    Workload("w8_linear", "F.linear(x, w_int8[N,K].to(dtype)) * s[N]  (gpt-fast, torchao: the scale after)",
             _w8_linear, _w8_linear_torch, {"M": 1, "K": 4096, "N": 12288}),
    Workload("gather_mm", "x[idx] @ w  (T rows in x)", _gather_mm, _gather_mm_torch,
             {"M": 64, "K": 4096, "N": 4096, "T": 4096}),
    Workload("mm_bias_gelu", "gelu(x @ w + b)", _mm_bias_gelu, _mm_bias_gelu_torch, {"M": 16, "K": 4096, "N": 4096}),
    Workload("cast_mm", "x_fp32.to(dtype) @ w", _cast_mm, _cast_mm_torch, {"M": 4096, "K": 4096, "N": 4096}),
    Workload("scale_mm", "(x * g[K]) @ w", _scale_mm, _scale_mm_torch, {"M": 4096, "K": 4096, "N": 4096}),
    Workload("swiglu", "(silu(x @ w1) * (x @ w3)) @ w2", _swiglu, _swiglu_torch, {"M": 16, "D": 4096, "H": 11008}),
    Workload("w4_dequant_mm", "x @ ((stack(w >> 4 & 15, w & 15) - 8) * s[K/G,N] + z[K/G,N]), w [K/2,N] uint8 nibbles",
             _w4_dequant_mm, _w4_dequant_mm_torch, {"M": 16, "K": 4096, "N": 11008, "G": 128}),
    Workload("moe_ffn", "Mixtral MoE FFN, top-2: sum_a rw[t,a] * w2[idx] @ (silu(w1[idx] @ x) * (w3[idx] @ x))",
             _moe_ffn, _moe_ffn_torch, {"T": 16, "D": 4096, "H": 14336, "E": 8}),
]}

# The cases measured in shared/anchors/README.md (H200, bf16): workload, shape, and the figures in µs.
REFERENCE_CASES: list[dict[str, Any]] = [
    {"workload": "w8_dequant_mm", "shape": {"M": 16, "K": 8192, "N": 8192},
     "floor_us": 15.8, "eager_us": 375.9, "inductor_us": 94.7, "max_autotune_us": 94.9},
    {"workload": "w8_dequant_mm", "shape": {"M": 4096, "K": 4096, "N": 4096},
     "floor_us": 194.6, "eager_us": 271.7, "inductor_us": 201.9, "max_autotune_us": 201.3},
    {"workload": "gather_mm", "shape": {"M": 4096, "K": 4096, "N": 4096},
     "floor_us": 194.6, "eager_us": 208.4, "inductor_us": 197.0, "max_autotune_us": 204.8},
    {"workload": "gather_mm", "shape": {"M": 64, "K": 4096, "N": 4096},
     "floor_us": 8.1, "eager_us": 20.3, "inductor_us": 59.1, "max_autotune_us": 23.1},
    {"workload": "mm_bias_gelu", "shape": {"M": 16, "K": 4096, "N": 4096},
     "floor_us": 7.9, "eager_us": 25.3, "inductor_us": 22.1, "max_autotune_us": 22.6},
    {"workload": "mm_bias_gelu", "shape": {"M": 4096, "K": 4096, "N": 4096},
     "floor_us": 194.6, "eager_us": 246.3, "inductor_us": 216.4, "max_autotune_us": 212.6},
    {"workload": "cast_mm", "shape": {"M": 4096, "K": 4096, "N": 4096},
     "floor_us": 194.6, "eager_us": 221.6, "inductor_us": 212.1, "max_autotune_us": 211.1},
    {"workload": "scale_mm", "shape": {"M": 4096, "K": 4096, "N": 4096},
     "floor_us": 194.6, "eager_us": 231.4, "inductor_us": 203.9, "max_autotune_us": 206.3},
    {"workload": "swiglu", "shape": {"M": 16, "D": 4096, "H": 11008},
     "floor_us": 63.4, "eager_us": 95.2, "inductor_us": 92.5, "max_autotune_us": 113.6},
    {"workload": "swiglu", "shape": {"M": 2048, "D": 4096, "H": 11008},
     "floor_us": 784.5, "eager_us": 902.5, "inductor_us": 878.4, "max_autotune_us": 838.4},
]


# The decode-sized rows issue 27 adds to the suite (no anchor figures: every figure comes from the suite's own
# run): int8 weight-only at 1 and 4 rows (the scale on the weight), gpt-fast's int8 linear (the scale after the
# matmul) at Llama-2-7B's wqkv at 1 row and w2 at 16, int4 group-dequant at 1 and 16, Mixtral's MoE FFN at 1,
# 16, 512 tokens.
DECODE_CASES: list[dict[str, Any]] = [
    {"workload": "w8_dequant_mm", "shape": {"M": 1, "K": 8192, "N": 8192}},
    {"workload": "w8_dequant_mm", "shape": {"M": 4, "K": 8192, "N": 8192}},
    {"workload": "w8_linear", "shape": {"M": 1, "K": 4096, "N": 12288}},
    {"workload": "w8_linear", "shape": {"M": 16, "K": 11008, "N": 4096}},
    {"workload": "w4_dequant_mm", "shape": {"M": 1, "K": 4096, "N": 11008, "G": 128}},
    {"workload": "w4_dequant_mm", "shape": {"M": 16, "K": 4096, "N": 11008, "G": 128}},
    {"workload": "moe_ffn", "shape": {"T": 1, "D": 4096, "H": 14336, "E": 8}},
    {"workload": "moe_ffn", "shape": {"T": 16, "D": 4096, "H": 14336, "E": 8}},
    {"workload": "moe_ffn", "shape": {"T": 512, "D": 4096, "H": 14336, "E": 8}},
]
SUITE_CASES = REFERENCE_CASES + DECODE_CASES  # benchmarks/suite.py's rows, by index


def case_name(case: dict[str, Any]) -> str:
    """'gather_mm M64 K4096 N4096': a reference case as the anchors name it (a gather's table rows T left out;
    the MoE's T is its tokens, kept)."""
    keep = case["workload"] != "gather_mm"
    return f"{case['workload']} " + " ".join(f"{k}{v}" for k, v in case["shape"].items() if k != "T" or keep)


def list_workloads() -> list[str]:
    """Names of the built-in workloads."""
    return list(WORKLOADS)


def get_workload(name: str) -> Workload:
    if not isinstance(name, str) or name not in WORKLOADS:
        raise GraphError(f"unknown workload {show(name)}; built-in workloads: {', '.join(WORKLOADS)}")
    return WORKLOADS[name]


def workload(name: str, dtype: torch.dtype | str = torch.bfloat16, **shape: int) -> OpGraph:
    """Build a built-in workload's graph; shape parameters default to its reference shape."""
    w = get_workload(name)
    unknown = set(shape) - set(w.defaults)
    if unknown:
        raise GraphError(f"workload {name!r} has no shape parameter(s) {sorted(unknown)}; "
                         f"it takes {', '.join(w.defaults)}")
    full = {**w.defaults, **shape}
    for key, value in full.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise GraphError(f"workload {name!r}: shape parameter {key}={show(value)} must be a positive integer")
    return w.build(dtype_from_name(dtype, f"workload {name!r}"), **full)
