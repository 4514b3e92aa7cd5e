"""Direct launches (codegen/module.py): after the first call, `run` hands each kernel's arguments straight to
its compiled launcher instead of going through `kernel[grid](...)`.

On the GPU the launcher is Triton's C launcher, which takes every parameter's value in order and skips the
constexprs. Here, in the interpreter, a stand-in compiled kernel does what that launcher does with the
arguments it is given: it pairs them with the kernel's parameter names, in order, and runs the kernel with
them. So these tests fail if the direct call passes an argument out of order, drops one, passes a constexpr
in the wrong place or launches the wrong kernel at a site: the outputs are checked against the float64
reference, after a first call that went through `kernel[grid]`."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.codegen.runtime import compile_plan
from fusionsearch.measure import TOLERANCE, rel_error
from fusionsearch.plan import Plan, TemplateKernel


class StandInCompiled:
    """What `kernel[grid](...)` returns on the GPU, for the interpreter: `run` takes the launcher's arguments."""

    def __init__(self, kernel: Any, num_warps: int, log: list[str]) -> None:
        self.kernel, self.num_warps, self.log = kernel, num_warps, log
        self.function, self.packed_metadata = object(), object()

    def run(self, gx: int, gy: int, gz: int, stream: object, function: object, metadata: object,
            launch_metadata: object, enter_hook: object, exit_hook: object, *args: Any) -> None:
        assert stream == "STREAM" and function is self.function and metadata is self.packed_metadata
        assert launch_metadata is None and enter_hook is None and exit_hook is None
        names = self.kernel.arg_names
        assert len(args) == len(names), f"{len(args)} arguments for {len(names)} parameters"
        self.log.append("direct")
        self.kernel[(gx, gy, gz)](**dict(zip(names, args, strict=True)), num_warps=self.num_warps)


class Recording:
    """A generated kernel whose `kernel[grid](...)` runs it and returns a stand-in compiled kernel."""

    def __init__(self, kernel: Any, log: list[str]) -> None:
        self.kernel, self.log = kernel, log

    def __getitem__(self, grid: tuple[int, int, int]) -> Any:
        def launch(*args: Any, num_warps: int = 4, num_stages: int = 3, **constexprs: Any) -> StandInCompiled:
            self.log.append("triton")
            self.kernel[grid](*args, **constexprs, num_warps=num_warps, num_stages=num_stages)
            return StandInCompiled(self.kernel, num_warps, self.log)

        return launch


def compile_direct(plan: Plan, log: list[str], **options: Any) -> Any:
    """The plan compiled, its module set to launch directly on CPU tensors, its launches logged in `log`."""
    compiled = compile_plan(plan, **options)
    mod = compiled.module
    mod._FAST_LAUNCH, mod._FAST_DEVICES, mod._LAUNCHED = True, ("cpu",), {}
    mod._stream = lambda device: "STREAM"
    for name in [n for n in vars(mod) if n.startswith("fs_kernel_")]:
        setattr(mod, name, Recording(getattr(mod, name), log))
    return compiled


def with_split(g: Any, split: int) -> Plan:
    base = P.heuristic(g)
    return Plan(g, [dataclasses.replace(k, config=dataclasses.replace(k.config, split_k=split, block_k=32))
                    if isinstance(k, TemplateKernel) else k for k in base.kernels], base.recompute)


CASES = [
    ("w8_dequant_mm", {"M": 5, "K": 96, "N": 40}, 1, False),   # int8 dequant prologue
    ("w8_dequant_mm", {"M": 5, "K": 128, "N": 40}, 2, False),  # split-K: a workspace and a reduce kernel
    ("mm_bias_gelu", {"M": 7, "K": 128, "N": 48}, 4, True),    # serial split-K: workspace and counters
    ("swiglu", {"M": 3, "D": 64, "H": 96}, 1, False),          # three matmuls, one with an epilogue
    ("gather_mm", {"M": 6, "K": 64, "N": 40}, 1, False),       # a row gather prologue
]


@pytest.mark.parametrize("name,shape,split,serial", CASES, ids=[f"{c[0]}-sk{c[2]}{'-serial' * c[3]}" for c in CASES])
def test_direct_launches_compute_what_the_first_call_did(name: str, shape: dict[str, int], split: int,
                                                         serial: bool) -> None:
    log: list[str] = []
    g = fs.workload(name, dtype=torch.float32, **shape)
    plan = with_split(g, split)
    compiled = compile_direct(plan, log, serial_split_k=serial)
    inputs = fs.random_inputs(g, seed=3)
    exact = fs.reference(g, inputs, float64=True)
    first = compiled(*inputs)
    sites = log.count("triton")
    assert sites >= 1 and "direct" not in log
    log.clear()
    for _ in range(2):  # poisoned outputs: a kernel the direct path failed to launch leaves NaN
        got = compiled(*inputs, poison=True)
        assert log == ["direct"] * sites
        log.clear()
        for o, f, e in zip(got, first, exact, strict=True):
            assert torch.equal(o, f)
            assert rel_error(o, e) <= TOLERANCE[torch.float32]


def test_a_new_layout_goes_through_triton_again() -> None:
    """Strides are part of what Triton specialises on: a transposed-storage input of the same shape gets
    a launch of its own through `kernel[grid]`, then its own direct launches; both are right."""
    log: list[str] = []
    g = fs.workload("mm_bias_gelu", dtype=torch.float32, M=8, K=64, N=48)
    compiled = compile_direct(P.heuristic(g), log)
    x, w, b = fs.random_inputs(g, seed=4)
    w_t = w.t().contiguous().t()  # same values and shape, column-major storage
    assert w_t.stride() != w.stride()
    compiled(x, w, b)
    compiled(x, w, b)
    assert log == ["triton", "direct"]
    log.clear()
    for _ in range(2):
        got = compiled(x, w_t, b, poison=True)[0]
        assert rel_error(got, fs.reference(g, [x, w, b], float64=True)[0]) <= TOLERANCE[torch.float32]
    assert log == ["triton", "direct"]
    assert len(compiled.module._LAUNCHED) == 2


def test_steps_launch_directly_on_the_first_calls_buffers() -> None:
    """`steps` (each kernel alone, for timing) reuses the kernels its own first run recorded."""
    log: list[str] = []
    g = fs.workload("swiglu", dtype=torch.float32, M=4, D=32, H=64)
    compiled = compile_direct(P.unfused(g), log)
    inputs = fs.random_inputs(g, seed=5)
    callables, outputs = compiled.module.steps(*inputs)
    expected = [o.clone() for o in outputs]
    sites = log.count("triton")
    log.clear()
    for o in outputs:
        o.fill_(float("nan"))
    for step in callables:
        step()
    assert log == ["direct"] * sites
    assert all(torch.equal(o, e) for o, e in zip(outputs, expected, strict=True))


def test_turned_off_or_on_another_device_it_is_never_used() -> None:
    log: list[str] = []
    g = fs.workload("mm_bias_gelu", dtype=torch.float32, M=8, K=64, N=48)
    compiled = compile_direct(P.heuristic(g), log)
    compiled.module._FAST_DEVICES = ("cuda",)
    inputs = fs.random_inputs(g, seed=6)
    for _ in range(3):
        compiled(*inputs)
    assert log == ["triton"] * 3 and not compiled.module._LAUNCHED
