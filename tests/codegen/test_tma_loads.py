"""TMA operand loads (codegen option `tma_loads`): operand tiles of contiguous 2-D tensors read through
device-side tensor descriptors instead of pointer loads. Triton's interpreter runs descriptor loads (zero
padding past the tensor's edge included), so the generated kernels are checked here against the float64
reference; whether they pay is measured on the GPU (benchmarks/tile_sweep_gpu.py)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.codegen.runtime import compile_plan
from fusionsearch.graph import OpGraph
from fusionsearch.measure import validate
from fusionsearch.plan import Plan, TemplateKernel


def with_config(plan: Plan, **fields: int) -> Plan:
    return Plan(plan.graph, [dataclasses.replace(k, config=dataclasses.replace(k.config, **fields))
                             if isinstance(k, TemplateKernel) else k for k in plan.kernels], plan.recompute)


CASES = [  # (workload, shape, descriptors the fully fused plan reads)
    ("w8_dequant_mm", {"M": 5, "K": 96, "N": 48}, 2),      # int8 weight through the dequant prologue, and x
    ("mm_bias_gelu", {"M": 7, "K": 64, "N": 40}, 2),       # uneven M and N: the descriptor pads with zeros
    ("gather_mm", {"M": 6, "K": 64, "N": 48}, 1),          # gathered rows of A stay pointer loads; B does not
    ("swiglu", {"M": 3, "D": 32, "H": 48}, 6),
    ("scale_mm", {"M": 9, "K": 48, "N": 32}, 2),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("name,shape,descriptors", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("split,serial", [(1, True), (2, True), (2, False)], ids=["sk1", "serial-sk2", "sk2"])
def test_descriptor_loads_match_the_reference(name: str, shape: dict[str, int], descriptors: int,
                                              dtype: torch.dtype, split: int, serial: bool) -> None:
    g = fs.workload(name, dtype=dtype, **shape)
    plan = with_config(P.fully_fused(g), block_m=16, block_n=16, block_k=16, split_k=split)
    compiled = compile_plan(plan, tma_loads=True, serial_split_k=serial)
    assert compiled.source.count("tl.make_tensor_descriptor(") == descriptors
    v = validate(plan, g, tma_loads=True, serial_split_k=serial)
    assert v.ok, v.reason


def test_a_linear_weight_is_read_transposed() -> None:
    g = OpGraph()
    x = g.input("x", (6, 40), torch.float32)
    w = g.input("w", (24, 40), torch.float32)
    g.set_outputs([g.add("linear", [x, w])])
    plan = with_config(P.unfused(g), block_m=16, block_n=16, block_k=16)
    assert ".T\n" in compile_plan(plan, tma_loads=True).source
    assert validate(plan, g, tma_loads=True).ok


def test_only_contiguous_rows_of_whole_16_bytes_use_descriptors() -> None:
    """A column-major weight, and a weight whose rows are 12 fp16 values (24 bytes): pointer loads."""
    g = OpGraph()
    x = g.input("x", (8, 32), torch.float16)
    w = g.input("w", (32, 12), torch.float16)                 # 24-byte rows
    wt = g.input("wt", (32, 16), torch.float16, strides=[1, 32])  # column-major
    g.set_outputs([g.add("mm", [x, w]), g.add("mm", [x, wt])])
    plan = with_config(P.unfused(g), block_m=16, block_n=16, block_k=16)
    src = compile_plan(plan, tma_loads=True).source
    assert src.count("tl.make_tensor_descriptor(") == 2  # x, once per matmul kernel
    assert validate(plan, g, tma_loads=True).ok


def test_a_misaligned_input_is_refused_by_name() -> None:
    g = fs.workload("mm_bias_gelu", dtype=torch.float32, M=8, K=32, N=16)
    x, w, b = fs.random_inputs(g, seed=0)
    shifted = torch.empty(w.numel() + 1)[1:].view(w.shape)  # 4 bytes past a 16-byte boundary
    shifted.copy_(w)
    run = compile_plan(P.fully_fused(g), tma_loads=True)
    with pytest.raises(ValueError, match="input 1 through a TMA descriptor: it must be contiguous and 16-byte aligned"):
        run(x, shifted, b)
    assert torch.allclose(run(x, w, b)[0], compile_plan(P.fully_fused(g))(x, w, b)[0])
