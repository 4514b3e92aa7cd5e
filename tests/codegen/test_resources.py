"""Compiling generated kernels for the H200 (sm_90) on the CPU (codegen/resources.py): Triton lowers them and
its bundled ptxas assembles them, no GPU involved. The figures are checked against what does not come from
the compiler: the pipeline's shared memory as the analytic model counts it, a config whose fp32 accumulator
cannot fit in registers, a config too big for shared memory."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.codegen import resources
from fusionsearch.codegen.module import generate_module
from fusionsearch.codegen.resources import KernelResources, kernel_resources, plan_resources
from fusionsearch.costmodel.analytic import smem_bytes
from fusionsearch.costmodel.hardware import H200
from fusionsearch.errors import CodegenError
from fusionsearch.plan import Plan, TemplateKernel


def with_config(plan: Plan, **fields: int) -> Plan:
    return Plan(plan.graph, [dataclasses.replace(k, config=dataclasses.replace(k.config, **fields))
                             if isinstance(k, TemplateKernel) else k for k in plan.kernels], plan.recompute)


def test_a_bf16_template_uses_the_pipeline_shared_memory_the_analytic_model_counts() -> None:
    g = fs.workload("mm_bias_gelu", dtype=torch.bfloat16, M=512, K=1024, N=512)
    plan = with_config(P.unfused(g), block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3)
    found = plan_resources(plan)
    assert len(found) == len(plan.kernels) and found[1:] == [None] * (len(plan.kernels) - 1)  # pointwise: none
    template = found[0]
    assert template is not None
    assert template.shared_bytes == smem_bytes(plan.kernels[0].config, 2) == 3 * (128 * 64 + 64 * 128) * 2
    assert 32 < template.registers <= 255 and template.stack_bytes == 0


def test_an_fp32_accumulator_too_big_for_registers_spills_and_a_small_one_does_not() -> None:
    """fp32 operands run Triton's IEEE dot on the FMA units: a 256 x 128 tile on 4 warps holds 256 fp32
    accumulator values per thread, more than the 255 registers a thread has."""
    g = fs.workload("mm_bias_gelu", dtype=torch.float32, M=512, K=256, N=512)
    big = plan_resources(with_config(P.fully_fused(g), block_m=256, block_n=128, block_k=32, num_warps=4))[0]
    small = plan_resources(with_config(P.fully_fused(g), block_m=64, block_n=64, block_k=32, num_warps=4))[0]
    assert big is not None and small is not None
    assert big.registers == 255 and big.stack_bytes > 0
    assert small.stack_bytes == 0 and small.registers < 255
    # The machine code says where: the big tile's spill and fill run in its K loop, the small tile has none.
    assert big.loop_local_ops > 0 and small.loop_local_ops == small.other_local_ops == 0
    for k in (big, small):
        assert k.loops >= 1 and 0 < k.loop_instructions < k.instructions


def test_sass_figures_count_instructions_loops_and_spills_inside_and_outside_loops() -> None:
    """A listing as cuobjdump prints it: a loop from 0x0040 back-branching at 0x0070, a spill before it, a fill
    in it, and a branch forwards and a self-branch (the trailing trap), neither a loop."""
    listing = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;            /* 0x00000a0000017a02 */
        /*0010*/                   STL [R1+0x4], R20 ;               /* 0x0000041401007387 */
        /*0020*/              @!P0 BRA 0x90 ;                        /* 0x0000006000008947 */
        /*0040*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24 ;   /* 0x0 */
        /*0050*/                   LDL.LU R20, [R1+0x4] ;            /* 0x0000040001147983 */
        /*0060*/                   IADD3 R2, R2, 0x1, RZ ;           /* 0x0 */
        /*0070*/               @P1 BRA 0x40 ;                        /* 0xffffffc000001947 */
        /*0080*/                   STL [R1+0x8], R21 ;               /* 0x0 */
        /*0090*/                   EXIT ;                            /* 0x0 */
        /*00a0*/                   BRA 0xa0;                         /* 0x0 */
    """
    assert resources.sass_figures(listing) == {"instructions": 10, "loop_instructions": 4, "loops": 1,
                                               "loop_local_ops": 1, "other_local_ops": 2}
    with pytest.raises(CodegenError, match="no SASS"):
        resources.sass_figures("cuobjdump: nothing here")


