"""What a generated kernel uses on its GPU (registers, spilled bytes, shared memory), found by compiling it for
that GPU on the CPU: Triton lowers it to PTX and its bundled `ptxas` assembles the cubin, no GPU needed.

Why: the roofline and the tile config do not say when a config spills. fp32 matmuls (Triton's IEEE dot on the
FMA units) run up to 143x over their roofline on the H200, and every one over 40x is one where ptxas put the
accumulator or operand fragments on the stack, and the learned cost model cannot see that from the plan alone
(benchmarks/costmodel_breakdown.py --compiled). Results are cached on disk by kernel source and target, so a
kernel is compiled for this purpose once."""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict
from typing import Any

import torch

from fusionsearch import settings
from fusionsearch.codegen.module import generate_module
from fusionsearch.errors import CodegenError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.kinds import compiled_kinds
from fusionsearch.kinds.triton_source.index_check import INDEX_FLAG
from fusionsearch.kinds.triton_source.kernel import GeneratedKernel
from fusionsearch.plan.resources import KernelResources

__all__ = ["KernelResources", "kernel_resources", "many_plan_resources", "plan_resources", "resources_pool",
           "sass_figures"]

# Triton's pointer element types by torch dtype.
_POINTEE = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64",
            torch.int8: "i8", torch.uint8: "u8", torch.int16: "i16", torch.int32: "i32", torch.int64: "i64",
            torch.bool: "i1"}


def plan_resources(plan: Any, arch: int = 90, **options: Any) -> list[KernelResources | None]:
    """KernelResources of each kernel of `plan` compiled for CUDA compute capability `arch` (90: H100/H200),
    with codegen `options`; None for kernels that are not fused matmuls (template or decode kernels)."""
    if _interpreting():
        return _in_subprocess(plan, arch, options)
    generated = generate_module(plan, **options)
    # One generated matmul kernel per template or decode step (a two-kernel split-K's reduce kernel is not one).
    compiled = compiled_kinds()
    heads = tuple(f"# fusionsearch {name} kernel" for name in compiled)
    matmuls = iter(gk for gk in generated.kernels if any(head in gk.source for head in heads))
    return [kernel_resources(plan.graph, next(matmuls), generated.source, arch) if k.kind in compiled else None
            for k in plan.kernels]


def many_plan_resources(plans: list[Any], arch: int = 90, workers: int | None = None, pool: Any = None
                        ) -> list[list[KernelResources | None] | None]:
    """plan_resources of many plans, compiled in `workers` fresh processes (default: every core but one), or in
    `pool` (a resources_pool(), kept by a caller that compiles batch after batch); None for a plan that does not
    compile (Triton's error belongs to its trial, not to this)."""
    if not plans:
        return []
    requests = [_request(p, arch, {}) for p in plans]
    if pool is not None:
        found = list(pool.map(_resources_of_request, requests))
    else:
        with resources_pool(min(len(plans), workers or (os.cpu_count() or 2) - 1)) as own:
            found = list(own.map(_resources_of_request, requests))
    return [None if f is None else [None if r is None else KernelResources(**r) for r in f] for f in found]


def resources_pool(workers: int | None = None) -> Any:
    """A process pool for many_plan_resources (`workers` processes, default every core but one)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    count = max(1, workers or (os.cpu_count() or 2) - 1)
    # spawn: the caller may hold a CUDA context, which a forked child must not inherit
    return ProcessPoolExecutor(count, mp_context=multiprocessing.get_context("spawn"))


def _request(plan: Any, arch: int, options: dict[str, Any]) -> str:
    """A plan to compile in another process (a pool worker or the child of _in_subprocess), as JSON."""
    return json.dumps({"graph": plan.graph.to_dict(), "plan": plan.to_dict(), "arch": arch, "options": options})


def _answer(request: str) -> list[dict[str, int] | None]:
    """In that process: plan_resources of the requested plan, as JSON-ready dicts (CodegenError if it fails)."""
    from fusionsearch.graph.spec import graph_from_dict
    from fusionsearch.plan import Plan

    r = json.loads(request)
    g = graph_from_dict(r["graph"])
    return [None if x is None else asdict(x) for x in plan_resources(Plan.from_dict(r["plan"], g, None), r["arch"],
                                                                     **r["options"])]


def _resources_of_request(request: str) -> list[dict[str, int] | None] | None:
    """A pool worker's _answer, None for a plan that does not compile."""
    try:
        return _answer(request)
    except CodegenError:
        return None


