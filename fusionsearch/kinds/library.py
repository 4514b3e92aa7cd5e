"""The library kind: a matmul with nothing fused, run by PyTorch's own matmul (cuBLAS on NVIDIA GPUs)."""

from __future__ import annotations

from collections.abc import Callable

from fusionsearch.errors import PlanError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.hardware import Hardware
from fusionsearch.kinds.base import KernelCode, MatmulKind, ModuleContext, matmul_flops
from fusionsearch.kinds.counting import KernelEstimate
from fusionsearch.plan.kernels import LibraryKernel
from fusionsearch.plan.tile import TileConfig

# A library matmul (cuBLAS) on the H200, inputs already in memory (../shared/anchors, cublas_bare_h200.json):
# the large problems run at the measured matmul peak (4096^3 in 184.6 us, the 8192^3 peak's 194.6 us floor);
# the small-M ones take about 10 us more than their bytes at copy bandwidth (M16 K4096 N4096 18.9 us for
# 7.9; M64 8.1 -> 17.8; M16 K8192 N8192 31.4 -> 43.2). Its time is max(flop / peak, bytes / BW + this).
LIBRARY_FIXED_US = 10.0
LIBRARY = "library"  # its one choice in the search space


class LibraryKind(MatmulKind):
    """LibraryKernel: offered by a space built with `library=True`; nothing can be fused into it."""

    name = "library"
    runs_in_library = True  # offered only in a space built with library=True; no one-hot bit
    kernel_type = LibraryKernel

    def estimate(self, g: OpGraph, kernel: LibraryKernel, i: int, stored: set[str], hw: Hardware) -> KernelEstimate:
        """Its operands (and bias) read once, its output written once, at the measured library figures
        (LIBRARY_FIXED_US); no tile config, so no waves or re-reads."""
        p = self.problem(g, kernel.matmul)
        ops = self.operands(g, kernel.matmul)
        read = sum(g.node(src).nbytes for src in set(ops.values()))
        written = g.node(kernel.matmul).nbytes
        flops = matmul_flops(p) + (g.node(kernel.matmul).numel if "bias" in ops else 0)
        memory = (read + written) / hw.bandwidth_bytes_per_s * 1e6
        compute = flops / hw.peak(g.node(ops["A"]).dtype) * 1e6
        return KernelEstimate(i, "library", read, written, flops,
                              max(memory + LIBRARY_FIXED_US, compute) + hw.launch_us, memory, compute, 0, 0)

    def generate(self, ctx: ModuleContext, kernel: LibraryKernel, stored: set[str], name: str) -> KernelCode:
        return KernelCode(node=kernel.matmul, expression=library_call(ctx.graph, kernel.matmul, ctx.buffers))

    def choices(self, g: OpGraph, mm: str, fits: Callable[[OpGraph, str, TileConfig], bool] | None,
                limit: int) -> tuple[str, ...]:
        return (LIBRARY,)

    def kernel(self, mm: str, label: str, prologue_a: tuple[str, ...], prologue_b: tuple[str, ...],
               epilogue: tuple[str, ...]) -> LibraryKernel:
        if prologue_a or prologue_b or epilogue:
            raise PlanError(f"matmul {mm!r} runs in PyTorch's matmul (the library), so nothing can be fused into it")
        return LibraryKernel(mm)


def library_call(g: OpGraph, mm: str, buf: dict[str, str]) -> str:
    """The PyTorch call computing matmul node `mm` from its operands' buffers: the graph's matmul ops are
    torch's own, so this is their definition, run by cuBLAS on NVIDIA GPUs. Only numbers from the node's
    attributes enter the source (checked numbers at graph build)."""
    node = g.node(mm)
    args = [buf[s] for s in node.inputs]
    if node.op in ("mm", "bmm"):
        return f"torch.{node.op}({args[0]}, {args[1]})"
    if node.op == "addmm":
        beta, alpha = float(node.attrs.get("beta", 1)), float(node.attrs.get("alpha", 1))
        return f"torch.addmm({args[0]}, {args[1]}, {args[2]}, beta={beta!r}, alpha={alpha!r})"
    if node.op == "linear":
        return f"torch.nn.functional.linear({args[0]}, {args[1]}, {args[2] if len(args) == 3 else 'None'})"
    raise PlanError(f"matmul {mm!r} ({node.op}) has no library call; give it a tile config")


LIBRARY_KIND = LibraryKind()
