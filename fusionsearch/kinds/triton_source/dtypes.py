"""Values with dtypes for code generation, and the rules for when arithmetic is upcast to fp32."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fusionsearch.errors import CodegenError

TL_DTYPES: dict[torch.dtype, str] = {
    torch.float32: "tl.float32",
    torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16",
    torch.float64: "tl.float64",
    torch.int8: "tl.int8",
    torch.uint8: "tl.uint8",
    torch.int16: "tl.int16",
    torch.int32: "tl.int32",
    torch.int64: "tl.int64",
    torch.bool: "tl.int1",
}
LOW_PRECISION = (torch.float16, torch.bfloat16)


def tl_dtype(dtype: torch.dtype) -> str:
    try:
        return TL_DTYPES[dtype]
    except KeyError:
        raise CodegenError(f"dtype {dtype} has no Triton form") from None


@dataclass(frozen=True)
class Value:
    """A generated variable: `dtype` is what it holds in registers, `logical` the graph dtype it stands for
    (they differ when a low-precision value is kept upcast in fp32)."""

    name: str
    dtype: torch.dtype
    logical: torch.dtype


def compute_dtype(out: torch.dtype, needs_fp32: bool, upcast: bool) -> torch.dtype:
    """fp32 for low-precision floats when the op needs libdevice or the kernel upcasts; else the output dtype."""
    if out in LOW_PRECISION and (needs_fp32 or upcast):
        return torch.float32
    return out


def convert(expr: str, src: torch.dtype, dst: torch.dtype) -> str:
    """Source converting `expr` from `src` to `dst` with torch's semantics (to bool means != 0)."""
    if src == dst:
        return expr
    if dst == torch.bool:
        return f"({expr} != 0)"
    return f"{expr}.to({tl_dtype(dst)})"