def _interpreting() -> bool:
    """Under TRITON_INTERPRET, Triton's own library functions are interpreter functions its compiler cannot
    lower: compiling for a GPU then happens in a child process without it."""
    return settings.current().interpret


def _in_subprocess(plan: Any, arch: int, options: dict[str, Any]) -> list[KernelResources | None]:
    env = settings.child_environment(**{settings.INTERPRET: "0"})
    done = subprocess.run([sys.executable, "-m", "fusionsearch.codegen.resources"],
                          input=_request(plan, arch, options), env=env, capture_output=True, text=True)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise CodegenError(lines[-1] if lines else f"compiling for sm_{arch} failed (exit {done.returncode})")
    return [None if r is None else KernelResources(**r) for r in json.loads(done.stdout)]


def _main() -> None:
    """The child process of _in_subprocess: a plan in JSON on stdin, its resources in JSON on stdout."""
    json.dump(_answer(sys.stdin.read()), sys.stdout)


def kernel_resources(g: OpGraph, gk: GeneratedKernel, module_source: str, arch: int = 90) -> KernelResources:
    """Compile generated kernel `gk` (of the module `module_source`) for `arch`, as the GPU's JIT would
    specialise it for contiguous, 16-byte aligned arguments; CodegenError when Triton or ptxas refuse it."""
    import triton

    from fusionsearch.codegen.runtime import cache_root, source_key

    # "sass": records from before the SASS figures are not read back (their fields would be None)
    key = source_key(f"{triton.__version__}|sm{arch}|sass|{gk.name}|{module_source}")
    path = os.path.join(cache_root(), "resources", f"{key}.json")
    try:
        with open(path) as f:
            return KernelResources(**json.load(f))
    except (OSError, ValueError, TypeError):
        pass
    resources = _compile(g, gk, module_source, arch)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(asdict(resources), f)
    os.replace(tmp, path)
    return resources


def _compile(g: OpGraph, gk: GeneratedKernel, module_source: str, arch: int) -> KernelResources:
    cubin, shared = compile_kernel(g, gk, module_source, arch)
    registers, stack = _usage(cubin)
    return KernelResources(registers, stack, shared, **sass_figures(_sass(cubin)))


def kernel_sass(g: OpGraph, gk: GeneratedKernel, module_source: str, arch: int = 90) -> str:
    """cuobjdump's SASS listing of generated kernel `gk` compiled for `arch` (no GPU needed): what the
    benchmarks' instruction records read."""
    return _sass(compile_kernel(g, gk, module_source, arch)[0])


