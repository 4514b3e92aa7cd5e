"""Assembling a plan into one Python module: its Triton kernels and `run(*inputs)`, which allocates the
intermediates and launches the kernels in order. The same source runs in-process and when exported."""

from __future__ import annotations

from dataclasses import dataclass

from fusionsearch.codegen.kernel import GeneratedKernel
from fusionsearch.codegen.pointwise import generate_pointwise
from fusionsearch.codegen.templates import generate_template
from fusionsearch.graph.registry import dtype_name
from fusionsearch.search.plan import ExternKernel, Plan, PointwiseKernel, TemplateKernel

PRELUDE = '''\
import torch
import triton
import triton.language as tl

try:
    from triton.language.extra import libdevice
except ImportError:  # older Triton
    from triton.language.math import libdevice  # type: ignore

EXTERNS = []


def _alloc(shape, dtype, device, poison):
    if not poison:
        return torch.empty(shape, dtype=dtype, device=device)
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    if dtype == torch.bool:
        return torch.zeros(shape, dtype=dtype, device=device)
    return torch.full(shape, torch.iinfo(dtype).max, dtype=dtype, device=device)


_SEMAPHORES = {}


def _semaphores(kernel, count, device):
    """A kernel's arrival counters: zeroed once per device and kept, since the kernel leaves them at zero."""
    key = (kernel, str(device))
    if key not in _SEMAPHORES:
        _SEMAPHORES[key] = torch.zeros(count, dtype=torch.int32, device=device)
    return _SEMAPHORES[key]
'''

EXTERN_LOADER = '''

def _load_externs():
    """Resolve the extern ops listed in externs.json beside this file (aten ops, looked up by attribute)."""
    import json
    import os
    import re

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "externs.json")
    with open(path) as f:
        specs = json.load(f)

    def decode(value, tensors):
        if isinstance(value, dict) and set(value) == {"input"}:
            return tensors[value["input"]]
        if isinstance(value, dict) and set(value) == {"dtype"}:
            return getattr(torch, value["dtype"])
        if isinstance(value, list):
            return [decode(v, tensors) for v in value]
        return value

    def make(spec):
        if not re.match(r"^aten\\.[A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)?$", spec["target"]):
            raise ValueError("externs.json: bad target")
        op = torch.ops.aten
        for part in spec["target"].split(".")[1:]:
            op = getattr(op, part)

        def call(*tensors):
            out = op(*decode(spec["args"], tensors), **{k: decode(v, tensors) for k, v in spec["kwargs"].items()})
            return out[spec.get("output_index", 0)] if isinstance(out, (tuple, list)) else out

        return call

    EXTERNS[:] = [make(s) for s in specs]
'''


@dataclass
class PlanModule:
    """The generated module's source, its kernels, and the extern specs it calls (by position)."""

    source: str
    kernels: list[GeneratedKernel]
    externs: list[dict[str, object]]


def generate_module(plan: Plan, upcast_prologue: bool = False, upcast_epilogue: bool = True,
                    upcast_pointwise: bool = True, serial_split_k: bool = False) -> PlanModule:
    """Generate the whole plan as one module; a pure function of (graph, plan, options).

    The module has `run(*inputs)` (allocate, launch every step, return the outputs) and `steps(*inputs)`,
    which runs once and returns one callable per plan kernel over the same buffers, to time kernels alone."""
    g = plan.graph
    stored = plan.stored()
    buf = {n: f"buf{i}" for i, n in enumerate(g.topo_order())}
    kernels: list[GeneratedKernel] = []
    externs: list[dict[str, object]] = []
    head = [f"    if len(inputs) != {len(g.inputs)}:",
            f"        raise ValueError('this plan takes {len(g.inputs)} input tensors')",
            f"    {', '.join(buf[n] for n in g.inputs)}, = inputs",
            f"    device = {buf[g.inputs[0]]}.device"]
    if any(isinstance(k, ExternKernel) for k in plan.kernels):
        head += ["    if not EXTERNS:", "        _load_externs()"]
    body: list[str] = []
    launches: list[list[str]] = []  # per plan kernel, the statements that run it again on the same buffers
    allocated = set(g.inputs)
    for i, k in enumerate(plan.kernels):
        body.append(f"    # step {i}: {k.kind}")
        if isinstance(k, ExternKernel):
            node = g.node(k.node)
            args = ", ".join(buf[s] for s in node.inputs)
            body.append(f"    {buf[k.node]} = EXTERNS[{len(externs)}]({args})")
            launches.append([f"EXTERNS[{len(externs)}]({args})"])
            externs.append({"target": node.attrs["target"], "args": node.attrs.get("args", []),
                            "kwargs": node.attrs.get("kwargs", {}), "output_index": node.attrs.get("output_index", 0)})
            allocated.add(k.node)
            continue
        name = f"fs_kernel_{i}"
        if isinstance(k, TemplateKernel):
            step = generate_template(g, k, stored[i], name, upcast_prologue, upcast_epilogue, serial_split_k)
        else:
            assert isinstance(k, PointwiseKernel)
            pk = generate_pointwise(g, k, stored[i], name, upcast_pointwise)
            if pk is None:
                body.append("    # (dead nodes: nothing reads them)")
                launches.append([])
                continue
            step = [pk]
        for n in sorted(stored[i], key=list(buf).index):
            if n not in allocated:
                node = g.node(n)
                dt = f"torch.{dtype_name(node.dtype)}"
                body.append(f"    {buf[n]} = _alloc({tuple(node.shape)!r}, {dt}, device, poison)")
                allocated.add(n)
        if step[0].workspace:
            # Poisoned too: a split-K partial tile that is never written must not read as stale sums.
            body.append(f"    ws{i} = _alloc(({step[0].workspace},), torch.float32, device, poison)")
        calls = []
        for gk in step:
            args = []
            for a in gk.args:
                args.append(buf[a.node])
                if a.strides:
                    args.append(f"*{buf[a.node]}.stride()")
            if gk.workspace:
                args.append(f"ws{i}")
            if gk.semaphores:
                args.append(f"_semaphores({gk.name!r}, {gk.semaphores}, device)")
            meta = [f"{c}={v}" for c, v in gk.constexprs.items()]
            meta += [f"num_warps={gk.num_warps}", f"num_stages={gk.num_stages}"]
            calls.append(f"{gk.name}[{gk.grid!r}]({', '.join(args + meta)})")
        body += [f"    {c}" for c in calls]
        launches.append(calls)
        kernels.extend(step)
    outputs = f"[{', '.join(buf[o] for o in g.outputs)}]"
    run = ["def run(*inputs, poison=False):", *head, *body, f"    return {outputs}"]
    steps = ["def steps(*inputs, poison=False):",
             '    """Run the plan once, then return (one callable per plan kernel, outputs) over its buffers."""',
             *head, *body]
    for i, calls in enumerate(launches):
        steps.append("")
        steps.append(f"    def step_{i}():")
        steps += [f"        {c}" for c in calls] or ["        pass"]
    steps.append(f"    return [{', '.join(f'step_{i}' for i in range(len(launches)))}], {outputs}")
    parts = [f"# Generated by fusionsearch for graph {g.signature_hash()}: {len(kernels)} Triton kernels, "
             f"{len(externs)} extern calls.", "# Standalone: needs torch and triton only.", PRELUDE]
    if externs:
        parts.append(EXTERN_LOADER)
    parts += ["\n" + gk.source for gk in kernels]
    parts.append("\n" + "\n".join(run) + "\n")
    parts.append("\n" + "\n".join(steps) + "\n")
    return PlanModule("\n".join(parts), kernels, externs)
