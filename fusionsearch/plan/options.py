"""The code generator's options, part of the plan: a plan file then replays the very source it was timed with."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from fusionsearch.errors import PlanError, SpecError
from fusionsearch.graph.registry import show

# tl.dot's input precision for fp32 operands: exact fp32 products on the FMA units (eager PyTorch's), or the
# tensor cores in three tf32 products or one.
FP32_DOTS = {"ieee": "ieee", "tf32x3": "tf32x3", "tf32": "tf32"}
# The default. Dataset rows record it (`fp32_dot`), and the cost model trains on the rows measured with it.
FP32_DOT = "tf32x3"


@dataclass(frozen=True)
class CodegenOptions:
    """How the plan's kernels are written (not what they compute): upcasts to fp32, split-K's one launch, TMA loads,
    persistent tiles, the epilogue in two halves, warp specialisation, fp32 dot precision.

    `upcast_*`: low-precision arithmetic of prologues / epilogues / pointwise kernels done in fp32. A split-K matmul
    is one launch (`serial_split_k`: its tile's last split sums the partials and runs the epilogue);
    `serial_split_k=False` gives the two-kernel form (partials, then a reduce kernel). On the H200 the one launch
    lowered do_bench time in 10 of 12 plans measured (benchmarks/results/h200-2026-12-03-launch-overhead/).
    `tma_loads`: operand tiles of contiguous 2-D tensors read through TMA tensor descriptors (Hopper and later);
    such inputs must be 16-byte aligned. `persistent`: templates without split-K launch one program per
    multiprocessor, each looping over tiles (so one tile's epilogue and stores can overlap the next tile's loads).
    `split_epilogue`: each template finishes its output tile in two column halves (fewer live registers: no spill
    where a whole-tile GELU epilogue spills). `warp_specialize`: persistent templates loop over tiles in Triton's
    warp-specialised loop (load and MMA warps apart) instead of the flattened one. `scale_after_dot` (the decode
    kind): a prologue's closing multiplies (or divisions) by values constant along K (w8's per-column scale) are
    applied to the accumulator after the K loop instead of to every weight element (scale_after_dot.py). `fp32_dot`:
    how matmuls of fp32 operands multiply: "tf32x3" (default since 2026-12-04: each operand split into two tf32
    parts, three tensor-core products; within 7e-7 of float64 on the H200 where eager's exact fp32 is within
    1.6e-6), "ieee" (exact fp32 products on the FMA units, as eager PyTorch: over 1,629 measured fp32 templates
    slower in 74%, 2.3x in geometric mean, up to 106x with a prologue feeding the dot) or "tf32" (one tensor-core
    product, about 10 mantissa bits: 8e-4, fails the fp32 tolerance); benchmarks/results/h200-2026-12-04c-fp32-dot/."""

    upcast_prologue: bool = False
    upcast_epilogue: bool = True
    upcast_pointwise: bool = True
    serial_split_k: bool = True
    tma_loads: bool = False
    persistent: bool = False
    split_epilogue: bool = False
    warp_specialize: bool = False
    scale_after_dot: bool = True
    fp32_dot: str = FP32_DOT

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "fp32_dot":
                if value not in FP32_DOTS:
                    raise PlanError(f"codegen option fp32_dot must be one of {', '.join(FP32_DOTS)}, got {show(value)}")
            elif not isinstance(value, bool):
                raise PlanError(f"codegen option {f.name} must be true or false, got {show(value)}")
        # Here, where every CodegenOptions is made, so that a plan file is refused when read (by explain as by
        # run), not when its source is generated.
        if self.warp_specialize and not self.persistent:
            raise PlanError("codegen option warp_specialize splits a persistent template's tile loop: it needs "
                            "persistent=True")

    def with_overrides(self, **overrides: Any) -> CodegenOptions:
        """These options with some replaced; an unknown name is refused (it would be dropped silently)."""
        unknown = set(overrides) - {f.name for f in fields(self)}
        if unknown:
            raise PlanError(f"unknown codegen option(s) {', '.join(sorted(unknown))}; known: "
                            f"{', '.join(f.name for f in fields(self))}")
        return replace(self, **overrides)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(data: Any, where: str = "plan") -> CodegenOptions:
        if not isinstance(data, dict):
            raise SpecError(f"{where}: 'options' must be an object")
        unknown = set(data) - {f.name for f in fields(CodegenOptions)}
        if unknown:
            raise SpecError(f"{where}: unknown codegen option(s) {show(sorted(unknown))}")
        return CodegenOptions(**data)
