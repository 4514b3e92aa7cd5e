"""The extern kind: one graph node that only PyTorch can run (an aten op fusionsearch has no rule for), called
from the generated module through the extern specs it lists."""

from __future__ import annotations

from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.hardware import Hardware
from fusionsearch.kinds.base import KernelCode, KernelKind, ModuleContext
from fusionsearch.kinds.counting import KernelEstimate
from fusionsearch.plan.kernels import ExternKernel


class ExternKind(KernelKind):
    """ExternKernel: its inputs read once, its output written once, its arithmetic not modelled."""

    name = "extern"
    onehot = "kind_extern"
    kernel_type = ExternKernel

    def estimate(self, g: OpGraph, kernel: ExternKernel, i: int, stored: set[str], hw: Hardware) -> KernelEstimate:
        node = g.node(kernel.node)
        read = sum(g.node(src).nbytes for src in set(node.inputs))
        written = node.nbytes
        memory = (read + written) / hw.bandwidth_bytes_per_s * 1e6
        return KernelEstimate(i, "extern", read, written, 0, memory + hw.launch_us, memory, 0.0, 0, 0)

    def generate(self, ctx: ModuleContext, kernel: ExternKernel, stored: set[str], name: str) -> KernelCode:
        node = ctx.graph.node(kernel.node)
        args = ", ".join(ctx.buffers[s] for s in node.inputs)
        call = f"EXTERNS[{len(ctx.externs)}]({args})"
        ctx.externs.append({"target": node.attrs["target"], "args": node.attrs.get("args", []),
                            "kwargs": node.attrs.get("kwargs", {}), "output_index": node.attrs.get("output_index", 0)})
        return KernelCode(node=kernel.node, expression=call)


EXTERN = ExternKind()