def compile_kernel(g: OpGraph, gk: GeneratedKernel, module_source: str, arch: int) -> tuple[bytes, int]:
    """(cubin, shared-memory bytes) of `gk` compiled for `arch` as the GPU's JIT would specialise it for
    contiguous, 16-byte aligned arguments; CodegenError when Triton or ptxas refuse it."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    from fusionsearch.codegen.runtime import load_source

    fn = getattr(load_source(module_source), gk.name)
    if not isinstance(fn, JITFunction):  # under TRITON_INTERPRET the module holds interpreter functions
        fn = JITFunction(fn.fn)
    signature, constants, strides = _signature(g, gk)
    aligned = [i for i, name in enumerate(fn.arg_names)
               if signature[name].startswith("*") or (name in strides and strides[name] % 16 == 0)]
    attrs = {(i,): [["tt.divisibility", 16]] for i in aligned}
    src = ASTSource(fn=fn, signature=signature, attrs=attrs,
                    constexprs={(fn.arg_names.index(name),): v for name, v in constants.items()})
    try:
        options = {"num_warps": gk.num_warps, "num_stages": gk.num_stages}
        if gk.index_flag:  # as the module launches it: its index checks' device asserts compiled in
            options.update(debug=True, sanitize_overflow=False)
        compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
    except Exception as e:  # Triton's own errors (out of shared memory, unsupported op) name the cause
        raise CodegenError(f"compiling {gk.name} for sm_{arch} failed: {type(e).__name__}: {str(e)[:300]}") from None
    return compiled.asm["cubin"], int(compiled.metadata.shared)


def _signature(g: OpGraph, gk: GeneratedKernel) -> tuple[dict[str, str], dict[str, int], dict[str, int]]:
    """Triton parameter types as the JIT would specialise the launch on a GPU: each tensor pointer by its
    dtype, a stride of 1 folded to a constant, other strides int32; returns (signature, constants, strides)."""
    signature: dict[str, str] = {}
    constants: dict[str, int] = {}
    strides: dict[str, int] = {}
    for a in gk.args:
        node = g.node(a.node)
        signature[a.ptr] = "*" + _POINTEE[node.dtype]
        for name, value in zip(a.strides, node.strides, strict=True):
            if value == 1:
                signature[name], constants[name] = "constexpr", 1
            else:
                signature[name], strides[name] = "i32", value
    if gk.index_flag:
        signature[INDEX_FLAG] = "*i32"
    if gk.workspace:
        signature["ws_ptr"] = "*fp32"
    if gk.semaphores:
        signature["sem_ptr"] = "*i32"
    if gk.routing:
        signature["rt_ptr"] = "*i32"
    for name, value in gk.constexprs.items():
        signature[name], constants[name] = "constexpr", value
    return signature, constants, strides


def _cuobjdump(cubin: bytes, flag: str) -> str:
    """What Triton's bundled cuobjdump prints for `cubin` with `flag`."""
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    try:
        return subprocess.run([tool, flag, f.name], capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(f.name)


def _usage(cubin: bytes) -> tuple[int, int]:
    """(registers, stack bytes) per thread, from the cubin's resource usage as Triton's cuobjdump reports it."""
    out = _cuobjdump(cubin, "--dump-resource-usage")
    m = re.search(r"REG:(\d+) STACK:(\d+)", out)
    if m is None:
        raise CodegenError(f"cuobjdump reported no resource usage: {out[:200]!r}")
    return int(m[1]), int(m[2])


def _sass(cubin: bytes) -> str:
    return _cuobjdump(cubin, "-sass")


# One SASS instruction as cuobjdump prints it: /*address*/ [@predicate] OPCODE operands ;
_SASS_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")


def _code_and_loops(sass: str) -> tuple[list[tuple[int, str, str]], list[tuple[int, int]]]:
    """cuobjdump's listing as (address, opcode, operands), and the loops: the address range of each backward
    branch (BRA to a lower address)."""
    code = [(int(m[1], 16), m[2], m[3]) for m in _SASS_LINE.finditer(sass)]
    if not code:
        raise CodegenError("cuobjdump printed no SASS instructions")
    loops = []
    for address, opcode, operands in code:
        target = re.match(r"\s*0x([0-9a-f]+)", operands)
        if opcode.startswith("BRA") and target and int(target[1], 16) < address:
            loops.append((int(target[1], 16), address))
    return code, loops


def _in_loop(address: int, loops: list[tuple[int, int]]) -> bool:
    return any(start <= address <= end for start, end in loops)


def loop_opcodes(sass: str) -> collections.Counter[str]:
    """The instructions inside the listing's loops by opcode (its first dot-separated part: LDS, HGMMA, ...):
    every loop's together (a split-K tail's loop over the partials with the K loop; `each_loop_opcodes` apart)."""
    code, loops = _code_and_loops(sass)
    return collections.Counter(op.split(".")[0] for a, op, _ in code if _in_loop(a, loops))


def each_loop_opcodes(sass: str) -> list[collections.Counter[str]]:
    """Each outermost loop's instructions by opcode, in address order: a kernel's K loop apart from, say, its
    split-K tail's loop over the partials."""
    code, loops = _code_and_loops(sass)
    outer = [(s, e) for s, e in loops if not any(s2 <= s and e <= e2 and (s2, e2) != (s, e) for s2, e2 in loops)]
    return [collections.Counter(op.split(".")[0] for a, op, _ in code if s <= a <= e) for s, e in sorted(set(outer))]


def sass_figures(sass: str) -> dict[str, int]:
    """The SASS figures of KernelResources from cuobjdump's listing: a loop is the address range of a backward
    branch; local-memory ops are LDL and STL (ptxas's spill and fill)."""
    code, loops = _code_and_loops(sass)
    local = [address for address, opcode, _ in code if opcode.startswith(("LDL", "STL"))]
    looped_local = sum(_in_loop(a, loops) for a in local)
    return {"instructions": len(code), "loop_instructions": sum(_in_loop(a, loops) for a, _, _ in code),
            "loops": len(loops), "loop_local_ops": looped_local, "other_local_ops": len(local) - looped_local}


if __name__ == "__main__":
    try:
        _main()
    except CodegenError as e:
        sys.exit(str(e))