def test_each_loop_is_counted_apart_and_a_nested_loop_inside_its_outer_one() -> None:
    """Two loops one after the other (a K loop, then a split-K tail's loop over the partials), the first with a
    loop nested in it: each outer loop's opcodes apart, the nested one's inside its outer one's, nothing between
    them; loop_opcodes counts both together."""
    listing = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;            /* 0x0 */
        /*0010*/                   HMMA.16816.F32.BF16 R24, R20, R16, R24 ;   /* 0x0 */
        /*0020*/                   FFMA R2, R2, R3, R4 ;             /* 0x0 */
        /*0030*/               @P2 BRA 0x20 ;                        /* 0x0 */
        /*0040*/               @P1 BRA 0x10 ;                        /* 0x0 */
        /*0050*/                   STG.E [R2], R4 ;                  /* 0x0 */
        /*0060*/                   LDG.E R4, [R2] ;                  /* 0x0 */
        /*0070*/                   FADD R5, R5, R4 ;                 /* 0x0 */
        /*0080*/               @P0 BRA 0x60 ;                        /* 0x0 */
        /*0090*/                   EXIT ;                            /* 0x0 */
    """
    k_loop, tail = resources.each_loop_opcodes(listing)
    assert k_loop == {"HMMA": 1, "FFMA": 1, "BRA": 2}
    assert tail == {"LDG": 1, "FADD": 1, "BRA": 1}
    assert resources.loop_opcodes(listing) == k_loop + tail


def test_a_config_beyond_the_shared_memory_shows_it() -> None:
    """Triton refuses such a kernel only when loading it on the GPU; its compiled figure already says so. Four
    stages of 128 x 128 and 128 x 128 bf16 tiles need 256 KiB, past the H200's 227 KiB (a 256 x 256 x 128 tile
    is too, but ptxas takes ~8 times as long over it)."""
    g = fs.workload("mm_bias_gelu", dtype=torch.bfloat16, M=512, K=1024, N=512)
    plan = with_config(P.fully_fused(g), block_m=128, block_n=128, block_k=128, num_stages=4)
    found = plan_resources(plan)[0]
    assert found is not None and found.shared_bytes == 4 * (128 * 128 + 128 * 128) * 2 > H200.shared_memory_bytes


def test_a_kernel_is_compiled_once_then_read_from_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    g = fs.workload("mm_bias_gelu", dtype=torch.bfloat16, M=64, K=128, N=64)
    generated = generate_module(P.fully_fused(g))
    calls = []

    def fake_compile(*args: object) -> KernelResources:
        calls.append(args)
        return KernelResources(registers=77, stack_bytes=8, shared_bytes=1024)

    monkeypatch.setattr(resources, "_compile", fake_compile)
    for _ in range(2):
        assert kernel_resources(g, generated.kernels[0], generated.source, arch=42) == KernelResources(77, 8, 1024)
    assert len(calls) == 1


def test_many_plans_are_compiled_in_worker_processes_like_one_at_a_time() -> None:
    from fusionsearch.codegen.resources import many_plan_resources

    g = fs.workload("mm_bias_gelu", dtype=torch.float16, M=64, K=128, N=64)
    # The third: a big tile whose accumulator spills (128 x 128 x 128 spills as 256 x 256 x 128 does, and ptxas
    # assembles it ~8 times faster)
    plans = [P.fully_fused(g), P.unfused(g), with_config(P.fully_fused(g), block_m=128, block_n=128, block_k=128,
                                                         num_stages=4)]
    assert many_plan_resources(plans, workers=2) == [plan_resources(p) for p in plans]
