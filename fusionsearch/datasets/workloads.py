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
    Workload("gather_mm", "x[idx] @ w  (T rows in x)", _gather_mm, _gather_mm_torch,
             {"M": 64, "K": 4096, "N": 4096, "T": 4096}),
    Workload("mm_bias_gelu", "gelu(x @ w + b)", _mm_bias_gelu, _mm_bias_gelu_torch, {"M": 16, "K": 4096, "N": 4096}),
    Workload("cast_mm", "x_fp32.to(dtype) @ w", _cast_mm, _cast_mm_torch, {"M": 4096, "K": 4096, "N": 4096}),
    Workload("scale_mm", "(x * g[K]) @ w", _scale_mm, _scale_mm_torch, {"M": 4096, "K": 4096, "N": 4096}),
    Workload("swiglu", "(silu(x @ w1) * (x @ w3)) @ w2", _swiglu, _swiglu_torch, {"M": 16, "D": 4096, "H": 11008}),
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


def case_name(case: dict[str, Any]) -> str:
    """'gather_mm M64 K4096 N4096': a reference case as the anchors name it (a gather's table rows T left out)."""
    return f"{case['workload']} " + " ".join(f"{k}{v}" for k, v in case["shape"].items() if k != "T")


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
